"""A partition's idempotent-producer state: per producer id, its epoch and the sequence
ranges and offsets of its last five batches, as Kafka's ``ProducerStateManager``.

What it is for: an idempotent producer (Kafka's ``enable.idempotence``) numbers the
records it sends to a partition (baseSequence in each batch header, int32, wrapping to 0
after 2**31-1) and retries a batch it got no answer for with the same numbers. The
partition's leader checks each such batch against this state before anything is
written (:meth:`ProducerStateManager.check`):

- a batch whose (epoch, first sequence, last sequence) equals one of the producer's last
  :data:`MAX_CACHED_BATCHES` batches is a duplicate: nothing is appended and the
  produce answers success with the offsets the original got (what Kafka answers);
- an epoch below the producer's: :class:`~tiered_log.errors.InvalidProducerEpochError`
  (INVALID_PRODUCER_EPOCH; an older instance of the producer, fenced);
- a higher epoch must start at sequence 0, the same epoch at the last sequence + 1
  (with the wrap): else :class:`~tiered_log.errors.OutOfOrderSequenceError`
  (OUT_OF_ORDER_SEQUENCE_NUMBER: a batch was lost in between);
- a producer id this state does not know, at a sequence other than 0:
  :class:`~tiered_log.errors.UnknownProducerIdError` (UNKNOWN_PRODUCER_ID) while the
  state is *complete* (it saw every batch of the log from offset 0), else accepted (the
  producer's batches may be gone with retention or a reset, as Kafka 2.5+ accepts).

Once the batch is written its range is recorded (:meth:`ProducerStateManager.update`).
A follower records the leader's batches without checks
(:meth:`ProducerStateManager.apply_buffer`), so a replica that becomes leader
recognizes the retry of a batch its predecessor acknowledged.

The state is rebuilt at open by a header-only walk of the local log's batches
(:func:`walk_headers`: batch headers only, no record decoding) from the offset of the
snapshot file, when there is a usable one, else from the local log start. The snapshot
``<log dir>/producer-state-checkpoint`` (:data:`SNAPSHOT_FILE`) is one JSON object,
written atomically (temporary file, fsync, rename)::

    {"version": 2,
     "offset": N,          # the state of every producer batch below offset N
     "complete": true,     # the state saw every batch from offset 0
     "producers": [[producer_id, epoch, last_timestamp,
                    [[first_seq, last_seq, first_offset, last_offset], ...],
                    last_seen_ms], ...]}

(``last_seen_ms``: the node's clock when the producer's last batch was recorded;
version 1, without it, is read as if every producer was seen at the load.)

Producers idle for Kafka's ``producer.id.expiration.ms`` are forgotten
(:meth:`ProducerStateManager.expire`, run by the partition log periodically and at its
open), so the state does not grow forever. Idle is measured from when this node last
recorded one of the producer's batches (its clock at the append, the follower's append
or the rebuild), not from the batch's own timestamp as Kafka does: a producer replaying
old timestamps is not forgotten while it writes, and a state rebuilt at an open starts
the time again (a producer is forgotten later, never sooner, than it went idle).

The partition log writes it when the log rolled since the last one (as Kafka writes one
per segment) and on close, and deletes it before a truncation (a snapshot past the log
end is never used: a log cut below it after a crash is walked from its start).

Thread-safety: :attr:`ProducerStateManager.lock` serializes every check, update,
rebuild and snapshot; the partition log holds it from the check of a producer's batch
until its state is updated after the write, so a producer's batches are checked and
recorded in the order the log stores them. The walk helpers take no lock.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from ..errors import (
    InvalidArgumentError,
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    UnknownProducerIdError,
)
from ..format.kafka.layout import HEADER, HEADER_SIZE, LOG_OVERHEAD
from ..local.files import write_atomic
from ..local.log import now_ms
from ..local.segment import Segment

log = logging.getLogger(__name__)

MAX_CACHED_BATCHES = 5
"""Batches remembered per producer (Kafka's ``NUM_BATCHES_TO_RETAIN``: a producer has at
most five requests in flight per partition)."""
SEQ_MOD = 1 << 31
"""Sequence numbers are int32 >= 0 and wrap from 2**31-1 to 0."""
SNAPSHOT_FILE = "producer-state-checkpoint"
"""The snapshot's name in the log directory."""
SNAPSHOT_VERSION = 2
_WALK_CHUNK = 1 << 20
"""Bytes read at once by the header walk."""


def last_sequence(first_seq: int, count: int) -> int:
    """The sequence of a batch's last record: ``first_seq + count - 1`` wrapped at 2**31."""
    return (first_seq + count - 1) % SEQ_MOD


def in_sequence(last_seq: int, next_seq: int) -> bool:
    """Whether ``next_seq`` follows ``last_seq`` (2**31-1 is followed by 0)."""
    return next_seq == (last_seq + 1) % SEQ_MOD


class ProducerBatch(NamedTuple):
    """The producer fields of one batch header."""

    producer_id: int
    epoch: int
    first_seq: int
    records: int
    max_timestamp: int

    @property
    def last_seq(self) -> int:
        return last_sequence(self.first_seq, self.records)


@dataclass(frozen=True, slots=True)
class BatchMeta:
    """One stored batch of a producer: its sequence range and offsets."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


@dataclass(slots=True)
class ProducerEntry:
    """A producer's state in one partition: its epoch, its last batches (oldest first,
    at most :data:`MAX_CACHED_BATCHES`, all of ``epoch``) and the max timestamp of its
    last batch."""

    epoch: int
    batches: deque[BatchMeta] = field(default_factory=lambda: deque(maxlen=MAX_CACHED_BATCHES))
    last_timestamp: int = -1
    last_seen_ms: int = 0
    """The node's clock when the last batch was recorded (for the expiry)."""

    @property
    def last_seq(self) -> int:
        """The last sequence recorded, -1 when no batch of this epoch is."""
        return self.batches[-1].last_seq if self.batches else -1


class ActiveProducer(NamedTuple):
    """A producer as a partition knows it: its id and epoch, the last sequence recorded
    (-1: none of this epoch) and the max timestamp of its last batch."""

    producer_id: int
    epoch: int
    last_sequence: int
    last_timestamp: int


def producer_batch(buf: bytes | bytearray | memoryview, position: int) -> ProducerBatch | None:
    """The producer fields of the batch at ``position`` of ``buf`` (a verified header),
    None when the batch has no producer id (producerId -1)."""
    h = HEADER.unpack_from(buf, position)
    if h[9] < 0:
        return None
    return ProducerBatch(h[9], h[10], h[11], h[6] + 1, h[8])


class ProducerStateManager:
    """The producer state of one partition log (see the module docstring).

    ``directory``: the log directory (for the snapshot); ``log_id``: for messages;
    ``clock``: wall-clock milliseconds (when a producer was last seen).
    """

    def __init__(self, directory: Path, log_id: str, clock: Callable[[], int] = now_ms) -> None:
        self._clock = clock
        self.path = directory / SNAPSHOT_FILE
        self.log_id = log_id
        self.lock = threading.Lock()
        self._producers: dict[int, ProducerEntry] = {}
        self.complete = True
        """Whether the state saw every producer batch of the log from offset 0 (then an
        unknown producer id at a sequence other than 0 is refused)."""
        self._dirty = False

    # ---- queries ---------------------------------------------------------------------

    def entry(self, producer_id: int) -> ProducerEntry | None:
        """The state of ``producer_id``, None when unknown. Under :attr:`lock`."""
        return self._producers.get(producer_id)

    def __len__(self) -> int:
        return len(self._producers)

    def active(self) -> list[ActiveProducer]:
        """Every producer this state knows, by producer id: what Kafka's DescribeProducers
        lists. Takes :attr:`lock`."""
        with self.lock:
            return [
                ActiveProducer(pid, e.epoch, e.last_seq, e.last_timestamp)
                for pid, e in sorted(self._producers.items())
            ]

    @property
    def dirty(self) -> bool:
        """Whether the state changed since the last snapshot."""
        return self._dirty

    # ---- the leader's checks -----------------------------------------------------------

    def check(self, b: ProducerBatch) -> BatchMeta | None:
        """Check a producer's batch before it is appended (see the module docstring):
        the original's :class:`BatchMeta` for a duplicate (append nothing), None for a
        batch to append; raises InvalidProducerEpochError, OutOfOrderSequenceError or
        UnknownProducerIdError. Changes nothing. Under :attr:`lock`."""
        pid = b.producer_id
        if b.epoch < 0 or b.first_seq < 0:
            raise InvalidArgumentError(
                f"batch of producer id {pid}: epoch {b.epoch} and base sequence "
                f"{b.first_seq} must be >= 0"
            )
        e = self._producers.get(pid)
        if e is None:
            if b.first_seq != 0 and self.complete:
                raise UnknownProducerIdError(
                    f"producer id {pid} is unknown to {self.log_id} and its batch starts "
                    f"at sequence {b.first_seq}, not 0"
                )
            return None
        if b.epoch < e.epoch:
            raise InvalidProducerEpochError(
                f"producer id {pid}: epoch {b.epoch} is older than the current epoch {e.epoch}"
            )
        if b.epoch > e.epoch:
            if b.first_seq != 0:
                raise OutOfOrderSequenceError(
                    f"producer id {pid}: a new epoch {b.epoch} must start at sequence 0, "
                    f"not {b.first_seq}"
                )
            return None
        last = b.last_seq
        for m in e.batches:
            if m.first_seq == b.first_seq and m.last_seq == last:
                return m
        if e.batches and not in_sequence(e.last_seq, b.first_seq):
            raise OutOfOrderSequenceError(
                f"producer id {pid} epoch {b.epoch}: sequence {b.first_seq} does not follow "
                f"the last one stored, {e.last_seq}"
            )
        return None

    # ---- recording ---------------------------------------------------------------------

    def update(self, b: ProducerBatch, first_offset: int, last_offset: int) -> None:
        """Record a producer's batch stored at ``[first_offset, last_offset]`` (a new
        epoch forgets the batches of the old one). Under :attr:`lock`."""
        e = self._producers.get(b.producer_id)
        if e is None:
            e = self._producers[b.producer_id] = ProducerEntry(b.epoch)
        elif b.epoch != e.epoch:
            e.epoch = b.epoch
            e.batches.clear()
        e.batches.append(BatchMeta(b.first_seq, b.last_seq, first_offset, last_offset))
        e.last_timestamp = b.max_timestamp
        e.last_seen_ms = self._clock()
        self._dirty = True

    def apply_headers(self, headers: Iterable[tuple[int, ProducerBatch]]) -> None:
        """Record stored batches given as ``(base_offset, producer fields)`` (a
        follower's append, a rebuild), without checks. Under :attr:`lock`."""
        for base, b in headers:
            self.update(b, base, base + b.records - 1)

    def apply_buffer(self, buf: bytes | bytearray | memoryview) -> None:
        """Record the producer batches of ``buf``, verified batches as stored (a
        follower's append). Under :attr:`lock`."""
        self.apply_headers(buffer_headers(buf))

    def expire(self, now_ms: int, expiration_ms: int) -> list[int]:
        """Forget the producers last seen ``expiration_ms`` or more before ``now_ms``
        (Kafka's ``producer.id.expiration.ms``), so the state of a
        partition written by ever new producers does not grow without bound; the ids
        forgotten. The state is no longer *complete* then: a forgotten producer that
        comes back is accepted at whatever sequence it is at (as Kafka 2.5+ accepts an
        unknown producer), its retries of batches older than its return no longer
        recognized. Under :attr:`lock`."""
        cutoff = now_ms - expiration_ms
        gone = [pid for pid, e in self._producers.items() if e.last_seen_ms <= cutoff]
        for pid in gone:
            del self._producers[pid]
        if gone:
            self.complete = False
            self._dirty = True
        return gone

    def clear(self, *, complete: bool) -> None:
        """Forget every producer (a log restarting empty); ``complete``: whether the
        log restarts at offset 0. Under :attr:`lock`."""
        self._dirty = bool(self._producers)
        self._producers.clear()
        self.complete = complete

    # ---- snapshots ---------------------------------------------------------------------

    def snapshot_bytes(self, offset: int) -> bytes:
        """The snapshot of this state as of ``offset`` (see the module docstring)."""
        producers = [
            [
                pid,
                e.epoch,
                e.last_timestamp,
                [[m.first_seq, m.last_seq, m.first_offset, m.last_offset] for m in e.batches],
                e.last_seen_ms,
            ]
            for pid, e in self._producers.items()
        ]
        doc = {
            "version": SNAPSHOT_VERSION,
            "offset": offset,
            "complete": self.complete,
            "producers": producers,
        }
        return json.dumps(doc, separators=(",", ":")).encode()

    def write_snapshot(self, offset: int) -> None:
        """Write the snapshot as of ``offset`` (every producer batch below it recorded),
        atomically. Under :attr:`lock`; OSError propagates."""
        write_atomic(self.path, self.snapshot_bytes(offset))
        self._dirty = False

    def delete_snapshot(self) -> None:
        """Remove the snapshot file (before a truncation)."""
        self.path.unlink(missing_ok=True)

    def load_snapshot(self) -> int | None:
        """Replace the state by the snapshot's; returns its offset, None (and the state
        left empty) when there is none or it does not parse. Under :attr:`lock`."""
        self._producers.clear()
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("%s: producer state snapshot unreadable: %s", self.log_id, exc)
            return None
        try:
            doc: Any = json.loads(raw)
            version = doc["version"]
            if version not in (1, SNAPSHOT_VERSION):
                raise ValueError(f"version {version}")
            offset = int(doc["offset"])
            producers: dict[int, ProducerEntry] = {}
            loaded = self._clock()
            for pid, epoch, ts, batches, *seen in doc["producers"]:
                e = ProducerEntry(int(epoch), last_timestamp=int(ts))
                e.last_seen_ms = int(seen[0]) if version > 1 else loaded
                for fs, ls, fo, lo in batches:
                    e.batches.append(BatchMeta(int(fs), int(ls), int(fo), int(lo)))
                producers[int(pid)] = e
            complete = bool(doc["complete"])
        except (ValueError, KeyError, TypeError) as exc:
            log.warning(
                "%s: producer state snapshot %s is damaged (%s): rebuilt from the log",
                self.log_id,
                self.path,
                exc,
            )
            return None
        self._producers = producers
        self.complete = complete
        self._dirty = False
        return offset

    def rebuild(
        self, segment_for: Callable[[int], Segment], local_start: int, next_offset: int
    ) -> tuple[int, int]:
        """Rebuild the state at open: the snapshot, when its offset lies in
        ``[local_start, next_offset]`` (else none), then a header walk of the local log
        (``segment_for``: its lookup) from there (or from ``local_start``). Returns ``(the offset
        the walk started at, batches read)``. Under :attr:`lock`."""
        snap = self.load_snapshot()
        if snap is not None and not local_start <= snap <= next_offset:
            log.info(
                "%s: producer state snapshot at offset %d is outside the log [%d, %d]: "
                "rebuilt from the log",
                self.log_id,
                snap,
                local_start,
                next_offset,
            )
            snap = None
            self._producers.clear()
            self.delete_snapshot()
        if snap is None:
            start = local_start
            self.complete = local_start == 0
        else:
            start = snap
        n = 0
        for base, b in walk_headers(segment_for, start, next_offset):
            self.update(b, base, base + b.records - 1)
            n += 1
        self._dirty = n > 0  # a log without idempotent producers never writes a snapshot
        return start, n


def buffer_headers(buf: bytes | bytearray | memoryview) -> Iterator[tuple[int, ProducerBatch]]:
    """``(base_offset, producer fields)`` of each batch of ``buf`` that has a producer
    id (verified batches, back to back)."""
    pos, end = 0, len(buf)
    while pos + HEADER_SIZE <= end:
        h = HEADER.unpack_from(buf, pos)
        if h[9] >= 0:
            yield h[0], ProducerBatch(h[9], h[10], h[11], h[6] + 1, h[8])
        pos += h[1] + LOG_OVERHEAD


def walk_headers(
    segment_for: Callable[[int], Segment], start: int, end: int
) -> Iterator[tuple[int, ProducerBatch]]:
    """``(base_offset, producer fields)`` of the producer batches of a local log whose
    last offset is in ``[start, end)`` (``segment_for``: the log's lookup of the segment
    holding an offset): a walk of the batch headers only (a large read per step, no
    record decoded, no CRC checked: the log verified its batches when it opened them).
    Takes no lock; blocks on disk."""
    cur = start
    while cur < end:
        seg = segment_for(cur)
        pos = seg.position_of(cur)[0] if seg.base_offset < cur else 0
        fd = seg.read_fd()
        size_end = seg.size
        while pos < size_end:
            buf = fd.pread(min(_WALK_CHUNK, size_end - pos), pos)
            at = 0
            while at + HEADER_SIZE <= len(buf):
                h = HEADER.unpack_from(buf, at)
                size = h[1] + LOG_OVERHEAD
                if size < HEADER_SIZE:
                    return  # damaged past the verified part: stop
                if h[9] >= 0 and h[0] + h[6] >= cur:
                    yield h[0], ProducerBatch(h[9], h[10], h[11], h[6] + 1, h[8])
                at += size
            if at == 0:
                break
            pos += at
        if seg.next_offset <= cur:
            break
        cur = seg.next_offset


__all__ = [
    "MAX_CACHED_BATCHES",
    "SEQ_MOD",
    "SNAPSHOT_FILE",
    "ActiveProducer",
    "BatchMeta",
    "ProducerBatch",
    "ProducerEntry",
    "ProducerStateManager",
    "buffer_headers",
    "in_sequence",
    "last_sequence",
    "producer_batch",
    "walk_headers",
]
