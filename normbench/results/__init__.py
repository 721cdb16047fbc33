"""Results: the records that count, for whatever ranks them, and the commands that maintain a results folder.

``records_that_count`` (and ``load``, its DataFrame) is the one reader of the site, ``normbench claims`` and the
generated docs: one record per id, records of changed code flagged ``stale``, records without a check verdict
flagged ``legacy``. The storage layer below it, ``normbench.records`` (schema, validation, provenance, atomic
storage: records as stored), is re-exported here, so ``normbench.results.write_records`` and friends keep working.
"""

from __future__ import annotations

from normbench import records as _records
from normbench.records import *  # noqa: F403  (the storage API, re-exported: normbench.results.write_records, ...)
from normbench.results.counted import Counted, Entry, Rejected, load, newest_per_id, one_per_id, records_that_count

__all__ = [name for name in _records.__all__ if name != "load"]  # load: the records that count, below
__all__ += ["Counted", "Entry", "Rejected", "load", "newest_per_id", "one_per_id", "records_that_count"]
