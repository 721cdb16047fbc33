"""Results: the records that count, for whatever ranks them, and the commands that maintain a results folder.

``records_that_count`` (and ``load``, its DataFrame) is the one reader of the site, ``normbench claims`` and the
generated docs: one record per id, records of changed code flagged ``stale``, records without a check verdict
flagged ``legacy``. The storage layer below it, ``normbench.records`` (schema, validation, provenance, atomic
storage: records as stored), is re-exported here, so ``normbench.results.write_records`` and friends keep working.
"""

from __future__ import annotations

from normbench.records import (
    FLAGS,
    INVALID_FLAGS,
    KINDS,
    SCHEMA,
    SCHEMA_VERSION,
    InvalidRecordError,
    Problem,
    add_flag,
    atomic_write_text,
    existing_ids,
    flatten,
    frame,
    hardware,
    hardware_id,
    is_invalid,
    is_ranked,
    iter_records,
    load_report,
    make_record,
    migrate,
    provenance,
    read_record_file,
    record_files,
    record_id,
    record_path,
    utc_now,
    validate_record,
    write_records,
)
from normbench.results.counted import Counted, Entry, Rejected, load, newest_per_id, one_per_id, records_that_count

__all__ = [
    "FLAGS",
    "INVALID_FLAGS",
    "KINDS",
    "SCHEMA",
    "SCHEMA_VERSION",
    "Counted",
    "Entry",
    "InvalidRecordError",
    "Problem",
    "Rejected",
    "add_flag",
    "atomic_write_text",
    "existing_ids",
    "flatten",
    "frame",
    "hardware",
    "hardware_id",
    "is_invalid",
    "is_ranked",
    "iter_records",
    "load",
    "load_report",
    "make_record",
    "migrate",
    "newest_per_id",
    "one_per_id",
    "provenance",
    "read_record_file",
    "record_files",
    "record_id",
    "record_path",
    "records_that_count",
    "utc_now",
    "validate_record",
    "write_records",
]
