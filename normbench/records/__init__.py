"""Result records as stored: the versioned schema, validation, provenance and atomic storage under ``results/``.

The storage layer: measuring and training code write through it, and ``validate``, ``compare``, ``prune`` and
``migrate`` read records exactly as stored. Readers that rank read ``normbench.results.records_that_count`` instead
(one record per id, records of changed code and legacy records flagged)."""

from __future__ import annotations

from normbench.records.provenance import hardware, hardware_id, provenance, utc_now
from normbench.records.schema import (
    FLAGS,
    INVALID_FLAGS,
    KINDS,
    SCHEMA,
    SCHEMA_VERSION,
    add_flag,
    bound_by,
    is_invalid,
    is_ranked,
    make_record,
    migrate,
    record_id,
    validate_record,
)
from normbench.records.store import (
    InvalidRecordError,
    Problem,
    atomic_write_text,
    existing_ids,
    flatten,
    frame,
    iter_records,
    load,
    load_report,
    read_record_file,
    record_files,
    record_path,
    write_records,
)

__all__ = [
    "FLAGS",
    "INVALID_FLAGS",
    "KINDS",
    "SCHEMA",
    "SCHEMA_VERSION",
    "InvalidRecordError",
    "add_flag",
    "bound_by",
    "is_invalid",
    "is_ranked",
    "migrate",
    "Problem",
    "atomic_write_text",
    "existing_ids",
    "flatten",
    "frame",
    "hardware",
    "hardware_id",
    "iter_records",
    "load",
    "load_report",
    "read_record_file",
    "make_record",
    "provenance",
    "record_files",
    "record_id",
    "record_path",
    "utc_now",
    "validate_record",
    "write_records",
]
