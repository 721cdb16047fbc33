r"""The fast path of record validation: :func:`normbench.records.schema.json_schema` compiled by jsonschema-rs.

jsonschema (pure Python) costs ~1 ms a kernel record and ~2.7 ms an accuracy record; jsonschema-rs (Rust, draft
2020-12) checks the same schema in a few microseconds. It only ever answers "valid": a record it does not call valid
goes to the reference validator, which finds every problem (so the problems are the reference's, word for word).
"Valid" from the fast path must therefore imply valid for the reference. Where the two differ, the record is sent to
the reference too:

* ``1.0`` is an integer for JSON Schema (and jsonschema-rs), not for normbench: the compiled schema carries one extra
  keyword next to each "integer" type, ``nbNoFloat``, which refuses a Python float there (derived from
  :func:`json_schema`, never written by hand, never published);
* Python objects JSON has not (tuples, sets, dict subclasses, keys that are not strings, NaN/inf, ints beyond 64 bits,
  strings with lone surrogates) and strings made only of Python whitespace (``\S`` differs between Python's ``re``
  and Rust's regex for U+001C..U+001F) are not given to it: :func:`plain` walks the record first.

``NORMBENCH_VALIDATOR`` picks the path: ``auto`` (default: the fast path where jsonschema-rs is installed),
``jsonschema`` (the reference only), ``both`` (both on every record, raising on any disagreement: the test suite
runs so, which makes every bad-record and hostile-record test a check of the fast path).
"""

from __future__ import annotations

import math

_INT_LIMIT = 2 ** 63


class _NoFloat:
    """``nbNoFloat``: where the schema says "integer", a Python float (``1.0``) is not one."""

    def __init__(self, parent_schema, value, schema_path):
        pass

    def validate(self, instance):
        if isinstance(instance, float):
            raise ValueError(f"{instance!r} is a float, not an integer")


def fast_schema(node):
    """:func:`json_schema` for jsonschema-rs: each subschema whose type allows "integer" also carries ``nbNoFloat``."""
    if isinstance(node, list):
        return [fast_schema(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: (v if k in ("enum", "const", "description", "title") else fast_schema(v)) for k, v in node.items()}
    t = node.get("type")
    if t == "integer" or (isinstance(t, list) and "integer" in t):
        out["nbNoFloat"] = True
    return out


def plain(obj) -> bool:
    """Whether ``obj`` is plain JSON as ``json.loads`` makes it, with nothing on which the two validators differ."""
    stack = [obj]
    while stack:
        v = stack.pop()
        t = type(v)
        if t is dict:
            for k in v:   # keys checked here, not pushed: half the values of a record are its keys
                if type(k) is not str or k.isspace() or not k.isascii() and not _utf8(k):
                    return False
            stack.extend(v.values())
        elif t is list:
            stack.extend(v)
        elif t is str:
            if v.isspace() or not v.isascii() and not _utf8(v):
                return False
        elif t is float:
            if not math.isfinite(v):
                return False
        elif t is int:
            if not -_INT_LIMIT <= v < _INT_LIMIT:
                return False
        elif v is not None and t is not bool:
            return False
    return True


def _utf8(s: str) -> bool:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:   # a lone surrogate (json.loads reads "\ud800")
        return False
    return True




def compile_schema(schema: dict):
    """A jsonschema-rs validator of ``schema`` (with ``nbNoFloat``), or None where jsonschema-rs is not installed."""
    try:
        import jsonschema_rs
    except ImportError:
        return None
    return jsonschema_rs.Draft202012Validator(fast_schema(schema), validate_formats=False,
                                              keywords={"nbNoFloat": _NoFloat})
