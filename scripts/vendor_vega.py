#!/usr/bin/env python3
"""Vendor the pinned Vega, Vega-Lite and vega-embed builds into normbench/site/assets/vendor/ from the npm registry.

Each tarball is checked against the npm ``integrity`` (SHA-512) written below before anything is copied, so a
changed upload never lands. Run it after changing a pin, then commit the files it writes:

    python scripts/vendor_vega.py            # download, verify, write assets/vendor/
    python scripts/vendor_vega.py --check    # verify that the committed files are what the pins produce

Why these versions: vl-convert-python (the build-time SVG renderer, pinned in constraints.txt) bundles Vega 6.2.0 and
Vega-Lite 6.4.1 for ``vl_version="6.4"``, and Altair's ``SCHEMA_VERSION`` is v6.4.1: the static picture and the
interactive view then come from the same compiler and the same renderer. vega-embed 7.0.2 is the one vl-convert
bundles. vega-interpreter (Vega's CSP-safe expression evaluator) ships only as an ES module importing ``vega-util``;
it is wrapped here into a plain script that takes ``vega-util``'s three functions from the global ``vega`` (which
re-exports them) and sets ``vega.expressionInterpreter``, the hook vega-embed uses when called with ``ast: true``.
The tooltip and embed stylesheets exist upstream only as JS strings (injected as ``<style>``, which our CSP forbids):
they are written out as .css files.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import re
import sys
import tarfile
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEST = REPO / "normbench" / "site" / "assets" / "vendor"
REGISTRY = "https://registry.npmjs.org"

# name: (version, npm dist.integrity)
PINS = {
    "vega": ("6.2.0",
             "sha512-BIwalIcEGysJdQDjeVUmMWB3e50jPDNAMfLJscjEvpunU9bSt7X1OYnQxkg3uBwuRRI4nWfFZO9uIW910nLeGw=="),
    "vega-lite": ("6.4.1",
                  "sha512-KO3ybHNouRK4A0al/+2fN9UqgTEfxrd/ntGLY933Hg5UOYotDVQdshR3zn7OfXwQ7uj0W96Vfa5R+QxO8am3IQ=="),
    "vega-embed": ("7.0.2",
                   "sha512-ZHQPWSs9mUTGJPZ5yQVhHV+OLDCoTIjR//De93vG6igZX1MQCVo03ePWlfWCUAnPV1IsKfeJLqA3K/Qd11bAFQ=="),
    "vega-interpreter": ("2.2.1",
                         "sha512-o+4ZEme2mdFLewlpF76dwPWW2VkZ3TAF3DMcq75/NzA5KPvnN4wnlCM8At2FVawbaHRyGdVkJSS5ROF5KwpHPQ=="),
    "vega-tooltip": ("1.0.0",
                     "sha512-P1R0JP29v0qnTuwzCQ0SPJlkjAzr6qeyj+H4VgUFSykHmHc1OBxda//XBaFDl/bZgIscEMvjKSjZpXd84x3aZQ=="),
}

INTERPRETER_IMPORT = "import { ascending, isString, DisallowedObjectProperties } from 'vega-util';"
INTERPRETER_EXPORT = "export { expression as expressionInterpreter };"


def fetch(name: str) -> dict[str, bytes]:
    """The files of ``name``'s pinned tarball (paths without the leading ``package/``), integrity-checked."""
    version, integrity = PINS[name]
    url = f"{REGISTRY}/{name}/-/{name}-{version}.tgz"
    with urllib.request.urlopen(url, timeout=120) as r:
        blob = r.read()
    algo, want = integrity.split("-", 1)
    got = base64.b64encode(hashlib.new(algo, blob).digest()).decode()
    if got != want:
        raise SystemExit(f"{url}: {algo} is {got}, the pin says {want}; refusing to vendor it")
    out = {}
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
        for m in tar.getmembers():
            if m.isfile():
                out[m.name.split("/", 1)[1]] = tar.extractfile(m).read()
    return out


def css_from_ts(src: bytes) -> bytes:
    """The stylesheet held in an upstream ``style.ts`` (``export default `...`;``)."""
    m = re.search(r"export default `(.*?)`;", src.decode(), re.S)
    if not m or "${" in m.group(1):
        raise SystemExit("style.ts no longer holds one plain template literal: update css_from_ts")
    return m.group(1).encode()


def wrap_interpreter(src: bytes) -> bytes:
    """vega-interpreter's ES module as a classic script that installs ``vega.expressionInterpreter``."""
    text = src.decode()
    text = re.sub(r"^//# sourceMappingURL=.*$", "", text, flags=re.M)
    if text.count(INTERPRETER_IMPORT) != 1 or text.count(INTERPRETER_EXPORT) != 1 or "\nimport " in text.replace(
            INTERPRETER_IMPORT, ""):
        raise SystemExit("vega-interpreter's imports/exports changed: update wrap_interpreter")
    text = text.replace(INTERPRETER_IMPORT, "const { ascending, isString, DisallowedObjectProperties } = vega;")
    text = text.replace(INTERPRETER_EXPORT, "vega.expressionInterpreter = expression;")
    version = PINS["vega-interpreter"][0]
    head = (f"/* vega-interpreter {version} (BSD-3-Clause, see vega.LICENSE), wrapped by scripts/vendor_vega.py from "
            "build/vega-interpreter.js */\n")
    return (head + "(function (vega) {\n'use strict';\n" + text.strip() + "\n})(window.vega);\n").encode()


def build() -> dict[str, bytes]:
    """Every vendored file, by name."""
    pk = {name: fetch(name) for name in PINS}
    files = {
        "vega.min.js": pk["vega"]["build/vega.min.js"],
        "vega-lite.min.js": pk["vega-lite"]["build/vega-lite.min.js"],
        "vega-embed.min.js": pk["vega-embed"]["build/vega-embed.min.js"],
        "vega-interpreter.js": wrap_interpreter(pk["vega-interpreter"]["build/vega-interpreter.js"]),
        "vega-tooltip.css": css_from_ts(pk["vega-tooltip"]["src/style.ts"]),
        "vega-embed.css": css_from_ts(pk["vega-embed"]["src/style.ts"]),
        # vega-interpreter ships no LICENSE file; it is part of the vega monorepo under vega's BSD-3-Clause licence.
        "vega.LICENSE": pk["vega"]["LICENSE"],
        "vega-lite.LICENSE": pk["vega-lite"]["LICENSE"],
        "vega-embed.LICENSE": pk["vega-embed"]["LICENSE"],
        "vega-tooltip.LICENSE": pk["vega-tooltip"]["LICENSE"],
    }
    files["VERSIONS.json"] = (json.dumps({n: v for n, (v, _) in PINS.items()}, indent=2) + "\n").encode()
    return files


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed files instead of writing")
    args = ap.parse_args(argv)
    files = build()
    if args.check:
        bad = [n for n, b in files.items() if not (DEST / n).is_file() or (DEST / n).read_bytes() != b]
        extra = sorted(p.name for p in DEST.iterdir() if p.name not in files) if DEST.is_dir() else []
        for n in bad:
            print(f"differs from the pins: {DEST / n}")
        for n in extra:
            print(f"not produced by the pins: {DEST / n}")
        return 1 if bad or extra else 0
    DEST.mkdir(parents=True, exist_ok=True)
    for n, b in files.items():
        (DEST / n).write_bytes(b)
        print(f"{len(b):>9,d}  {DEST.relative_to(REPO) / n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
