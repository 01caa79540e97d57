"""Read-only inspection of a log directory: what ``tiered-log dump`` and ``verify`` print.

Nothing here writes, renames or deletes a file: store and index files are opened
read-only (``Path.read_bytes``) and the log is never opened with :meth:`Log.open
<tiered_log.local.log.Log.open>` (which repairs), and no lock is taken. So it is safe to
point at a copy of a damaged log, or at the directory of a running log (verify tells an
append under way and a segment deleted by retention during the check from damage).

The functions return structured results (dataclasses, ``to_dict`` for JSON); the command
line only formats them, and the service can reuse them as they are. One module per job:

- :mod:`.store`        a store file's batches (:func:`iter_store`) and its summary for the
                       index checks (:func:`scan_store`, :class:`StoreScan`)
- :mod:`.index_check`  ``.index`` / ``.timeindex`` files read and checked against a store
- :mod:`.verify`       a whole log checked (:func:`verify_log`, :class:`VerifyReport`), or
                       every log under a directory such as a service's data directory
                       (:func:`verify_logs`, :class:`LogsReport`)
- :mod:`.dump`         the text ``tiered-log dump`` prints, file by file
- :mod:`.describe`     a partition log described from its files (``tiered-log describe``):
                       a read-only snapshot of the local log, the copy journal, metadata

Pure functions over files; safe from any thread (each call reads its own files).
"""

from __future__ import annotations

from .index_check import (
    OffsetIndexEntry,
    TimeIndexEntry,
    check_offset_index,
    check_time_index,
    read_offset_index,
    read_time_index,
)
from .store import BatchEntry, StoreDamage, StoreScan, iter_store, scan_store
from .verify import (
    LogsReport,
    Problem,
    SegmentReport,
    VerifyReport,
    find_log_dirs,
    segment_file_kind,
    verify_log,
    verify_logs,
)

__all__ = [
    "BatchEntry",
    "LogsReport",
    "OffsetIndexEntry",
    "Problem",
    "SegmentReport",
    "StoreDamage",
    "StoreScan",
    "TimeIndexEntry",
    "VerifyReport",
    "check_offset_index",
    "check_time_index",
    "find_log_dirs",
    "iter_store",
    "read_offset_index",
    "read_time_index",
    "scan_store",
    "segment_file_kind",
    "verify_log",
    "verify_logs",
]
