"""The one error tree of tiered_log.

Every error the library raises on purpose derives from :class:`TieredLogError`.
Lower-layer errors (``OSError``, botocore's ``ClientError``, ...) are mapped at the
boundary where they occur (``raise X(...) from exc``) so callers catch ours only::

    TieredLogError                      base; ``retriable`` says if trying again may help
    ├── InvalidArgumentError            a caller passed a value that can never be valid
    │   ├── InvalidOffsetError          negative offset, or an offset the call can't take
    │   └── RecordTooLargeError         value (or streamed body) over the append threshold
    ├── OffsetOutOfRangeError           offset below the log start or past the next offset
    ├── CorruptRecordError              a checksum or framing check failed on read
    ├── CorruptIndexError               an index file is damaged (recovery rebuilds it)
    ├── LogClosedError                  the log (or service) was closed
    ├── LogInUseError                   another open Log holds the directory
    ├── TopicError                      topic management (service layer)
    │   ├── TopicNotFoundError
    │   ├── TopicExistsError
    │   ├── TopicUnavailableError       the topic is on disk but could not be opened
    │   └── InvalidTopicNameError
    ├── RemoteStorageError              the remote tier failed (retriable by default)
    │   ├── RemoteObjectNotFoundError   the object (or range) does not exist
    │   ├── RemoteCorruptionError       the remote bytes failed their checksum
    │   └── RemoteTimeoutError          the bucket did not answer in time (retriable)
    └── DataLossError                   requested data was removed (retention/truncation)
        └── CorruptRangeError           stored data at the offset is damaged (also a
                                        CorruptRecordError; the service answers 410)

Errors are plain exceptions: safe to raise from any thread, carry no resources.
"""

from __future__ import annotations


class TieredLogError(Exception):
    """Root of every error tiered_log raises on purpose.

    ``retriable`` is True where repeating the same call later may succeed (a bucket that
    was unreachable, a transient I/O fault); False for errors in the request itself.
    ``code`` is a stable machine-readable name used by the HTTP API's JSON errors.
    """

    retriable: bool = False
    code: str = "error"

    def __init__(self, message: str, *, retriable: bool | None = None) -> None:
        super().__init__(message)
        self.message = message
        if retriable is not None:
            self.retriable = retriable


class InvalidArgumentError(TieredLogError, ValueError):
    """A caller passed a value that can never be valid (bad size, empty value, ...)."""

    code = "invalid_argument"


class InvalidOffsetError(InvalidArgumentError):
    """An offset that no log could hold (negative) or that the call cannot take."""

    code = "invalid_offset"


class RecordTooLargeError(InvalidArgumentError):
    """A record value (or streamed body) exceeds the log's append threshold."""

    code = "record_too_large"


class OffsetOutOfRangeError(TieredLogError):
    """The offset is below the log start offset or at/after the next offset.

    ``log_start`` and ``next_offset`` are the bounds at the time of the call.
    """

    code = "offset_out_of_range"

    def __init__(self, message: str, *, log_start: int = 0, next_offset: int = 0) -> None:
        super().__init__(message)
        self.log_start = log_start
        self.next_offset = next_offset


class CorruptRecordError(TieredLogError):
    """Stored bytes failed their checksum or framing check; never returned as data."""

    code = "corrupt_record"


class CorruptIndexError(TieredLogError):
    """An index file is damaged; opening the log rebuilds it from the store."""

    code = "corrupt_index"


class LogClosedError(TieredLogError):
    """The log was closed; no further operations are accepted."""

    code = "log_closed"


class LogInUseError(TieredLogError):
    """Another open :class:`~tiered_log.local.log.Log` (in this or another process) holds
    the log's directory."""

    code = "log_in_use"


class TopicError(TieredLogError):
    """Base of topic-management errors (service layer)."""

    code = "topic_error"


class TopicNotFoundError(TopicError):
    """The topic (or partition) does not exist."""

    code = "topic_not_found"


class TopicExistsError(TopicError):
    """A topic of that name exists already."""

    code = "topic_exists"


class TopicUnavailableError(TopicError):
    """The topic exists on this node but one of its partitions could not be opened at
    start (e.g. its copy journal is damaged and the bucket that would repair it was out
    of reach): the message names the file. The rest of the service serves; the topic
    answers this until an operator fixes it and the service restarts."""

    code = "topic_unavailable"


class InvalidTopicNameError(TopicError, InvalidArgumentError):
    """The topic name is not allowed (path tricks, bad characters, too long)."""

    code = "invalid_topic_name"


class RemoteStorageError(TieredLogError):
    """The remote tier (S3, local directory) failed; usually worth retrying."""

    retriable = True
    code = "remote_storage_error"


class RemoteObjectNotFoundError(RemoteStorageError):
    """The remote object or byte range does not exist."""

    retriable = False
    code = "remote_object_not_found"


class RemoteCorruptionError(RemoteStorageError):
    """Bytes read from (or written to) the remote tier failed their checksum."""

    retriable = False
    code = "remote_corruption"


class DataLossError(TieredLogError):
    """Data that a reader asked for was removed by retention or truncation."""

    code = "data_loss"


class RemoteTimeoutError(RemoteStorageError):
    """The bucket did not answer in time: a fetch waited longer than
    ``remote_fetch_max_wait_ms`` (the fetch goes on: a retry may find the chunk cached),
    or a request to S3 timed out. Retriable."""

    retriable = True
    code = "remote_timeout"


class CorruptRangeError(DataLossError, CorruptRecordError):
    """The stored batch holding the asked offset fails its checksum (a damaged segment
    file): that range cannot be served; the records before and after it can.

    A :class:`CorruptRecordError` (code ``corrupt_record``) and a :class:`DataLossError`:
    the data is lost at this server, so the service answers 410, not retriable (asking
    again gets the same damaged bytes). Raised by the service's fetch paths.
    """

    code = "corrupt_record"


__all__ = [
    "CorruptIndexError",
    "CorruptRangeError",
    "CorruptRecordError",
    "DataLossError",
    "InvalidArgumentError",
    "InvalidOffsetError",
    "InvalidTopicNameError",
    "LogClosedError",
    "OffsetOutOfRangeError",
    "RecordTooLargeError",
    "RemoteCorruptionError",
    "RemoteObjectNotFoundError",
    "RemoteStorageError",
    "RemoteTimeoutError",
    "TieredLogError",
    "TopicError",
    "TopicExistsError",
    "TopicNotFoundError",
    "TopicUnavailableError",
]
