"""The library's errors as Kafka error codes: what a refused partition or topic answers.

Each :class:`~tiered_log.errors.TieredLogError` a produce, fetch or offset lookup can
raise maps to the Kafka code a Kafka client acts on (retry, refresh its metadata, reset
its offset, give up); anything unforeseen is UNKNOWN_SERVER_ERROR with the message, so
a refusal is always a code and never a closed connection. :class:`InvalidRecordError`
is the listener's own: a record or batch our log cannot hold yet (null or empty values,
transactional or control batches, producer ids).

Pure; any thread.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from ..errors import (
    CorruptRecordError,
    DataLossError,
    FencedEpochError,
    InvalidArgumentError,
    InvalidProducerEpochError,
    InvalidTopicNameError,
    LogClosedError,
    MetadataUnavailableError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    PartitionNotReadyError,
    ReadOnlyError,
    RecordTooLargeError,
    RemoteStorageError,
    ReplicationTimeoutError,
    TieredLogError,
    TopicNotFoundError,
    TopicUnavailableError,
    UnknownProducerIdError,
)


class InvalidRecordError(InvalidArgumentError):
    """A Kafka record or batch this log cannot store yet (answered INVALID_RECORD with
    the message; nothing of its partition's batches is appended)."""

    code = "invalid_record"


class InvalidAcksError(InvalidArgumentError):
    """A Produce request's ``acks`` is not -1, 0 or 1 (INVALID_REQUIRED_ACKS)."""

    code = "invalid_required_acks"


_MAP: tuple[tuple[type[BaseException], ErrorCode], ...] = (
    (InvalidRecordError, ErrorCode.invalid_record),
    (ReadOnlyError, ErrorCode.policy_violation),
    (InvalidAcksError, ErrorCode.invalid_required_acks),
    (OutOfOrderSequenceError, ErrorCode.out_of_order_sequence_number),
    (InvalidProducerEpochError, ErrorCode.invalid_producer_epoch),
    (UnknownProducerIdError, ErrorCode.unknown_producer_id),
    (RecordTooLargeError, ErrorCode.message_too_large),
    (InvalidTopicNameError, ErrorCode.invalid_topic_exception),
    (TopicNotFoundError, ErrorCode.unknown_topic_or_partition),
    (OffsetOutOfRangeError, ErrorCode.offset_out_of_range),
    (NotLeaderError, ErrorCode.not_leader_or_follower),
    (NotEnoughReplicasAfterAppendError, ErrorCode.not_enough_replicas_after_append),
    (NotEnoughReplicasError, ErrorCode.not_enough_replicas),
    (ReplicationTimeoutError, ErrorCode.request_timed_out),
    (PartitionNotReadyError, ErrorCode.leader_not_available),
    (FencedEpochError, ErrorCode.fenced_leader_epoch),
    (TopicUnavailableError, ErrorCode.unknown_topic_or_partition),
    (CorruptRecordError, ErrorCode.corrupt_message),
    (DataLossError, ErrorCode.offset_out_of_range),
    (RemoteStorageError, ErrorCode.kafka_storage_error),
    (LogClosedError, ErrorCode.not_leader_or_follower),
    (MetadataUnavailableError, ErrorCode.leader_not_available),
    (InvalidArgumentError, ErrorCode.invalid_request),
)


def error_code(exc: BaseException) -> ErrorCode:
    """The Kafka error code that answers ``exc`` (UNKNOWN_SERVER_ERROR when none fits)."""
    for cls, code in _MAP:
        if isinstance(exc, cls):
            return code
    return ErrorCode.unknown_server_error


def error_message(exc: BaseException) -> str:
    """The one-line message a response's error_message field carries."""
    if isinstance(exc, TieredLogError):
        return exc.message
    return f"{type(exc).__name__}: {exc}"


__all__ = ["InvalidAcksError", "InvalidRecordError", "error_code", "error_message"]
