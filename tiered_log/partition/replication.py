"""A partition log's replication state: its leader epochs, its role, the follower's append
and its one high watermark. :class:`Replication` is a collaborator the partition log
(:class:`~tiered_log.partition.log.TieredLog`) holds; the node's replication code (the
leader's :class:`~tiered_log.cluster.replica.LeaderReplication`, the follower's fetcher)
reaches it through the log's methods.

What each part is for, as in Kafka:

- **Leader epochs** (KIP-101/279): every partition log keeps a
  :class:`~tiered_log.local.leader_epoch.LeaderEpochCache` in its directory. A new leader
  assigns its epoch at its log end (:meth:`Replication.assign_leader_epoch`) and stamps
  it into the partitionLeaderEpoch field of every batch it appends from there (in place,
  before the write, outside the CRC; -1 while the log holds no epoch); it answers
  a follower's OffsetsForLeaderEpoch (:meth:`Replication.end_offset_for_epoch`); a
  follower coming back finds where its log diverges (:meth:`Replication.divergence`) and
  the log truncates there. The cache follows the log: a truncation cuts it from the end,
  the log start moving up (total retention, a reset) cuts it from the start; on open it
  is cut to the log's bounds (a crash between writing the cache and the log).
- **The follower's append** (:meth:`Replication.append`): the leader's stored batches,
  verified (framing, CRC-32C, offsets in sequence: :func:`leader_batches`), appended
  byte for byte as the leader stored them (offsets, timestamps, the leader epoch in each
  batch), in one write per leader segment, plus the leader's epoch entries for that range
  (:meth:`Log.append_copy <tiered_log.local.log.Log.append_copy>` holds the local log's
  end still while they are recorded).
- **The high watermark** (:class:`HighWatermark`, a replicated log only; otherwise the
  log's high watermark is its next offset): the offset below which records are
  committed. The leader computes it (the lowest log end of the in-sync replicas: that
  invariant is the leader's job) and the follower learns it from fetches; both hand it
  to the log, which advances this object. It keeps ``log_start <= HW <= next_offset``;
  it moves down only through a truncation (or a reset); consumers' reads (``upto=``)
  never return a record at or past it. In a replicated log it falls on a batch boundary
  (followers append whole batches; a batch straddling ``upto`` is not served at all).

The checkpoint file ``<log dir>/high-watermark-checkpoint``
(:data:`~tiered_log.format.naming.HIGH_WATERMARK_FILE`) is two ASCII lines::

    0\\n        the format version
    <hw>\\n     the high watermark, decimal

written with :func:`~tiered_log.local.files.write_atomic` at most every
``hw_checkpoint_interval_ms``, at once when the value moves down, and on close. Opening
reads it back clamped to the log's bounds; a missing or damaged file means the log start
(a lower HW is always safe: it hides records, never shows uncommitted ones).

Thread-safety: :meth:`Replication.append` is the follower's fetcher's, one thread (it
serializes with local appends through the local log, but two fetchers of one log would
append each other's data twice). The epoch calls and :meth:`HighWatermark.advance` may
come from any thread; reading :attr:`HighWatermark.value` takes no lock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path

from ..errors import (
    CorruptIndexError,
    CorruptRecordError,
    InvalidArgumentError,
    LogClosedError,
    NotLeaderError,
)
from ..format import naming
from ..format.records import HEADER_SIZE, EncodedBatch, batch_header, batch_table, check_batches
from ..local.files import write_atomic
from ..local.leader_epoch import UNDEFINED_EPOCH, EpochEntry, LeaderEpochCache
from ..local.leader_epoch import divergence_point as _divergence_point
from ..local.log import Log, now_ms

log = logging.getLogger(__name__)

HW_FILE_VERSION = 0

Bounds = Callable[[], tuple[int, int]]
"""The log's ``(log_start_offset, next_offset)`` as they are now."""


def encode_high_watermark(hw: int) -> bytes:
    """The high-watermark checkpoint file's bytes: ``"0\\n<hw>\\n"`` (version, value)."""
    return f"{HW_FILE_VERSION}\n{hw}\n".encode("ascii")


def read_high_watermark(path: Path) -> int | None:
    """The high watermark checkpointed in ``path``; None when the file is missing or
    damaged (a damaged one is logged as a warning)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    lines = data.split(b"\n")
    if (
        len(lines) == 3
        and lines[0] == str(HW_FILE_VERSION).encode()
        and lines[1].isdigit()
        and lines[2] == b""
    ):
        return int(lines[1])
    log.warning(
        "high-watermark checkpoint %s is damaged (%r): using the log start", path, data[:40]
    )
    return None


class HighWatermark:
    """A replicated log's high watermark: its value and its checkpoint file (see the
    module docstring). ``bounds`` gives the log's ``(log_start, next_offset)``, read under
    this object's lock so a value is never set outside them; ``clock`` (milliseconds)
    times the checkpoints.

    Who may move it: up, anyone who learnt a committed offset (:meth:`advance`); down,
    only the log cutting its own records, inside :meth:`holding`. Thread-safe."""

    def __init__(
        self,
        directory: Path,
        log_id: str,
        bounds: Bounds,
        *,
        interval_ms: int,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self._path = directory / naming.HIGH_WATERMARK_FILE
        self._log_id = log_id
        self._bounds = bounds
        self._interval_ms = interval_ms
        self._clock = clock
        self._lock = threading.RLock()
        self._write_lock = threading.Lock()
        self._written_ms = clock()
        self._written = read_high_watermark(self._path)
        start, end = bounds()
        stored = start if self._written is None else self._written
        self._value = min(max(stored, start), end)

    @property
    def value(self) -> int:
        """One past the last committed record. No lock."""
        return self._value

    def advance(self, hw: int) -> tuple[int, int]:
        """Move up to ``hw`` clamped to the log's bounds (a lower value changes nothing);
        returns ``(before, now)``. Does not write the checkpoint (see
        :meth:`checkpoint_if_due`)."""
        with self._lock:
            old = self._value
            start, end = self._bounds()
            new = min(max(hw, start), end)
            if new > old:
                self._value = new
            return old, self._value

    @contextmanager
    def holding(self, cut: int | None = None) -> Iterator[None]:
        """Hold the value still while the log's bounds move (no :meth:`advance` lands
        between the cut and the new bounds); ``cut``: the log is about to drop its
        records from there, so the value drops to it first, and the checkpoint too (a
        file holding a higher value would vouch for records the cut replaces)."""
        with self._lock:
            if cut is not None:
                self._lower(cut)
            yield

    def _lower(self, offset: int) -> None:
        if self._value > offset:
            self._value = offset
            if self._written is None or self._written > offset:
                self.checkpoint()

    def clamp(self) -> None:
        """Keep ``log_start <= HW <= next_offset`` after the log's bounds moved."""
        with self._lock:
            start, end = self._bounds()
            self._lower(end)
            self._value = max(self._value, min(start, end))

    def checkpoint_if_due(self) -> None:
        """Checkpoint if ``interval_ms`` passed since the last write."""
        if self._clock() - self._written_ms >= self._interval_ms:
            self.checkpoint(quiet=True)

    def checkpoint(self, *, quiet: bool = False) -> None:
        """Write the value to the checkpoint file now, if it changed since the last write
        (``quiet``: a failure is logged, to be tried again, not raised: the file keeps an
        older, lower value, which is safe)."""
        with self._write_lock:
            value = self._value
            if value == self._written:
                return
            try:
                write_atomic(self._path, encode_high_watermark(value))
            except OSError as exc:
                if not quiet:
                    raise
                log.warning("%s: high-watermark checkpoint not written: %s", self._log_id, exc)
                return
            self._written = value
            self._written_ms = self._clock()


def _epoch_pairs(epochs: Sequence[tuple[int, int]]) -> list[EpochEntry]:
    """The leader's ``(epoch, start_offset)`` pairs, checked: ints >= 0, strictly
    increasing in both (InvalidArgumentError otherwise)."""
    out: list[EpochEntry] = []
    for pair in epochs:
        try:
            epoch, start = pair
        except (TypeError, ValueError):
            raise InvalidArgumentError(
                f"a leader epoch entry is (epoch, start_offset), not {pair!r:.60}"
            ) from None
        if not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (epoch, start)
        ):
            raise InvalidArgumentError(f"leader epoch entry {pair!r:.60} must hold two ints >= 0")
        if out and (epoch <= out[-1].epoch or start <= out[-1].start_offset):
            raise InvalidArgumentError(
                f"leader epoch entries must increase: {tuple(out[-1])} then {(epoch, start)}"
            )
        out.append(EpochEntry(epoch, start))
    return out


def leader_batches(data: bytes | bytearray | memoryview) -> EncodedBatch:
    """The leader's stored batches ``data`` (a page of its ``read_batches``), checked as
    a follower appends them: each batch's framing and CRC-32C, and offsets that follow one
    another from the first batch's base offset (records are not decoded: the leader
    verified them when it appended them). CorruptRecordError for a damaged batch or one
    cut short, InvalidArgumentError for batches that do not follow each other."""
    buf = data if isinstance(data, bytes | bytearray) else bytes(data)
    first = batch_header(buf)[0] if len(buf) >= HEADER_SIZE else 0
    infos, end = batch_table(buf, first)
    if end != len(buf):
        expect = infos[-1].next_offset if infos else first
        if end + HEADER_SIZE <= len(buf):
            base, size, _count = batch_header(buf, end)
            if base != expect:
                check_batches(memoryview(buf)[end : end + size], base)  # damage is that
                raise InvalidArgumentError(
                    f"replica batches do not follow each other: offset {base} where "
                    f"{expect} was expected"
                )
            check_batches(memoryview(buf)[end:], expect)
        raise CorruptRecordError(
            f"the leader's batches end inside a batch (at byte {end} of {len(buf)}, "
            f"offset {expect})"
        )
    return EncodedBatch(first, buf, infos, infos[-1].next_offset - first)


def _epochs_for(pairs: list[EpochEntry], first: int, end: int) -> list[EpochEntry]:
    """What a follower records for appending offsets ``[first, end)``: the epoch of the
    first batch (the last pair starting at or before ``first``), starting at ``first``,
    then every pair starting inside the range."""
    out = [EpochEntry(e.epoch, first) for e in pairs if e.start_offset <= first][-1:]
    return out + [e for e in pairs if first < e.start_offset < end]


class Replication:
    """One partition log's replication state (see the module docstring): the epoch cache
    :attr:`epochs`, the role :attr:`following`, and :attr:`hw`, the high watermark of a
    replicated log (None: the log's high watermark is its next offset).

    ``local`` is the partition's local log, ``bounds`` its ``(log_start, next_offset)``.
    The log holding this object writes :attr:`following` on a role change, cuts
    :attr:`epochs` when its own bounds move, and checks that it is open before each
    call. Thread-safety as in the module docstring."""

    def __init__(
        self,
        directory: Path,
        log_id: str,
        local: Log,
        bounds: Bounds,
        *,
        replicated: bool,
        hw_checkpoint_interval_ms: int,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        if not isinstance(hw_checkpoint_interval_ms, int) or hw_checkpoint_interval_ms < 0:
            raise InvalidArgumentError(
                "hw_checkpoint_interval_ms must be an integer >= 0, got "
                f"{hw_checkpoint_interval_ms!r}"
            )
        self._local = local
        self._bounds = bounds
        self._log_id = log_id
        try:
            self.epochs = LeaderEpochCache(directory)
        except CorruptIndexError as exc:
            # No epochs is safe: asked about one, this log answers "unknown" and a follower
            # falls back to its high watermark; as a follower it truncates to its own.
            log.error("%s: %s; it is replaced by an empty one", log_id, exc.message)
            (directory / naming.LEADER_EPOCH_FILE).unlink(missing_ok=True)
            self.epochs = LeaderEpochCache(directory)
        local.set_leader_epoch_source(self._leader_epoch)
        start, end = bounds()
        # An epoch may start at the log end (a leader with no append yet), not past it.
        self.epochs.truncate_from_end(end + 1)
        self.epochs.truncate_from_start(start)
        self.following = replicated
        """Whether this replica follows another's log (a replicated log follows until
        told to lead)."""
        self._refuse_appends = False
        """Set by :meth:`follow`, cleared when an epoch is assigned: the local log
        refuses a leader's appends meanwhile (its epoch source raises)."""
        self.hw: HighWatermark | None = None
        if replicated:
            self.hw = HighWatermark(
                directory, log_id, bounds, interval_ms=hw_checkpoint_interval_ms, clock=clock
            )

    @property
    def high_watermark(self) -> int:
        """The HW's value; the log's next offset when it keeps none. No lock."""
        return self.hw.value if self.hw is not None else self._local.next_offset

    @contextmanager
    def moving_bounds(self, cut: int | None = None) -> Iterator[None]:
        """The log's bounds move inside this block: the HW holds still (and drops to
        ``cut`` first, see :meth:`HighWatermark.holding`); with a ``cut``, the epochs from
        there go once the block is done."""
        with self.hw.holding(cut) if self.hw is not None else nullcontext():
            yield
            if cut is not None:
                self.epochs.truncate_from_end(cut)

    def clamp_high_watermark(self) -> None:
        """Keep the HW in the log's bounds after they moved (no-op without one)."""
        if self.hw is not None:
            self.hw.clamp()

    # ---- leader epochs ----------------------------------------------------------------

    @property
    def latest_leader_epoch(self) -> int:
        """The highest leader epoch held, :data:`~tiered_log.local.leader_epoch.UNDEFINED_EPOCH`
        (-1) when none."""
        latest = self.epochs.latest_epoch
        return UNDEFINED_EPOCH if latest is None else latest

    def _leader_epoch(self) -> int:
        """The epoch the local log stamps into the batches it appends as leader (its
        latest: the one this replica leads in), -1 when it holds none. Called under the
        local log's append lock: NotLeaderError, nothing written, while this replica
        follows (a produce that passed the broker's leadership check before the role
        changed must not write among the leader's records its fetcher copies)."""
        self.check_leads()
        return self.latest_leader_epoch

    def check_leads(self) -> None:
        """NotLeaderError once this replica was told to follow and no epoch was assigned
        since (a look without the append lock: the append itself looks again under
        it)."""
        if self._refuse_appends:
            raise NotLeaderError(
                f"{self._log_id} follows its leader's log now: appends go to the leader"
            )

    def follow(self) -> None:
        """This replica follows from now on, and refuses a leader's appends until an
        epoch is assigned to it again. Set under the local log's append lock: an append
        running now ends first (before the fetcher may cut the log), and none after it
        writes as leader."""

        def stop_appends(_end: int) -> None:
            self.following = self._refuse_appends = True

        try:
            self._local.at_end(stop_appends)
        except LogClosedError:  # nothing appends to a closed log
            self.following = self._refuse_appends = True

    def assign_leader_epoch(self, epoch: int) -> int:
        """This replica leads in ``epoch`` (an int >= 0, checked by the caller) from the
        local log's end (held still meanwhile); returns the epoch's start; for the latest
        epoch again, its recorded start and nothing changes. InvalidArgumentError for an
        epoch below the latest."""

        def assign(end: int) -> int:
            latest = self.epochs.latest_entry
            if latest is not None and latest.epoch == epoch:
                start = latest.start_offset
            else:
                self.epochs.assign(epoch, end)  # InvalidArgumentError below the latest
                start = end
            self._refuse_appends = False  # it leads in ``epoch``
            return start

        return self._local.at_end(assign)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """Kafka's OffsetsForLeaderEpoch answer: ``(epoch found, end offset)``; the latest
        epoch ends at the log's next offset."""
        return self.epochs.end_offset_for(epoch, self._local.next_offset)

    def divergence(self, leader_answer: tuple[int, int]) -> int:
        """Where a follower's log must be cut, given the leader's
        :meth:`end_offset_for_epoch` answer for :attr:`latest_leader_epoch` (without an
        answer to go by, the high watermark: a log without one keeps nothing), never
        below the log start. Cuts nothing."""
        start, end = self._bounds()
        hw = self.hw.value if self.hw is not None else start
        cut = _divergence_point(self.epochs, end, leader_answer, high_watermark=max(hw, start))
        return max(cut.offset, start)

    # ---- the follower's append ----------------------------------------------------------

    def append(
        self,
        data: bytes | bytearray | memoryview,
        epochs: Sequence[tuple[int, int]],
        rolls: Sequence[int] | None,
        *,
        sync: bool = True,
    ) -> int:
        """Append the leader's stored batches at the offsets and with the timestamps they
        carry, rolling exactly at ``rolls`` (None: by the log's own size), and record the
        leader's ``epochs`` for the range first (cut again if the write fails); returns
        the new next offset; ``sync=False``: the fsync is left to the caller
        (:meth:`Log.append_copy <tiered_log.local.log.Log.append_copy>`). See
        :meth:`TieredLog.append_replica <tiered_log.partition.log.TieredLog.append_replica>`
        for the errors."""
        if not len(data):
            return self._local.next_offset
        pairs = _epoch_pairs(epochs)
        batch = leader_batches(data)

        def record_epochs(nxt: int) -> None:
            assign = _epochs_for(pairs, nxt, batch.next_offset)
            latest = self.epochs.latest_epoch
            if assign and latest is not None and assign[0].epoch < latest:
                raise InvalidArgumentError(
                    f"the leader's epoch {assign[0].epoch} at offset {nxt} is below this "
                    f"log's latest epoch {latest}: truncate to the divergence point first"
                )
            for e in assign:
                self.epochs.assign(e.epoch, e.start_offset)

        return self._local.append_copy(
            batch,
            rolls=rolls,
            before=record_epochs,
            undo=self.epochs.truncate_from_end,
            sync=sync,
        )


__all__ = [
    "HW_FILE_VERSION",
    "HighWatermark",
    "Replication",
    "encode_high_watermark",
    "leader_batches",
    "read_high_watermark",
]
