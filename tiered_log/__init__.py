"""tiered_log: a segmented, append-only commit log with an S3-compatible remote tier.

The public API (everything else is internal and may change)::

    from tiered_log import Log, LogConfig, ProducerRecord

    with Log.open("/var/lib/mylog", LogConfig(segment_bytes=64 << 20)) as log:
        first, last = log.append_batch([b"hello", ProducerRecord(b"v", key=b"k")])
        for rec in log.read_range(first, max_records=100):
            print(rec.offset, rec.timestamp, rec.key, rec.value, rec.headers)

:class:`TieredLog` is a Log with a remote tier (``open_storage("s3://bucket/prefix")`` or a
local directory): sealed segments are shipped, reads resolve to either tier.
:class:`AsyncLog` wraps a Log for asyncio code. Every error derives from
:class:`TieredLogError` (see :mod:`tiered_log.errors` for the tree).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .errors import (
    CorruptIndexError,
    CorruptRecordError,
    DataLossError,
    InvalidArgumentError,
    InvalidOffsetError,
    InvalidTopicNameError,
    LogClosedError,
    LogInUseError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    RemoteCorruptionError,
    RemoteObjectNotFoundError,
    RemoteStorageError,
    TieredLogError,
    TopicError,
    TopicExistsError,
    TopicNotFoundError,
)
from .lazy import lazy_exports

if TYPE_CHECKING:
    from .format.records import Headers, ProducerRecord, Record
    from .local.aio import AsyncLog
    from .local.log import Log, LogBounds, LogConfig, RecoveryReport
    from .local.segment import SegmentInfo
    from .partition import TieredBounds, TieredLog
    from .remote.storage import RemoteStorage, open_storage
    from .remote.tier import TierConfig, TierLimits

# The names above are imported on first use (:mod:`tiered_log.lazy`): a process needing
# one corner of the package (the command line's client commands, the tier's worker
# process) does not import the log, the tier and their libraries at start.
__getattr__, __dir__ = lazy_exports(
    __name__,
    globals(),
    {
        "Headers": ".format.records",
        "ProducerRecord": ".format.records",
        "Record": ".format.records",
        "AsyncLog": ".local.aio",
        "Log": ".local.log",
        "LogBounds": ".local.log",
        "LogConfig": ".local.log",
        "RecoveryReport": ".local.log",
        "SegmentInfo": ".local.segment",
        "TieredBounds": ".partition",
        "TieredLog": ".partition",
        "RemoteStorage": ".remote.storage",
        "open_storage": ".remote.storage",
        "TierConfig": ".remote.tier",
        "TierLimits": ".remote.tier",
    },
)

__version__ = "0.1.0"

__all__ = [
    "AsyncLog",
    "CorruptIndexError",
    "CorruptRecordError",
    "DataLossError",
    "Headers",
    "InvalidArgumentError",
    "InvalidOffsetError",
    "InvalidTopicNameError",
    "Log",
    "LogBounds",
    "LogClosedError",
    "LogConfig",
    "LogInUseError",
    "OffsetOutOfRangeError",
    "ProducerRecord",
    "Record",
    "RecordTooLargeError",
    "RecoveryReport",
    "RemoteCorruptionError",
    "RemoteObjectNotFoundError",
    "RemoteStorage",
    "RemoteStorageError",
    "SegmentInfo",
    "TierConfig",
    "TierLimits",
    "TieredBounds",
    "TieredLog",
    "TieredLogError",
    "TopicError",
    "TopicExistsError",
    "TopicNotFoundError",
    "__version__",
    "open_storage",
]
