"""Clean machine-readable stdout: while a ``--json`` command runs, everything else printed goes to stderr."""

from __future__ import annotations

import contextlib
import io
import os
import sys

_document: io.TextIOBase | None = None


def document_stream():
    """Where a command writes its machine-readable output (the real stdout, even while it is diverted)."""
    return _document if _document is not None else sys.stdout


@contextlib.contextmanager
def machine_readable():
    """Divert stdout (Python's and, when it is a real file, file descriptor 1) to stderr for the block.

    Plugins print at import or in ``forward``; C extensions write to the file descriptor directly. Neither may end
    up inside a ``--json`` document, so only :func:`document_stream` reaches the original stdout.
    """
    global _document
    old = sys.stdout
    try:
        fd = old.fileno()
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        fd = None  # a captured stream (pytest's capsys): Python-level diversion is all there is
    old.flush()
    saved = None
    if fd is not None:
        saved = os.dup(fd)
        os.dup2(sys.stderr.fileno(), fd)
        stream = os.fdopen(saved, "w", encoding=getattr(old, "encoding", None) or "utf-8", closefd=False)
    else:
        stream = old
    _document, sys.stdout = stream, sys.stderr
    try:
        yield stream
    finally:
        stream.flush()
        sys.stderr.flush()
        sys.stdout, _document = old, None
        if saved is not None:
            os.dup2(saved, fd)
            os.close(saved)
