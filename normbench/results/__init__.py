"""Result records: the versioned schema, validation, atomic storage under ``results/`` and pandas loaders."""

from __future__ import annotations

from normbench.results.provenance import hardware, hardware_id, provenance, utc_now
from normbench.results.schema import (
    FLAGS,
    INVALID_FLAGS,
    KINDS,
    SCHEMA,
    SCHEMA_VERSION,
    add_flag,
    is_invalid,
    is_ranked,
    make_record,
    migrate,
    record_id,
    validate_record,
)
from normbench.results.store import (
    InvalidRecordError,
    Problem,
    atomic_write_text,
    existing_ids,
    flatten,
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
    "is_invalid",
    "is_ranked",
    "migrate",
    "Problem",
    "atomic_write_text",
    "existing_ids",
    "flatten",
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
