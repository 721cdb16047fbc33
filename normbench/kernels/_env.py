"""Whether Triton runs kernels in its CPU interpreter, read live (importing this does not import Triton)."""

from __future__ import annotations

import os
import sys

INTERPRET_ENV = "TRITON_INTERPRET"


def interpret_requested() -> bool:
    """Whether Triton would build kernels for its CPU interpreter if they were decorated now."""
    try:
        from triton import knobs

        return bool(knobs.runtime.interpret)
    except (ImportError, AttributeError):  # Triton < 3.4 reads the variable directly
        return os.environ.get(INTERPRET_ENV, "0").strip().lower() in ("1", "true", "on", "yes")


def language_mode() -> str | None:
    """How the already-imported ``triton.language`` was built: "interpreter", "compiler", or None if not imported.

    Triton decorates its own standard library (``tl.sum``, ...) when ``triton.language`` is first imported, so the
    interpreter works only if ``TRITON_INTERPRET=1`` was set before anything imported Triton.
    """
    lang = sys.modules.get("triton.language")
    if lang is None:
        return None
    return "interpreter" if type(getattr(lang, "sum", None)).__name__ == "InterpretedFunction" else "compiler"
