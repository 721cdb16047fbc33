"""The downloads: every record as a row (config and metrics flattened), one gzip-compressed CSV and one Parquet file
per device (``downloads/<device>.csv.gz``, ``downloads/<device>.parquet``), so a rebuild after one device's records
change writes that device's files again and links the others from the build cache (``incremental``). The parts
together hold every record; each record's full JSON is on its record page's ``records/<page>.json.gz``."""

from __future__ import annotations

import gzip
import io
import json

#: The gzip level of the downloads (a machine's CSV here, and its record page's JSON): 6, a 1,000-record machine's
#: 1.33 MB of CSV in 175 kB and 21 ms against level 9's (Python's default) 171 kB in 29 ms.
GZIP = 6


def record_frame(entries):
    """One row per record, config and metrics flattened (``config.*``, ``metrics.*``), for the downloads."""
    import pandas as pd

    rows = []
    for e in entries:
        rec = e.rec
        row = {"id": rec["id"], "kind": rec["kind"], "norm": rec["norm"]["name"],
               "hardware_id": rec["provenance"]["hardware_id"], "timestamp": rec["provenance"].get("timestamp"),
               "schema_version": rec.get("schema_version"), "impl_hash": rec.get("impl_hash"),
               "flags": ",".join(map(str, rec.get("flags") or [])),
               "check": (rec.get("check") or {}).get("status") if isinstance(rec.get("check"), dict) else None,
               "file": e.path}
        for part in ("config", "metrics"):
            for k, v in rec[part].items():
                if k == "curve":
                    continue
                # Scalars stay typed; anything nested is kept as its JSON text so every column has one type.
                row[f"{part}.{k}"] = v if isinstance(v, (str, int, float, bool)) or v is None else json.dumps(
                    v, sort_keys=True, default=str)
        rows.append(row)
    return fix_mixed(pd.DataFrame.from_records(rows))


def fix_mixed(df):
    """A column mixing numbers and text (a hostile or plugin record) becomes text, as Parquet needs one type."""
    for col in df.columns:
        if df[col].dtype != object:
            continue
        kinds = {type(v) for v in df[col] if v is not None and v == v}
        if len(kinds) > 1 and not kinds <= {int, float}:
            df[col] = df[col].map(lambda v: None if v is None or v != v else str(v))
    return df


def part_files(entries) -> tuple[bytes, bytes]:
    """(gzip-compressed CSV, Parquet) of ``entries``: the same bytes for the same records (no name, no time)."""
    df = record_frame(entries)
    # gzip-compressed (pandas, R, DuckDB and Polars read it as is): the plain CSV of 100k records is ~100 MB.
    csv = gzip.compress(df.to_csv(index=False).encode("utf-8"), compresslevel=GZIP, mtime=0)
    buf = io.BytesIO()
    # zstd, not pyarrow's default snappy: 161 kB in 13 ms against 214 kB in 28 ms on the same machine's records (every
    # Parquet reader of note reads zstd: pyarrow, DuckDB, Polars, R's arrow, Spark).
    df.to_parquet(buf, index=False, compression="zstd")
    return csv, buf.getvalue()
