"""The record pages (a machine's records, their detail loaded on demand) and the rejected records' page.
"""

from __future__ import annotations

import gzip
import json
import math
from collections import Counter

from normbench.records.schema import INVALID_FLAGS
from normbench.site import aggregate as agg
from normbench.site import downloads
from normbench.site import tables as _tables
from normbench.site.pages.base import Page, _s, device_file, flag_badges, norm_file, timing_text
from normbench.site.pages.core import SiteCore
from normbench.site.records import Entry
from normbench.site.repro import command


class RecordPages(SiteCore):
    """The record pages of a ``Site``."""

    @staticmethod
    def record_summary(e: Entry) -> str:
        """A record's one line on its machine's record page (its detail is loaded on demand): norm, kind and the
        config that tells it from its neighbours."""
        rec, cfg = e.rec, e.rec.get("config") or {}
        keys = (("backend", "shape_label", "dtype", "pass", "timing", "layout") if e.kind == "kernel"
                else ("task", "model", "placement", "seed", "lr"))
        parts = [_text(cfg[k]) for k in keys if cfg.get(k) not in (None, "")]
        return f"{rec['norm']['name']} · {rec['kind']}" + (": " + " · ".join(parts) if parts else "")

    def record_flags(self, e: Entry) -> dict:
        rec = e.rec
        return (agg.record_flags(rec) if e.kind == "kernel"
                else {f: _s((rec.get("flag_reasons") or {}).get(f)) for f in rec.get("flags") or []})

    def record_data(self, entries: list[Entry]) -> str:
        """A record page's data file (``data/machines/<page>.js``): each record's detail, which ``assets/site.js``
        (``nbRecords``) shows when the record is opened. Every string once in ``s``, each list of keys once in ``k``
        (a machine's records share a few), each run's provenance once in ``p`` (``[keys, values]``); a record is
        ``[config keys, config values, metrics keys, metrics values, provenance, file, position in it, check, timing,
        [[flag label, flag, reason]...], reproduce command, 0 ranked | 1 flagged | 2 invalid]`` with strings as
        indices (null where absent), compressed as every data file is (``tables.data_script``)."""
        strings: dict[str, int] = {}
        keysets: dict[tuple, int] = {}
        provs: dict[str, int] = {}
        prov_rows: list = []

        def st(v):
            return None if v is None else strings.setdefault(v, len(strings))

        named: dict[tuple, int] = {}   # a part's keys (as text) -> its key set: a machine's records share a few

        def part(obj) -> list:
            flat = _flat(obj)
            names = tuple([k for k, _ in flat])
            ks = named.get(names)
            if ks is None:   # the keys take their indices in ``s`` here, before the values, as they always did
                ks = named[names] = keysets.setdefault(tuple([st(k) for k in names]), len(keysets))
            return [ks, [st(v) for _, v in flat]]

        recs = []
        for e in entries:
            rec = e.rec
            prov = {k: v for k, v in rec["provenance"].items() if k != "hardware"}
            pkey = _text(prov)
            if pkey not in provs:
                provs[pkey] = len(prov_rows)
                prov_rows.append(part(rec["provenance"]))
            flags = self.record_flags(e)
            chk = rec.get("check")
            check = (f"check: {_text(chk.get('status'))}" if isinstance(chk, dict)
                     else "never checked (check: null)" if chk is None else None)
            status = 2 if any(f in INVALID_FLAGS for f in flags) else 1 if flags else 0
            recs.append(part(rec.get("config")) + part({k: v for k, v in rec["metrics"].items() if k != "curve"})
                        + [provs[pkey], st(e.path), e.index, st(check), st(timing_text(rec)),
                           [[st(label), st(f), st(why)] for label, f, why in flag_badges(flags)],
                           st(command(rec)), status])
        return _tables.data_script("nbRecords", (), {"s": list(strings), "k": [list(k) for k in keysets],
                                                      "p": prov_rows, "r": recs})

    def record_page(self, path: str, entries: list[Entry]) -> Page:
        """The records of one machine (or one bucket of them): a line per record, anchored by its key, whose detail
        (flags with reasons, the reproduce command, config, metrics, its run's provenance) the page's script loads
        from the machine's data file when the record is opened; the records as validated in ``<page>.json.gz``."""
        from normbench.site.records import record_data_file

        hw = entries[0].rec["provenance"]["hardware_id"]
        p = Page(path, "record.html", f"Records of {hw}", lead=self.hw_name(hw),
                 crumbs=[("devices.html", "Devices"), (device_file(hw), hw)])
        data = record_data_file(path)
        self.data_files[data] = self.record_data(entries)
        # The page's records exactly as validated. gzip (no name, no time: the same records give the same bytes): a
        # page's records repeat their run's provenance and config keys, so they compress ~10x.
        text = "[\n" + ",\n".join(json.dumps(e.rec, ensure_ascii=False, separators=(",", ":")) for e in entries)
        # A download like the CSV (``downloads.GZIP``): a 1,000-record machine's 2.97 MB of JSON in 0.395 MB and 76 ms
        # (level 9, Python's default: 0.386 MB in 121 ms; level 1: 0.555 MB in 27 ms).
        self.extra_files[entries[0].json_file] = gzip.compress((text + "\n]\n").encode("utf-8"),
                                                               compresslevel=downloads.GZIP, mtime=0)
        rows = []
        for i, e in enumerate(entries):
            flags = self.record_flags(e)
            rows.append((e.key, e.rid, self.record_summary(e), flag_badges(flags), i))
        norms = Counter(e.rec["norm"]["name"] for e in entries)
        p.ctx = dict(rows=rows, hw=hw, json_href=entries[0].json_file.rsplit("/", 1)[-1], data_href=p.up + data,
                     hw_href=f"../{device_file(hw)}",
                     norms=[(n, f"../{norm_file(n)}", k) for n, k in sorted(norms.items())])
        return p

    def rejected_page(self) -> Page:
        return Page("rejected.html", "rejected.html", "Rejected records", active="rejected.html", ctx=dict(
            rejected=self.loaded.rejected,
            superseded=[(old, new, self.rec_href(new, "")) for old, new in self.loaded.superseded]))


def _flat(obj, prefix: str = "", depth: int = 0, out: list | None = None) -> list[tuple[str, str]]:
    """(dotted key, value as text) of a record part, two levels deep, for the record page's tables."""
    out = [] if out is None else out
    if not isinstance(obj, dict):
        return out
    for k, v in obj.items():
        if isinstance(v, dict) and depth < 1 and v:
            _flat(v, f"{prefix}{k}.", depth + 1, out)
        else:
            out.append((f"{prefix}{k}", _text(v)))
    return out


def _text(v) -> str:
    """A value as the record pages show it: text as is, anything else as JSON (``json.dumps``, whose output for a
    finite float, an int, a bool and null is written directly here: the same text, without its machinery)."""
    t = type(v)
    if t is str:
        return v
    if t is float and math.isfinite(v):
        return float.__repr__(v)
    if t is int:
        return int.__repr__(v)
    if v is None:
        return "null"
    if t is bool:
        return "true" if v else "false"
    if isinstance(v, str):
        return v
    try:
        return json.dumps(v, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(v)
