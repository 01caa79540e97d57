"""The one error tree of tiered_log, with the HTTP status of each error.

Every error the library, the service and the client raise on purpose derives from
:class:`TieredLogError`. Lower-layer errors (``OSError``, botocore's ``ClientError``,
...) are mapped at the boundary where they occur (``raise X(...) from exc``) so callers
catch ours only. Each class carries its ``code`` (the stable name in the HTTP API's
JSON errors) and its ``status`` (the HTTP status the service answers it with), so the
server's status mapping (:func:`status_of`) and the client's decoding of an error
answer (:func:`error_class`) read one table: this tree::

    class                          code                      status
    TieredLogError                 error                     500*   base; ``retriable``
    ├── InvalidArgumentError       invalid_argument          400    a value never valid
    │   ├── InvalidOffsetError     invalid_offset            400    negative / untakable
    │   ├── RecordTooLargeError    record_too_large          413    over append threshold
    │   ├── InvalidRequestError    invalid_request           400    malformed request
    │   ├── UnsupportedMediaTypeError  unsupported_media_type 415   body Content-Type
    │   └── RequestTooLargeError   request_too_large         400**  body over the limit
    ├── OffsetOutOfRangeError      offset_out_of_range       416    outside the log
    ├── CorruptRecordError         corrupt_record            500    checksum/framing failed
    ├── CorruptIndexError          corrupt_index             500    index damaged (rebuilt)
    ├── LogClosedError             log_closed                503    log/service closed
    │   └── ShuttingDownError      shutting_down             503    server stopping
    ├── LogInUseError              log_in_use                500*   directory held elsewhere
    ├── DataDirLockedError         data_dir_locked           500*   data dir held elsewhere
    ├── TopicError                 topic_error               500*   topic management
    │   ├── TopicNotFoundError     topic_not_found           404
    │   ├── TopicExistsError       topic_exists              409
    │   ├── TopicUnavailableError  topic_unavailable         503    on disk, did not open
    │   └── InvalidTopicNameError  invalid_topic_name        400    (also InvalidArgument)
    ├── AuthenticationError        unauthenticated           401    no valid bearer token
    ├── PermissionDeniedError      permission_denied         403    token lacks the grant
    ├── ReadOnlyError              read_only                 403    a read-only mount
    ├── RemoteStorageError         remote_storage_error      503    remote tier failed
    │   ├── RemoteObjectNotFoundError  remote_object_not_found 502  object/range missing
    │   ├── RemoteCorruptionError  remote_corruption         502    remote bytes damaged
    │   └── RemoteTimeoutError     remote_timeout            503    bucket too slow
    ├── MetadataUnavailableError   metadata_unavailable      503    etcd out of reach
    │   └── LeaseNotFoundError     lease_not_found           503    etcd lease expired
    ├── NotLeaderError             not_leader                421    ask the leader
    ├── NotEnoughReplicasError     not_enough_replicas       503    ISR below min
    │   └── NotEnoughReplicasAfterAppendError  (same code)          appended, not acked
    ├── ReplicationTimeoutError    replication_timeout       503    acks=all not in time
    ├── PartitionNotReadyError     not_ready                 503    new leader's remote view
    ├── FencedEpochError           fenced_epoch              409    a deposed leader's epoch
    ├── ProducerStateError         producer_state            409    idempotent producer's
    │   ├── OutOfOrderSequenceError    out_of_order_sequence 409    a gap in sequences
    │   ├── InvalidProducerEpochError  invalid_producer_epoch 409   an older epoch
    │   └── UnknownProducerIdError     unknown_producer_id   409    unknown id, seq != 0
    ├── DataLossError              data_loss                 410    removed by retention
    │   └── CorruptRangeError      corrupt_record            410    stored batch damaged
    │                                                               (also CorruptRecord)
    ├── NotAClusterError           not_a_cluster             404    a single node: no cluster
    ├── ConnectionFailedError      connection_failed         500*   client: unreachable
    └── ServiceError               service_error             500*   client: unknown code

``*``: the class has no status of its own: the service answers 503 when the error is
retriable (a retriable ``TieredLogError`` such as a failed local write), else 500.
``**``: what the service's error mapping has always answered for this class (it is
never raised: a body over ``max_request_bytes`` is refused by the HTTP layer with 413
and the code ``request_too_large``, which the client decodes to this class).
``retriable`` defaults to False except for RemoteStorageError, RemoteTimeoutError,
MetadataUnavailableError (and LeaseNotFoundError), NotLeaderError,
NotEnoughReplicasError, ReplicationTimeoutError, PartitionNotReadyError,
ShuttingDownError and ConnectionFailedError; an instance may say otherwise.

The last two are the client's own (:mod:`tiered_log.client`): the service never answers
them, and :func:`error_class` does not map their codes (nor the root's ``error``: an
answer with a code the client does not know becomes a :class:`ServiceError` holding
the HTTP status). ``corrupt_record`` decodes to :class:`CorruptRecordError`, the class
that owns the code.

Errors are plain exceptions: safe to raise from any thread, carry no resources; the
tables here are built at import and read-only after.
"""

from __future__ import annotations

from typing import Any


class TieredLogError(Exception):
    """Root of every error tiered_log raises on purpose.

    ``retriable`` is True where repeating the same call later may succeed (a bucket that
    was unreachable, a transient I/O fault); False for errors in the request itself.
    ``code`` is a stable machine-readable name used by the HTTP API's JSON errors.
    ``status`` is the HTTP status the service answers the error with; a class that sets
    none of its own answers 503 when the error is retriable (see :func:`status_of`).
    """

    retriable: bool = False
    code: str = "error"
    status: int = 500

    def __init__(self, message: str, *, retriable: bool | None = None) -> None:
        super().__init__(message)
        self.message = message
        if retriable is not None:
            self.retriable = retriable

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled whole (a worker process's error reaches its caller as raised there):
        # the default would call cls(*args) and drop ``retriable`` and any other state.
        return (_restore_error, (type(self), self.args, dict(self.__dict__)))


def _restore_error(
    cls: type[TieredLogError], args: tuple[Any, ...], state: dict[str, Any]
) -> TieredLogError:
    err = cls.__new__(cls)
    Exception.__init__(err, *args)
    err.__dict__.update(state)
    return err


class InvalidArgumentError(TieredLogError, ValueError):
    """A caller passed a value that can never be valid (bad size, empty value, ...)."""

    code = "invalid_argument"
    status = 400


class InvalidOffsetError(InvalidArgumentError):
    """An offset that no log could hold (negative) or that the call cannot take."""

    code = "invalid_offset"
    status = 400


class RecordTooLargeError(InvalidArgumentError):
    """A record value (or streamed body) exceeds the log's append threshold."""

    code = "record_too_large"
    status = 413


class OffsetOutOfRangeError(TieredLogError):
    """The offset is below the log start offset or at/after the next offset.

    ``log_start`` and ``next_offset`` are the bounds at the time of the call.
    """

    code = "offset_out_of_range"
    status = 416

    def __init__(self, message: str, *, log_start: int = 0, next_offset: int = 0) -> None:
        super().__init__(message)
        self.log_start = log_start
        self.next_offset = next_offset


class CorruptRecordError(TieredLogError):
    """Stored bytes failed their checksum or framing check; never returned as data."""

    code = "corrupt_record"
    status = 500


class CorruptIndexError(TieredLogError):
    """An index file is damaged; opening the log rebuilds it from the store."""

    code = "corrupt_index"
    status = 500


class LogClosedError(TieredLogError):
    """The log was closed; no further operations are accepted."""

    code = "log_closed"
    status = 503


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
    status = 404


class TopicExistsError(TopicError):
    """A topic of that name exists already."""

    code = "topic_exists"
    status = 409


class TopicUnavailableError(TopicError):
    """The topic exists on this node but one of its partitions could not be opened at
    start (e.g. its copy journal is damaged and the bucket that would repair it was out
    of reach): the message names the file. The rest of the service serves; the topic
    answers this until an operator fixes it and the service restarts."""

    code = "topic_unavailable"
    status = 503


class InvalidTopicNameError(TopicError, InvalidArgumentError):
    """The topic name is not allowed (path tricks, bad characters, too long)."""

    code = "invalid_topic_name"
    status = 400


class RemoteStorageError(TieredLogError):
    """The remote tier (S3, local directory) failed; usually worth retrying."""

    retriable = True
    code = "remote_storage_error"
    status = 503


class RemoteObjectNotFoundError(RemoteStorageError):
    """The remote object or byte range does not exist."""

    retriable = False
    code = "remote_object_not_found"
    status = 502


class RemoteCorruptionError(RemoteStorageError):
    """Bytes read from (or written to) the remote tier failed their checksum."""

    retriable = False
    code = "remote_corruption"
    status = 502


class DataLossError(TieredLogError):
    """Data that a reader asked for was removed by retention or truncation."""

    code = "data_loss"
    status = 410


class RemoteTimeoutError(RemoteStorageError):
    """The bucket did not answer in time: a fetch waited longer than
    ``remote_fetch_max_wait_ms`` (the fetch goes on: a retry may find the chunk cached),
    or a request to S3 timed out. Retriable."""

    retriable = True
    code = "remote_timeout"
    status = 503


class MetadataUnavailableError(TieredLogError):
    """The cluster's metadata store (etcd) did not answer: refused, timed out, or
    answered with a server error (:mod:`tiered_log.cluster.etcd`). Whether a write made
    in that call took effect is unknown: read it back before retrying. Retriable; an
    instance for a request etcd refused as invalid (or a closed store) is not."""

    retriable = True
    code = "metadata_unavailable"
    status = 503


class LeaseNotFoundError(MetadataUnavailableError):
    """etcd answered that the lease a write names no longer exists (it expired or was
    revoked): the write did not happen. The holder re-registers under a new lease
    (:class:`~tiered_log.cluster.membership.Membership` does); retriable after that."""

    code = "lease_not_found"
    status = 503


class NotLeaderError(TieredLogError):
    """This node does not lead the partition (any more, or not yet): produce and consume
    go to the leader. ``leader_id`` and ``leader_url`` name the current leader when this
    node knows it (None while an election is under way). Retriable: a client refreshes
    its metadata and sends the request there (Kafka's NOT_LEADER_OR_FOLLOWER)."""

    retriable = True
    code = "not_leader"
    status = 421

    def __init__(
        self, message: str, *, leader_id: int | None = None, leader_url: str | None = None
    ) -> None:
        super().__init__(message)
        self.leader_id = leader_id
        self.leader_url = leader_url


class NotEnoughReplicasError(TieredLogError):
    """An ``acks=all`` produce found fewer in-sync replicas than the topic's
    ``min_insync_replicas`` (before appending: nothing was written), or the in-sync set
    shrank below it while the records waited (then they were appended but are not
    acknowledged, and may or may not survive a failover). Retriable."""

    retriable = True
    code = "not_enough_replicas"
    status = 503


class NotEnoughReplicasAfterAppendError(NotEnoughReplicasError):
    """The second case of :class:`NotEnoughReplicasError`: the records were appended and
    the in-sync set was below ``min_insync_replicas`` when the answer was due, even if the
    high watermark had passed them (a shrink raises it); they are not acknowledged and
    may or may not survive a failover, and a retry may write them twice unless the
    producer is idempotent. Kafka's NOT_ENOUGH_REPLICAS_AFTER_APPEND. Retriable."""


class ReplicationTimeoutError(TieredLogError):
    """``acks=all`` records were appended on the leader but did not reach every in-sync
    replica within the request's time: not acknowledged. They may still be committed
    (a retry may then write them twice, as with Kafka's REQUEST_TIMED_OUT). Retriable."""

    retriable = True
    code = "replication_timeout"
    status = 503


class PartitionNotReadyError(TieredLogError):
    """A replica that has just become leader does not know its remote state yet (where
    the log starts, what the bucket holds: others shipped while it followed): reads
    below its local start, its bounds and timestamp lookups wait for that, rather than
    answer from a stale view (a log start above the true one, a 416 for an archived
    offset). Retriable within moments: the new leader's first tiering round rebuilds the
    view (Kafka's LEADER_NOT_AVAILABLE)."""

    retriable = True
    code = "not_ready"
    status = 503


class FencedEpochError(TieredLogError):
    """A request carried a leader epoch older than the one this replica knows: it comes
    from a deposed leader (or a follower that has not learnt of a newer one) and is
    refused, so a deposed leader can never count this replica towards an acknowledgment
    (Kafka's FENCED_LEADER_EPOCH). ``current_epoch`` is the epoch known here."""

    code = "fenced_epoch"
    status = 409

    def __init__(self, message: str, *, current_epoch: int = -1) -> None:
        super().__init__(message)
        self.current_epoch = current_epoch


class ProducerStateError(TieredLogError):
    """An idempotent producer's batch that its partition's producer state refuses
    (:mod:`tiered_log.partition.producer_state`): nothing of it is appended: 409."""

    code = "producer_state"
    status = 409


class OutOfOrderSequenceError(ProducerStateError):
    """An idempotent producer's batch whose first sequence does not follow the last one
    stored for its producer id and epoch (or a new epoch not starting at 0): a batch
    in between was lost (Kafka's OUT_OF_ORDER_SEQUENCE_NUMBER)."""

    code = "out_of_order_sequence"


class InvalidProducerEpochError(ProducerStateError):
    """An idempotent producer's batch of an epoch older than the one the partition
    holds for its producer id: an older instance of the producer (Kafka's
    INVALID_PRODUCER_EPOCH)."""

    code = "invalid_producer_epoch"


class UnknownProducerIdError(ProducerStateError):
    """A batch of a producer id the partition holds no state of, not at sequence 0,
    while the partition saw every batch of its log (Kafka's UNKNOWN_PRODUCER_ID)."""

    code = "unknown_producer_id"


class CorruptRangeError(DataLossError, CorruptRecordError):
    """The stored batch holding the asked offset fails its checksum (a damaged segment
    file): that range cannot be served; the records before and after it can.

    A :class:`CorruptRecordError` (code ``corrupt_record``) and a :class:`DataLossError`:
    the data is lost at this server, so the service answers 410, not retriable (asking
    again gets the same damaged bytes). Raised by the service's fetch paths.
    """

    code = "corrupt_record"
    status = 410


# ---- service side: what the HTTP layer refuses ----------------------------------------


class InvalidRequestError(InvalidArgumentError):
    """The request is malformed (bad JSON, wrong types, out-of-range parameters): 400."""

    code = "invalid_request"
    status = 400


class UnsupportedMediaTypeError(InvalidArgumentError):
    """The request body's Content-Type is not one the endpoint takes: 415."""

    code = "unsupported_media_type"
    status = 415


class NotAClusterError(TieredLogError):
    """A cluster operation (``/v1/cluster...``) asked of a node started without cluster
    settings, which has no cluster to describe, reassign or restore into: 404, with its
    own code so that it is not taken for a missing topic. Clients tell a single node by
    this answer to ``GET /v1/cluster``."""

    code = "not_a_cluster"
    status = 404


class RequestTooLargeError(InvalidArgumentError):
    """The request body is over the server's ``max_request_bytes`` (the HTTP layer
    answers that with 413 itself; this class's own status is what the service's mapping
    has always given it, see the module docstring)."""

    code = "request_too_large"
    status = 400


class ShuttingDownError(LogClosedError):
    """The server is shutting down; try again (elsewhere, or after the restart): 503."""

    code = "shutting_down"
    status = 503
    retriable = True


class AuthenticationError(TieredLogError):
    """No valid bearer token (HTTP 401)."""

    code = "unauthenticated"
    status = 401


class PermissionDeniedError(TieredLogError):
    """The token lacks the grant for this topic and action (HTTP 403)."""

    code = "permission_denied"
    status = 403


class ReadOnlyError(TieredLogError):
    """A write (produce, topic creation, deletion, alteration, truncation) asked of a
    service that mounts another cluster's bucket read-only (``read_only_remote``): it
    serves reads only and never writes to the bucket (HTTP 403, not retriable: write to
    the cluster that owns the bucket)."""

    code = "read_only"
    status = 403


class DataDirLockedError(TieredLogError):
    """Another process holds the data directory."""

    code = "data_dir_locked"


# ---- client side: raised by tiered_log.client, never answered by the service ----------


class ConnectionFailedError(TieredLogError):
    """The service could not be reached or the connection broke (retriable)."""

    code = "connection_failed"
    retriable = True


class ServiceError(TieredLogError):
    """An error the client does not know by code; ``status`` is the HTTP status."""

    code = "service_error"

    def __init__(self, message: str, *, status: int, code: str) -> None:
        super().__init__(message, retriable=status >= 500)
        self.status = status
        self.code = code


# ---- the tables -----------------------------------------------------------------------


def status_of(exc: BaseException) -> int:
    """The HTTP status the service answers ``exc`` with: the ``status`` of the most
    specific class of ``exc`` that sets one (a class's own, in MRO order); for a
    :class:`TieredLogError` whose classes set none, 503 if it is retriable, else 500;
    500 for anything else."""
    if not isinstance(exc, TieredLogError):
        return 500
    for cls in type(exc).__mro__:
        if cls is TieredLogError:
            break
        own = vars(cls).get("status")
        if isinstance(own, int):
            return own
    return 503 if exc.retriable else 500


def _answered_codes() -> dict[str, type[TieredLogError]]:
    """Code -> class for every error of this module the service may answer: all but the
    root and the client's own. A code two classes share maps to the one owning it (the
    base of the other: ``corrupt_record`` -> CorruptRecordError)."""
    client_side = (TieredLogError, ConnectionFailedError, ServiceError)
    table: dict[str, type[TieredLogError]] = {}
    for obj in list(globals().values()):  # definition order: bases before subclasses
        if (
            not isinstance(obj, type)
            or not issubclass(obj, TieredLogError)
            or obj.__module__ != __name__
            or obj in client_side
        ):
            continue
        known = table.setdefault(obj.code, obj)
        if not issubclass(obj, known):
            raise TypeError(f"{obj.__name__} reuses the code {obj.code!r} of {known.__name__}")
    return table


_BY_CODE = _answered_codes()


def error_class(code: str) -> type[TieredLogError] | None:
    """The class of an error answer's ``code`` (see :func:`_answered_codes`); None for a
    code this tree does not hold."""
    return _BY_CODE.get(code)


__all__ = [
    "AuthenticationError",
    "ConnectionFailedError",
    "CorruptIndexError",
    "CorruptRangeError",
    "CorruptRecordError",
    "DataDirLockedError",
    "DataLossError",
    "FencedEpochError",
    "InvalidArgumentError",
    "InvalidOffsetError",
    "InvalidProducerEpochError",
    "InvalidRequestError",
    "InvalidTopicNameError",
    "LeaseNotFoundError",
    "LogClosedError",
    "LogInUseError",
    "MetadataUnavailableError",
    "NotAClusterError",
    "NotEnoughReplicasAfterAppendError",
    "NotEnoughReplicasError",
    "NotLeaderError",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceError",
    "PartitionNotReadyError",
    "PermissionDeniedError",
    "ProducerStateError",
    "ReadOnlyError",
    "RecordTooLargeError",
    "RemoteCorruptionError",
    "RemoteObjectNotFoundError",
    "RemoteStorageError",
    "RemoteTimeoutError",
    "ReplicationTimeoutError",
    "RequestTooLargeError",
    "ServiceError",
    "ShuttingDownError",
    "TieredLogError",
    "TopicError",
    "TopicExistsError",
    "TopicNotFoundError",
    "TopicUnavailableError",
    "UnknownProducerIdError",
    "UnsupportedMediaTypeError",
    "error_class",
    "status_of",
]
