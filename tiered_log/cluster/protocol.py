"""The replication fetch between nodes: what a follower asks its leader and what the
leader answers, in one place for both sides (the follower's
:mod:`~tiered_log.cluster.fetcher` and the leader's route in
:mod:`tiered_log.service.routes.cluster`).

Request::

    GET /v1/internal/replicate/{topic}/{partition}
        ?replica_id=2          the follower's node id
        &leader_epoch=7        the epoch the follower believes the leader has
        &offset=1234           the follower's log end (where it wants records from)
        &last_fetched_epoch=6  the follower's latest leader epoch (-1: none)
        &empty=1               the follower holds no record locally (a rebuilt node)
        &max_bytes=...&wait_ms=...

Answers (200; an error is the API's JSON error: 409 ``fenced_epoch`` when the
follower's ``leader_epoch`` is older than the leader's, 421 ``not_leader`` when this
node does not lead that epoch):

- records: the body is stored batches from ``offset`` (verified, as a binary consume
  gets them), possibly empty after ``wait_ms``;
- diverging: ``X-Diverging-Epoch`` and ``X-Diverging-End-Offset`` hold the leader's
  answer for ``last_fetched_epoch`` (Kafka's OffsetsForLeaderEpoch, KIP-101/279 folded
  into the fetch as in KIP-595): the follower's log diverges at or before
  ``offset``; it truncates (:func:`~tiered_log.local.leader_epoch.divergence_point`)
  and asks again; the body is empty;
- reset: ``X-Reset-To``: the follower's log end is below what the leader keeps locally,
  or the follower is empty (a node rebuilt on a new disk) and the leader has shipped
  past its log end: it restarts its local log empty at the leader's remote end (the
  first offset not in the bucket; KIP-1023's "follower fetch from the tiered offset"),
  rebuilds its view of the bucket from the manifests, and copies only the unshipped
  tail.

A records answer also carries ``X-Segment-Bases``, the base offsets of the leader's
segments that begin among the returned batches: the follower rolls exactly there, so
every replica's segments are the leader's (a new leader ships from the bucket's remote
end, one of its own segment bases).

Every answer carries ``X-High-Watermark``, ``X-Log-Start-Offset``,
``X-Remote-End-Offset`` (what the leader has shipped: a follower keeps locally what is
not) and ``X-Leader-Epochs``, the leader's epoch entries ``[[epoch, start], ...]`` from
the one holding ``offset`` on (a follower records them for the records it appends).

The same exchange rides the Kafka listener (the transport a node picks when its
leader registered a Kafka address; :mod:`~tiered_log.cluster.kafka_fetch`): a Fetch v12
whose ``replica_id`` is the follower's node id, one partition, mapped field by field::

    current_leader_epoch -> leader_epoch     fetch_offset -> offset
    last_fetched_epoch   -> last_fetched_epoch
    partition_max_bytes  -> max_bytes        max_wait_ms  -> wait_ms
    log_start_offset == fetch_offset -> empty (the follower holds nothing locally:
                                              its local start is its log end)

It needs the grant of the HTTP route (``admin`` on the topic: the cluster token). The
partition's answer carries the standard fields (error code, high watermark, log start,
records, sent from the files as for consumers) and, for divergence, Kafka's own tagged
field ``diverging_epoch`` (tag 0: epoch int32, end_offset int64). What Kafka's fields
cannot say goes in tagged fields of this service's own, after Kafka's, only in answers
to replica fetches (a consumer's answer never carries them; a Kafka client skips tags
it does not know)::

    10000 remote_end_offset  int64
    10001 leader epochs      int32 count, then count x (epoch int32, start int64)
    10002 segment bases      int32 count, then count x int64
    10003 reset_to           int64 (the error code is then OFFSET_MOVED_TO_TIERED_STORAGE)
    10004 diverging          epoch int32, end_offset int64: Kafka's tag 0 again, because
                             Kafka's encoding leaves out its default (-1, -1), which is
                             an answer here (no epoch at or below the follower's: it
                             falls back to its high watermark)

A refusal is the partition's error code: NOT_LEADER_OR_FOLLOWER (``not_leader``),
FENCED_LEADER_EPOCH (``fenced_epoch``), TOPIC_AUTHORIZATION_FAILED (no admin grant).

Pure values and codecs: safe from any thread.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from ..errors import InvalidArgumentError
from ..local.ranges import FetchRanges

PATH = "/v1/internal/replicate/{topic}/{partition}"

REPLICA_BATCHES_PATH = "/v1/internal/replica-batches/{topic}/{partition}"
"""Where a node answers its own replica's local batches of ``[offset, end)`` (``GET``,
admin): what a scrubber elsewhere repairs a damaged segment or archived copy from.
Unlike :data:`PATH` it changes nothing at the node (no fetch state, any role)."""

H_HIGH_WATERMARK = "X-High-Watermark"
H_LOG_START = "X-Log-Start-Offset"
H_REMOTE_END = "X-Remote-End-Offset"
H_LEADER_EPOCHS = "X-Leader-Epochs"
H_DIVERGING_EPOCH = "X-Diverging-Epoch"
H_DIVERGING_END = "X-Diverging-End-Offset"
H_RESET_TO = "X-Reset-To"
H_SEGMENT_BASES = "X-Segment-Bases"

TAG_REMOTE_END = 10000
TAG_EPOCHS = 10001
TAG_ROLLS = 10002
TAG_RESET_TO = 10003
TAG_DIVERGING = 10004
"""This service's tagged fields of a replica fetch's partition answer (Kafka's own tags
are small numbers: these stay clear of them)."""

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_EPOCH = struct.Struct(">iq")


@dataclass(frozen=True, slots=True)
class ReplicaFetch:
    """A follower's fetch (the query of the request)."""

    replica_id: int
    leader_epoch: int
    offset: int
    last_fetched_epoch: int
    max_bytes: int = 4 << 20
    wait_ms: int = 500
    empty: bool = False

    def params(self) -> dict[str, int]:
        return {
            "replica_id": self.replica_id,
            "leader_epoch": self.leader_epoch,
            "offset": self.offset,
            "last_fetched_epoch": self.last_fetched_epoch,
            "max_bytes": self.max_bytes,
            "wait_ms": self.wait_ms,
            "empty": int(self.empty),
        }


@dataclass(frozen=True, slots=True)
class ReplicaAnswer:
    """The leader's answer: ``data`` (stored batches from the asked offset), or a
    divergence (``diverging`` = the leader's ``(epoch, end_offset)``), or a reset
    (``reset_to``); and the leader's offsets and epoch entries."""

    data: bytes | memoryview | FetchRanges
    """The batches: their bytes (as the follower receives them; a view of the Kafka
    transport's receive buffer, valid until its next fetch) or, on the leader, where
    they lie (sent from the files: :mod:`tiered_log.service.zerocopy`)."""
    high_watermark: int
    log_start_offset: int
    remote_end_offset: int
    epochs: tuple[tuple[int, int], ...]
    diverging: tuple[int, int] | None = None
    reset_to: int | None = None
    rolls: tuple[int, ...] = ()
    """Base offsets of the leader's segments that begin among the returned batches."""

    @property
    def waits(self) -> bool:
        """A records answer with no records: the follower is at the leader's log end (a
        long poll waits for an append)."""
        size = self.data.size if isinstance(self.data, FetchRanges) else len(self.data)
        return self.diverging is None and self.reset_to is None and not size

    def headers(self) -> dict[str, str]:
        h = {
            H_HIGH_WATERMARK: str(self.high_watermark),
            H_LOG_START: str(self.log_start_offset),
            H_REMOTE_END: str(self.remote_end_offset),
            H_LEADER_EPOCHS: json.dumps([list(e) for e in self.epochs], separators=(",", ":")),
        }
        if self.diverging is not None:
            h[H_DIVERGING_EPOCH] = str(self.diverging[0])
            h[H_DIVERGING_END] = str(self.diverging[1])
        if self.reset_to is not None:
            h[H_RESET_TO] = str(self.reset_to)
        if self.rolls:
            h[H_SEGMENT_BASES] = json.dumps(list(self.rolls), separators=(",", ":"))
        return h

    @classmethod
    def parse(cls, headers: Mapping[str, str], body: bytes) -> ReplicaAnswer:
        """From a 200 answer's headers (case-insensitive mapping) and body;
        InvalidArgumentError (one line) for a malformed answer."""
        try:
            epochs = tuple(
                (int(e), int(s)) for e, s in json.loads(headers.get(H_LEADER_EPOCHS, "[]"))
            )
            div = None
            if H_DIVERGING_EPOCH in headers:
                div = (int(headers[H_DIVERGING_EPOCH]), int(headers[H_DIVERGING_END]))
            reset = int(headers[H_RESET_TO]) if H_RESET_TO in headers else None
            rolls = tuple(int(o) for o in json.loads(headers.get(H_SEGMENT_BASES, "[]")))
            return cls(
                body,
                int(headers[H_HIGH_WATERMARK]),
                int(headers[H_LOG_START]),
                int(headers[H_REMOTE_END]),
                epochs,
                div,
                reset,
                rolls,
            )
        except (KeyError, ValueError, TypeError) as exc:
            raise InvalidArgumentError(f"malformed replication answer: {exc!r}") from None

    def kafka_tags(self) -> list[tuple[int, bytes]]:
        """This answer's own tagged fields for a Kafka replica fetch (see the module
        docstring), in tag order; the divergence goes in Kafka's ``diverging_epoch``."""
        tags = [
            (TAG_REMOTE_END, _I64.pack(self.remote_end_offset)),
            (
                TAG_EPOCHS,
                _I32.pack(len(self.epochs)) + b"".join(_EPOCH.pack(e, s) for e, s in self.epochs),
            ),
        ]
        if self.rolls:
            tags.append(
                (TAG_ROLLS, _I32.pack(len(self.rolls)) + b"".join(_I64.pack(o) for o in self.rolls))
            )
        if self.reset_to is not None:
            tags.append((TAG_RESET_TO, _I64.pack(self.reset_to)))
        if self.diverging is not None:
            tags.append((TAG_DIVERGING, _EPOCH.pack(*self.diverging)))
        return tags

    @classmethod
    def from_kafka(
        cls,
        data: bytes | memoryview,
        high_watermark: int,
        log_start_offset: int,
        tags: Mapping[int, bytes | memoryview],
    ) -> ReplicaAnswer:
        """From a Kafka replica fetch's partition answer: its standard fields and its
        tagged fields by tag; InvalidArgumentError (one line) when this service's tags
        are missing or malformed."""
        try:
            raw = tags.get(TAG_DIVERGING)
            diverging = None
            if raw is not None:
                epoch, end = _EPOCH.unpack(raw)
                diverging = (epoch, end)
            remote_end = _I64.unpack(tags[TAG_REMOTE_END])[0]
            raw = tags[TAG_EPOCHS]
            (n,) = _I32.unpack_from(raw, 0)
            if n < 0 or len(raw) != 4 + n * _EPOCH.size:
                raise ValueError(f"{n} epoch entries in {len(raw)} bytes")
            epochs = tuple(_EPOCH.iter_unpack(raw[4:]))
            rolls: tuple[int, ...] = ()
            raw = tags.get(TAG_ROLLS)
            if raw is not None:
                (n,) = _I32.unpack_from(raw, 0)
                if n < 0 or len(raw) != 4 + n * 8:
                    raise ValueError(f"{n} segment bases in {len(raw)} bytes")
                rolls = tuple(o for (o,) in _I64.iter_unpack(raw[4:]))
            raw = tags.get(TAG_RESET_TO)
            reset = _I64.unpack(raw)[0] if raw is not None else None
        except (KeyError, ValueError, struct.error) as exc:
            raise InvalidArgumentError(f"malformed replication answer: {exc!r}") from None
        return cls(
            data, high_watermark, log_start_offset, remote_end, epochs, diverging, reset, rolls
        )


class ReplicaTransport(Protocol):
    """How a follower's fetch reaches its leader: over HTTP
    (:class:`~tiered_log.cluster.fetcher.HttpTransport`) or the Kafka listener
    (:class:`~tiered_log.cluster.kafka_fetch.KafkaTransport`). One fetch at a time:
    the fetcher's thread calls :meth:`fetch`, or the thread it sends a fetch ahead on
    while it waits for none of its own; :meth:`close` may come from another thread.

    :meth:`fetch` returns the leader's answer or raises FencedEpochError /
    NotLeaderError (the leader's refusal), or another retriable TieredLogError (the
    leader out of reach, a dropped connection, a malformed answer: the fetcher backs
    off and asks again, over a new connection)."""

    name: str
    """``http`` or ``kafka`` (logs, tests)."""

    def fetch(self, topic: str, partition: int, req: ReplicaFetch) -> ReplicaAnswer: ...

    def close(self) -> None: ...


def epochs_from(entries: Sequence[tuple[int, int]], offset: int) -> tuple[tuple[int, int], ...]:
    """The epoch entries a follower fetching from ``offset`` needs: the one holding
    ``offset`` (the last starting at or below it) and every later one."""
    out = [(e, s) for e, s in entries]
    first = 0
    for i, (_, s) in enumerate(out):
        if s <= offset:
            first = i
    return tuple(out[first:])


__all__ = [
    "PATH",
    "REPLICA_BATCHES_PATH",
    "TAG_DIVERGING",
    "TAG_EPOCHS",
    "TAG_REMOTE_END",
    "TAG_RESET_TO",
    "TAG_ROLLS",
    "ReplicaAnswer",
    "ReplicaFetch",
    "ReplicaTransport",
    "epochs_from",
]
