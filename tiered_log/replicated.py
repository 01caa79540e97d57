"""The log side of replication (issue 16): leader epochs, the follower's append, the high
watermark. :class:`ReplicatedLogMixin` is mixed into :class:`~tiered_log.tiered.TieredLog`
(kept here so that module stays readable); the node's replication code (the leader's
:class:`~tiered_log.cluster.replica.LeaderReplication`, the follower's fetcher) calls it.

What each part is for, as in Kafka:

- **Leader epochs** (KIP-101/279): every TieredLog keeps a
  :class:`~tiered_log.local.leader_epoch.LeaderEpochCache` in its directory. A new leader
  calls :meth:`~ReplicatedLogMixin.assign_leader_epoch` (its epoch starts at its log
  end); it answers a follower's OffsetsForLeaderEpoch with
  :meth:`~ReplicatedLogMixin.end_offset_for_epoch`; a follower coming back finds where
  its log diverges with :meth:`~ReplicatedLogMixin.divergence` and truncates there.
  The cache follows the log: a truncation cuts it from the end, the log start moving up
  (total retention, a reset) cuts it from the start; on open it is cut to the log's
  bounds (a crash between writing the cache and the log).
- **The follower's append** (:meth:`~ReplicatedLogMixin.append_replica`): the leader's
  stored batches, verified, appended at the offsets and with the timestamps they have
  on the leader, in one write, plus the leader's epoch entries for that range; a
  follower whose log end fell below the leader's local start restarts empty there
  (:meth:`~ReplicatedLogMixin.reset_replica`); it deletes local segments by local
  retention only below what the leader has shipped (:meth:`~ReplicatedLogMixin.apply_replica_retention`)
  and never ships itself.
- **The high watermark** (``replicated=True`` only; otherwise it is the next offset, as
  before): the offset below which records are committed. The leader computes it (the
  lowest log end of the in-sync replicas: that invariant is the leader's job) and the
  follower learns it from fetches; both hand it to :meth:`~ReplicatedLogMixin.set_high_watermark`.
  Here the log keeps: ``log_start <= HW <= next_offset``; it moves down only through a
  truncation (or a reset); consumers' reads (``upto=``) never return a record at or past
  it. In a replicated log it falls on a batch boundary (followers append whole batches;
  a batch straddling ``upto`` is not served at all). It is checkpointed to
  ``<log dir>/high-watermark-checkpoint`` (:data:`~tiered_log.format.naming.HIGH_WATERMARK_FILE`,
  ``"0\\n<hw>\\n"``, written with :func:`~tiered_log.local.files.write_atomic`) at most
  every ``hw_checkpoint_interval_ms``, at once when it moves down, and on close; opening
  reads it back clamped to the log's bounds, and a missing or damaged file means the log
  start (a lower HW is always safe: it hides records, never shows uncommitted ones).

Thread-safety: :meth:`~ReplicatedLogMixin.append_replica`, :meth:`~ReplicatedLogMixin.reset_replica`,
truncation and :meth:`~ReplicatedLogMixin.apply_replica_retention` are the follower's
fetcher's, one thread (they also serialize with each other, with local appends and with
control operations, but two fetchers of one log would append each other's data twice).
:meth:`~ReplicatedLogMixin.set_high_watermark` and the epoch calls may come from any thread;
reads of the HW take no lock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import CorruptIndexError, InvalidArgumentError, InvalidOffsetError
from .format import naming
from .format.records import EncodedBatch, receive_batches
from .local.files import write_atomic
from .local.leader_epoch import UNDEFINED_EPOCH, EpochEntry, LeaderEpochCache
from .local.leader_epoch import divergence_point as _divergence_point
from .local.log import now_ms

if TYPE_CHECKING:
    from .local.log import Log
    from .remote.tier import RemoteTier, TierConfig
    from .shipper import Shipper

log = logging.getLogger(__name__)

HW_FILE_VERSION = 0
_NO_THRESHOLD = 1 << 62
"""A follower appends what its leader accepted: no value-size check of its own."""


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


def _check_offset(offset: int) -> None:
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise InvalidOffsetError(f"offset must be a non-negative integer, got {offset!r}")


def _split_at(batch: EncodedBatch, at: set[int]) -> list[EncodedBatch]:
    """``batch`` cut before each of its batches whose base offset is in ``at``."""
    if not at:
        return [batch]
    out: list[EncodedBatch] = []
    start = 0
    infos = batch.batches
    for i in range(1, len(infos) + 1):
        if i == len(infos) or infos[i].base_offset in at:
            part = infos[start:i]
            first, last = part[0], part[-1]
            lo, hi = first.position, last.position + last.size
            out.append(
                EncodedBatch(
                    first.base_offset,
                    bytes(memoryview(batch.data)[lo:hi]),
                    [b._replace(position=b.position - lo) for b in part],
                    last.next_offset - first.base_offset,
                )
            )
            start = i
    return out


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


def _epochs_for(pairs: list[EpochEntry], first: int, end: int) -> list[EpochEntry]:
    """What a follower records for appending offsets ``[first, end)``: the epoch of the
    first batch (the last pair starting at or before ``first``), starting at ``first``,
    then every pair starting inside the range."""
    out = [EpochEntry(e.epoch, first) for e in pairs if e.start_offset <= first][-1:]
    return out + [e for e in pairs if first < e.start_offset < end]


class ReplicatedLogMixin:
    """Replication methods of :class:`~tiered_log.tiered.TieredLog` (module docstring)."""

    if TYPE_CHECKING:
        directory: Path
        log_id: str
        tier_config: TierConfig
        _local: Log
        _remote: RemoteTier | None
        _shipper: Shipper | None
        _ctl: threading.Lock
        _closed: bool

        @property
        def log_start_offset(self) -> int: ...

        @property
        def next_offset(self) -> int: ...

        def _check_open(self) -> None: ...

        def stop_shipper(self, *, wait: bool = True) -> None: ...

        def _resume_offset(self) -> int: ...

    _epochs: LeaderEpochCache
    _replicated: bool
    _following: bool
    _local_hold: int | None
    _resync_pending: bool
    _hw: int
    _hw_lock: threading.RLock
    _hw_write_lock: threading.Lock
    _hw_written: int | None
    _hw_written_ms: int
    _hw_interval_ms: int

    def _open_replication(self, replicated: bool, hw_checkpoint_interval_ms: int) -> None:
        """Open the epoch cache (cut to the log's bounds) and, for a replicated log, read
        the HW checkpoint back (clamped). Called once the local log is open."""
        if not isinstance(hw_checkpoint_interval_ms, int) or hw_checkpoint_interval_ms < 0:
            raise InvalidArgumentError(
                "hw_checkpoint_interval_ms must be an integer >= 0, got "
                f"{hw_checkpoint_interval_ms!r}"
            )
        try:
            self._epochs = LeaderEpochCache(self.directory)
        except CorruptIndexError as exc:
            # No epochs is safe: asked about one, this log answers "unknown" and a follower
            # falls back to its high watermark; as a follower it truncates to its own.
            log.error("%s: %s; it is replaced by an empty one", self.log_id, exc.message)
            (self.directory / naming.LEADER_EPOCH_FILE).unlink(missing_ok=True)
            self._epochs = LeaderEpochCache(self.directory)
        # An epoch may start at the log end (a leader with no append yet), not past it.
        self._epochs.truncate_from_end(self.next_offset + 1)
        self._epochs.truncate_from_start(self.log_start_offset)
        self._replicated = replicated
        self._following = replicated  # a replicated log follows until told to lead
        self._resync_pending = False
        self._hw_lock = threading.RLock()
        self._hw_write_lock = threading.Lock()
        self._hw_interval_ms = hw_checkpoint_interval_ms
        self._hw_written_ms = now_ms()
        self._hw_written = None
        self._hw = self.next_offset
        if replicated:
            path = self.directory / naming.HIGH_WATERMARK_FILE
            self._hw_written = read_high_watermark(path)
            stored = self.log_start_offset if self._hw_written is None else self._hw_written
            self._hw = min(max(stored, self.log_start_offset), self.next_offset)

    # ---- leader epochs ----------------------------------------------------------------

    def leader_epoch_entries(self) -> list[EpochEntry]:
        """This log's ``(epoch, start_offset)`` entries, oldest first. Any thread."""
        return self._epochs.entries()

    @property
    def latest_leader_epoch(self) -> int:
        """The highest leader epoch this log holds, :data:`~tiered_log.local.leader_epoch.UNDEFINED_EPOCH`
        (-1) when none (what a follower sends in OffsetsForLeaderEpoch)."""
        latest = self._epochs.latest_epoch
        return UNDEFINED_EPOCH if latest is None else latest

    # ---- roles --------------------------------------------------------------------------

    @property
    def following(self) -> bool:
        """Whether this replica follows another's log (see :meth:`follow`)."""
        return self._following

    def follow(self) -> None:
        """This replica follows: it appends only what its fetcher brings
        (:meth:`append_replica`), rolls only where the leader did, never by its own size
        or age, and ships nothing (its shipper stops; :meth:`maintain` flushes and
        checkpoints only). The node, on a role change."""
        self._following = True
        self._local_hold = None  # a follower keeps nothing for others
        # The copies under way stay fenced: the fence (kept) now answers False, and the
        # round starts no more (the shipper's stop is asked after each wait).
        self.stop_shipper(wait=False)

    def lead(self, epoch: int, fence: Callable[[], bool] | None = None) -> int:
        """This replica leads ``epoch`` from its log end (:meth:`assign_leader_epoch`;
        returns the epoch's start); it rolls by its own size and age again. With a
        remote tier, the next tiering round first rebuilds the remote state from the
        bucket (others shipped while this replica followed) and its copies then carry
        ``epoch``; ``fence()`` is asked before each copy is committed (False: this node
        was deposed, the copy is abandoned). A log that never held a record first
        continues above the bucket (:meth:`_lead_from_bucket`). The owner starts the
        shipper. The node, on a role change."""
        if self._remote is not None:
            self._remote.leader_epoch = epoch
            self._remote.fence = fence
            self._resync_pending = True
            if self.next_offset == 0 and self._epochs.latest_entry is None:
                self._lead_from_bucket()
        start = self.assign_leader_epoch(epoch)
        self._following = False
        return start

    def _lead_from_bucket(self) -> None:
        """A replica about to lead with a log that never held a record (a whole cluster
        restored onto new disks from the bucket, or every replica's disk lost): take
        the bucket's view first and continue above every offset the partition handed
        out (:meth:`_resume_offset`: the gap is reported lost), never at 0 over
        archived offsets. RemoteStorageError if the bucket fails: the node tries to
        lead again at its next metadata poll. Under the control lock."""
        r = self._remote
        assert r is not None
        with self._ctl:
            self._check_open()
            r.resync_from_bucket()
            self._resync_pending = False
            resume = self._resume_offset()
            if resume > self.next_offset:
                with self._hw_lock:
                    self._local.reset(resume)
                    self._clamp_high_watermark()
                # Everything below was committed before: readable (archived) at once.
                self.set_high_watermark(resume)
                log.info(
                    "%s: leads from the bucket: archived up to %d, continues at %d",
                    self.log_id,
                    r.remote_end,
                    resume,
                )

    def local_bytes_from(self, offset: int) -> int:
        """Bytes of the local log from ``offset`` to its end: what a follower whose log
        ends at ``offset`` still has to copy from this leader (see
        :meth:`Log.bytes_from <tiered_log.local.log.Log.bytes_from>`). Any thread."""
        return self._local.bytes_from(offset)

    def segment_bases(self, start: int, end: int) -> list[int]:
        """Base offsets of the local segments beginning in ``[start, end)``: where a
        follower copying that range rolls (see :meth:`append_replica`)."""
        return [s.base_offset for s in self._local.segments() if start <= s.base_offset < end]

    def assign_leader_epoch(self, epoch: int) -> int:
        """This replica became leader in ``epoch``: the epoch starts at the log's next
        offset (before any append of it). Returns that start; for the latest epoch again,
        its recorded start and nothing changes. An epoch below the latest is refused
        (InvalidArgumentError). The leader's election code; serialized with appends."""
        if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0:
            raise InvalidArgumentError(f"leader epoch must be an integer >= 0, got {epoch!r}")
        self._check_open()
        with self._local._lock:  # the log end cannot move meanwhile
            latest = self._epochs.latest_entry
            if latest is not None and latest.epoch == epoch:
                return latest.start_offset
            start = self._local.next_offset
            self._epochs.assign(epoch, start)
            return start

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """Kafka's OffsetsForLeaderEpoch answer of this log (as a leader): ``(epoch
        found, end offset)``, see :meth:`LeaderEpochCache.end_offset_for
        <tiered_log.local.leader_epoch.LeaderEpochCache.end_offset_for>`; the latest
        epoch ends at the log's next offset. Any thread."""
        self._check_open()
        return self._epochs.end_offset_for(epoch, self.next_offset)

    def record_leader_epoch(self, epoch: int, start_offset: int) -> None:
        """Record the leader's entry ``(epoch, start_offset)`` in this log's cache (a
        follower after :meth:`reset_replica`: the leader's epochs from the new start), as
        :meth:`LeaderEpochCache.assign <tiered_log.local.leader_epoch.LeaderEpochCache.assign>`
        (an epoch below the latest: InvalidArgumentError). The follower's fetcher."""
        self._check_open()
        self._epochs.assign(epoch, start_offset)

    def divergence(self, leader_answer: tuple[int, int]) -> int:
        """The offset this log (as a follower) must be truncated to, given the leader's
        :meth:`end_offset_for_epoch` answer for :attr:`latest_leader_epoch`:
        :func:`~tiered_log.local.leader_epoch.divergence_point` on this log's cache and
        end (without an answer to go by, the high watermark: a plain log, which has none,
        keeps nothing), never below the log start. When the leader lacks this log's
        latest epoch the cut is partial: the next fetch, sending the new latest epoch,
        finds the rest. Truncates nothing: the fetcher calls :meth:`truncate`."""
        start = self.log_start_offset
        hw = self._hw if self._replicated else start
        cut = _divergence_point(
            self._epochs, self.next_offset, leader_answer, high_watermark=max(hw, start)
        )
        return max(cut.offset, start)

    # ---- the follower's append ----------------------------------------------------------

    def append_replica(
        self,
        data: bytes | bytearray | memoryview,
        epochs: Sequence[tuple[int, int]],
        rolls: Sequence[int] | None = None,
    ) -> int:
        """Append the leader's stored batches (as its ``read_batches`` returned them) at
        the offsets and with the timestamps they carry; returns the new next offset
        (empty ``data``: nothing happens).

        ``rolls``: the base offsets of the leader's segments among these batches. The
        follower rolls exactly there and nowhere else (never by its own size or age), so
        its segments are the leader's, byte for byte: a follower that becomes leader
        ships from the bucket's remote end, which is one of its own segment bases (no
        segment shipped twice, none overlapping). One write per leader segment. None
        (a plain copy, not a cluster's follower): the log rolls by its own size.

        The first batch must start at exactly this log's next offset and the batches must
        follow each other (InvalidArgumentError naming both offsets); every batch is
        verified first (checksums, lengths; CorruptRecordError): nothing is appended
        unless all of it is. ``epochs`` are the leader's ``(epoch, start_offset)``
        entries: the epoch of the first batch and those starting inside the appended
        range are recorded in this log's cache before the write (cut again if it fails).
        The follower's fetcher only, one thread (see the module docstring)."""
        self._check_open()
        if not len(data):
            return self.next_offset
        pairs = _epoch_pairs(epochs)
        batch: EncodedBatch = receive_batches(data, _NO_THRESHOLD)
        expect = batch.base_offset
        for b in batch.batches:
            if b.base_offset != expect:
                raise InvalidArgumentError(
                    f"replica batches do not follow each other: offset "
                    f"{b.base_offset} where {expect} was expected"
                )
            expect = b.next_offset
        active = self._local.active_base_offset
        with self._local._lock:  # nothing else appends between the check and the write
            nxt = self._local.next_offset
            if batch.base_offset != nxt:
                raise InvalidArgumentError(
                    f"replica batches start at offset {batch.base_offset}"
                    f" but this log's next offset is {nxt}"
                )
            assign = _epochs_for(pairs, nxt, batch.next_offset)
            latest = self._epochs.latest_epoch
            if assign and latest is not None and assign[0].epoch < latest:
                raise InvalidArgumentError(
                    f"the leader's epoch {assign[0].epoch} at offset {nxt} is below this "
                    f"log's latest epoch {latest}: truncate to the divergence point first"
                )
            for e in assign:
                self._epochs.assign(e.epoch, e.start_offset)
            try:
                # At the next offset already: the offsets stay, and so do the timestamps
                # (a stored batch has none below 0); checksums are recomputed unchanged.
                if rolls is None:
                    self._local.append_batch(batch)
                at = set(rolls or ())
                for piece in _split_at(batch, at) if rolls is not None else ():
                    if (
                        piece.base_offset in at
                        and self._local.active_base_offset != piece.base_offset
                    ):
                        self._local.roll()
                    self._local.append_batch(piece, roll=False)
            except BaseException:
                self._epochs.truncate_from_end(self._local.next_offset)
                raise
            end = self._local.next_offset
        if self._shipper is not None and self._local.active_base_offset != active:
            self._shipper.wake()
        return end

    def reset_replica(self, offset: int) -> None:
        """Restart the local log empty at ``offset``: for a follower whose log end is
        below the leader's local start (the records between are only in the bucket). The
        epoch cache is cleared (the next :meth:`append_replica` records the leader's epoch
        at ``offset``); a remote tier of this log holding data at or above ``offset`` is
        truncated there; the high watermark is clamped to the new bounds. The follower's
        fetcher only."""
        _check_offset(offset)
        with self._ctl:
            self._check_open()
            with self._hw_lock:
                self._lower_high_watermark(offset)
                r = self._remote
                if r is not None and offset < r.remote_end:
                    r.truncate(offset, self._local.log_start_offset)
                self._local.reset(offset)
                self._epochs.clear()
                self._clamp_high_watermark()

    def resync_remote(self) -> int:
        """Rebuild this log's view of the bucket (journal, metadata, remote-index files)
        from the manifests there, downloading no segment data: a replica reset to its
        leader's remote end can then serve the archived offsets once it leads. Reads
        only: a follower writes nothing to the bucket (an object without its manifest
        may be the leader's copy under way). Returns the number of remote segments; 0
        without a remote tier. RemoteStorageError if the bucket fails (nothing else
        changes)."""
        r = self._remote
        if r is None:
            return 0
        with self._ctl:
            self._check_open()
            return r.resync_from_bucket(read_only=True)

    def refresh_remote_meta(self) -> None:
        """A follower's copy of the bucket's metadata (log start, lost ranges, recorded
        end): one small read, so that it reports what its leader does; its view of the
        copies is rebuilt only if it leads (:meth:`lead`). Reads only; no-op without a
        remote tier. RemoteStorageError if the bucket fails (nothing changes)."""
        r = self._remote
        if r is None:
            return
        with self._ctl:
            self._check_open()
            r.load_meta_from_bucket()

    def apply_replica_retention(self, remote_end: int) -> None:
        """A follower's retention round (it ships nothing; the leader does): delete the
        oldest local segments past local retention (``local_retention_ms`` /
        ``local_retention_bytes``; without a remote tier the total ``retention_ms`` /
        ``retention_bytes``) that end at or below both ``remote_end`` (the leader's
        remote end, learnt from fetches: those records are in the bucket) and this log's
        high watermark. The follower's fetcher (or its node's upkeep), any one thread."""
        _check_offset(remote_end)
        tc = self.tier_config
        with self._ctl:
            if self._closed:
                return
            limit = min(remote_end, self.high_watermark)
            if self._remote is None:
                cands = self._local.retention_candidates(
                    tc.retention_ms, tc.retention_bytes, now_ms()
                )
            else:
                cands = self._local.retention_candidates(
                    tc.local_retention_ms, tc.local_retention_bytes, now_ms()
                )
            cands = [s for s in cands if s.next_offset <= limit]
            if cands:
                self._local.delete_segments_before(cands[-1].next_offset)
                # This log's start moved (a follower's remote tier holds nothing): its
                # epochs start there, as they would when it opens again.
                self._epochs.truncate_from_start(self.log_start_offset)
                self._clamp_high_watermark()

    # ---- the high watermark -------------------------------------------------------------

    @property
    def replicated(self) -> bool:
        """Whether this log keeps a high watermark of its own (else it is the next offset)."""
        return self._replicated

    @property
    def high_watermark(self) -> int:
        """One past the last committed record: what consumers may read (``upto=``). The
        next offset for a log opened with ``replicated=False``. No lock."""
        return self._hw if self._replicated else self.next_offset

    def set_high_watermark(self, hw: int) -> int:
        """Move the high watermark up to ``hw`` (clamped to ``[log_start, next_offset]``;
        a lower value leaves it as it is: it moves down only through a truncation).
        Returns the high watermark now. Checkpointed at most every
        ``hw_checkpoint_interval_ms``; wakes the shipper when it passes the last sealed
        segment (only committed segments ship). A no-op on a log opened with ``replicated=False``
        (its high watermark is always its next offset). Any thread."""
        _check_offset(hw)
        self._check_open()
        if not self._replicated:
            return self.next_offset
        with self._hw_lock:
            old = self._hw
            new = min(max(hw, self.log_start_offset), self.next_offset)
            if new > old:
                self._hw = new
            value = self._hw
        shipper = self._shipper
        if shipper is not None and old < self._local.active_base_offset <= value:
            shipper.wake()  # the sealed segments are committed now: there is one to ship
        self._checkpoint_if_due()
        return value

    def _checkpoint_if_due(self) -> None:
        """Checkpoint the HW if ``hw_checkpoint_interval_ms`` passed since the last write."""
        if self._replicated and now_ms() - self._hw_written_ms >= self._hw_interval_ms:
            self.checkpoint_high_watermark(quiet=True)

    def checkpoint_high_watermark(self, *, quiet: bool = False) -> None:
        """Write the high watermark to its checkpoint file now, if it changed since the
        last write (``quiet``: a failure is logged, to be tried again, not raised: the
        file keeps an older, lower value, which is safe). Any thread."""
        if not self._replicated:
            return
        with self._hw_write_lock:
            value = self._hw
            if value == self._hw_written:
                return
            try:
                write_atomic(
                    self.directory / naming.HIGH_WATERMARK_FILE, encode_high_watermark(value)
                )
            except OSError as exc:
                if not quiet:
                    raise
                log.warning("%s: high-watermark checkpoint not written: %s", self.log_id, exc)
                return
            self._hw_written = value
            self._hw_written_ms = now_ms()

    def _lower_high_watermark(self, offset: int) -> None:
        """A truncation to ``offset`` is about to happen (caller holds ``_hw_lock``): the
        HW drops to it first, and the checkpoint too (a file holding a higher value would
        vouch for records the truncation replaces)."""
        if self._replicated and self._hw > offset:
            self._hw = offset
            if self._hw_written is None or self._hw_written > offset:
                self.checkpoint_high_watermark()

    def _clamp_high_watermark(self) -> None:
        """Keep ``log_start <= HW <= next_offset`` after the bounds moved."""
        if not self._replicated:
            return
        with self._hw_lock:
            nxt = self.next_offset
            self._lower_high_watermark(nxt)
            self._hw = max(self._hw, min(self.log_start_offset, nxt))


__all__ = ["HW_FILE_VERSION", "ReplicatedLogMixin", "encode_high_watermark", "read_high_watermark"]
