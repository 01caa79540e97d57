"""The partition log: a local segmented log plus its remote tier, with transparent reads.

Offsets are laid out over the two tiers like this::

    log_start          local_start                     remote_end         next_offset
       |---- remote only ----|==== local and remote ====|---- local only ----|
                              (shipped, kept locally until local retention drops them)

A read at ``offset >= local_start`` is served from disk; a lower one from the bucket via
the remote-index files and ranged GETs (:class:`~tiered_log.remote.tier.RemoteTier`).
Appends only ever touch the local log. :class:`TieredLog` is made of collaborators, as
Kafka's ``UnifiedLog`` holds a private ``LocalLog`` and the remote tier:

- the local log (:class:`~tiered_log.local.log.Log`) and the remote tier
  (:class:`~tiered_log.remote.tier.RemoteTier`, None without a bucket), both private;
- :class:`~tiered_log.partition.tiering.Tiering`: which segments ship, a round of copying
  and retention, the offsets reserved in the bucket, the background shipper (on an
  injectable :class:`~tiered_log.partition.scheduler.TieringScheduler`);
- :class:`~tiered_log.partition.replication.Replication`: leader epochs, the role, the
  follower's append and the one :class:`~tiered_log.partition.replication.HighWatermark`
  (``replicated=True`` only: a log opened with ``replicated=False``, the default, has no
  high watermark of its own: it is the next offset);
- :mod:`~tiered_log.partition.report`: stats and describe;
- :class:`~tiered_log.partition.reads.TierReads`: which tier serves a read, the batch
  read in both its forms, the timestamp lookup;
- :class:`~tiered_log.partition.idempotence.Idempotence`: the idempotent producers'
  state, its checks at append and its snapshot.

This class keeps appends, truncation, reconfiguration, and the
operations that move several parts at once (a truncation, a follower's reset, a new
leader continuing above the bucket), under its control lock.

Opening a TieredLog on an empty directory whose bucket holds the log's segments rebuilds
the remote state from the bucket alone (manifests, never segment data) and continues
the log above every offset it handed out (the end recorded in the bucket; what lies
between the remote end and it is reported lost, never reused).

Thread-safety: as :class:`~tiered_log.local.log.Log`: appends serialize, reads take no
lock and never wait for the shipper; control operations (truncate, retention, resets,
close) serialize with tiering rounds on the control lock. The follower's calls
(:meth:`TieredLog.append_replica`, :meth:`TieredLog.reset_replica`,
:meth:`TieredLog.apply_replica_retention`) are its fetcher's, one thread.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..bounds import PartitionBounds
from ..errors import (
    InvalidArgumentError,
    InvalidOffsetError,
    LogClosedError,
    OffsetOutOfRangeError,
    RemoteStorageError,
)
from ..format import naming
from ..format.records import EncodedBatch, FetchData, ProducerRecord, Record
from ..local.leader_epoch import EpochEntry
from ..local.log import Log, LogConfig, now_ms
from ..local.ranges import FetchRanges
from ..local.segment import SegmentInfo
from ..remote.storage import RemoteStorage
from ..remote.tier import RemoteTier, TierConfig, TierLimits
from . import report
from .empty_lead import EmptyLead
from .idempotence import PRODUCER_ID_EXPIRATION_MS, Idempotence
from .log_start import LogStartFloor
from .producer_state import ActiveProducer, buffer_headers
from .reads import TierReads
from .replication import Replication
from .scheduler import Shipper, TieringScheduler
from .tiering import Tiering, log_start

log = logging.getLogger(__name__)


TieredBounds = PartitionBounds
"""The bounds of a tiered log: :class:`~tiered_log.bounds.PartitionBounds` (one type
from the log to the client; this name stays for the public API)."""


def _check_offset(offset: int) -> None:
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise InvalidOffsetError(f"offset must be a non-negative integer, got {offset!r}")


def _has_remote_tier(directory: str | os.PathLike[str]) -> bool:
    """Whether the log in ``directory`` had a remote tier (its copy journal exists)."""
    return (Path(directory) / naming.REMOTE_DIR / naming.COPY_JOURNAL_FILE).is_file()


class TieredLog:
    """A log whose old segments live in object storage; see the module docstring.

    ``storage=None`` (or ``tier.remote_enabled=False``) makes it a plain local log that
    applies ``retention_ms``/``retention_bytes`` locally (in :meth:`tier_once`), unless
    its directory keeps the remote tier of a log whose tiering was turned off with its
    remote data retained (:meth:`reconfigure`): that tier opens, serves and ages out
    what the bucket holds, and copies nothing.
    ``rebuild=False`` skips the rebuild from the bucket of a log opened on an empty
    directory (a log created just now, whose id is new, has nothing in the bucket).
    ``limits``: upload and fetch rate limits shared with other logs (a node's); without
    them the log limits itself by ``tier``'s ``upload_bytes_per_sec`` and
    ``fetch_bytes_per_sec``. ``replicated``: the log keeps a high watermark of its own
    (checkpointed at most every ``hw_checkpoint_interval_ms``) and ships only segments
    below it (see :mod:`tiered_log.partition.replication`). ``scheduler``: where the
    shipper's rounds run (the process-wide one when None); ``clock``: wall-clock
    milliseconds for retention, the checkpoint interval and the producer ids' expiry.
    ``producer_id_expiration_ms``: how long an idempotent producer's state outlives its
    last batch (Kafka's ``producer.id.expiration.ms``).
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        log_id: str | None = None,
        storage: RemoteStorage | None = None,
        config: LogConfig | None = None,
        tier: TierConfig | None = None,
        start_shipper: bool = True,
        rebuild: bool = True,
        rebuild_progress: Callable[[int, int], None] | None = None,
        limits: TierLimits | None = None,
        replicated: bool = False,
        hw_checkpoint_interval_ms: int = 1000,
        scheduler: TieringScheduler | None = None,
        clock: Callable[[], int] = now_ms,
        producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS,
    ) -> None:
        self.directory = Path(directory)
        self.log_id = naming.validate_log_id(log_id or self.directory.name)
        self.config = config or LogConfig()
        self.tier_config = tier or TierConfig()
        self._closed = False
        self._ctl = threading.Lock()
        self.directory.mkdir(parents=True, exist_ok=True)
        fresh = not naming.list_segment_bases(self.directory)
        self._storage = storage
        self._limits = limits
        self._ships = start_shipper
        self._remote: RemoteTier | None = None
        # A log whose tiering was turned off keeping its remote data (``retain``) still
        # serves and ages out what the bucket holds: its remote tier opens, copying nothing.
        if storage is not None and (self.tier_config.remote_enabled or _has_remote_tier(directory)):
            self._remote = RemoteTier(
                self.directory, self.log_id, storage, self.tier_config, limits
            )
            if fresh and rebuild and not self._remote.finished_segments:
                self._remote.rebuild_from_bucket(rebuild_progress)
            elif self._remote.needs_index_rebuild:
                try:
                    self._remote.rebuild_index_files()
                except RemoteStorageError as exc:  # reads answer retriable errors meanwhile
                    log.warning(
                        "%s: remote index not rebuilt yet, the bucket failed: %s",
                        self.log_id,
                        exc.message,
                    )
        resume = self._remote.remote_end if self._remote is not None else 0
        if fresh:
            resume = self._remote.resume_offset() if self._remote is not None else 0
        self._local = Log(self.directory, self.config, initial_offset=resume)
        if self._remote is not None and self._local.next_offset < resume:
            # The local disk lost data the bucket holds: continue after the bucket.
            self._local.reset(resume)
        self._floor = LogStartFloor(self.directory)
        if self._remote is not None:
            # A crash between moving the remote log start (retention, deleted records)
            # and deleting the local segments below it left them here: never serve them.
            self._floor.follow(self._remote.meta.log_start_offset, self._local)
        self._local.delete_segments_before(self._floor.offset)  # likewise for the floor
        self._replication = Replication(
            self.directory,
            self.log_id,
            self._local,
            self._bounds_now,
            replicated=replicated,
            hw_checkpoint_interval_ms=hw_checkpoint_interval_ms,
            clock=clock,
        )
        self._tiering = Tiering(
            self.log_id,
            self._local,
            self._remote,
            self.tier_config,
            self._replication,
            self._ctl,
            self._floor,
            clock=clock,
            scheduler=scheduler,
        )
        self._producers = Idempotence(
            self.directory,
            self.log_id,
            self._local,
            expiration_ms=producer_id_expiration_ms,
            clock=clock,
        )
        self._reads = TierReads(
            self.log_id,
            self._local,
            lambda: self._remote,
            self._tiering,
            self._check_open,
            self._floor,
        )
        self._empty_lead = EmptyLead(
            self.directory,
            self.log_id,
            self._local,
            lambda: self._remote,
            self._replication,
            self._tiering,
            self._producers,
            self._ctl,
            self._check_open,
            self.set_high_watermark,
        )
        if start_shipper:
            self.start_shipper()

    def _bounds_now(self) -> tuple[int, int]:
        return self.log_start_offset, self._local.next_offset

    # ---- collaborators, for inspection -------------------------------------------------------

    @property
    def remote_tier(self) -> RemoteTier | None:
        """The remote tier (its journal, index, cache and counters), None without one: for
        tools and tests that inspect it. Reading through it is safe from any thread;
        changing it behind this log's back is not."""
        return self._remote

    @property
    def shipper(self) -> Shipper | None:
        """The background shipper while one runs (its rounds and last error)."""
        return self._tiering.shipper

    def local_segments(self) -> list[SegmentInfo]:
        """The local segments, oldest first (the last is the active one). No lock."""
        return self._local.segments()

    def rewrite_sealed_segment(self, base_offset: int, data: bytes | memoryview) -> int:
        """The scrubber's repair of a damaged local segment from a good copy of its
        batches (see :meth:`Log.rewrite_sealed <tiered_log.local.log.Log.rewrite_sealed>`)."""
        return self._local.rewrite_sealed(base_offset, data)

    def start_shipper(self) -> None:
        """Start the background shipper (a log opened with ``start_shipper=False`` is
        tiered only by explicit :meth:`tier_once` calls until then). No-op without a
        remote tier or when one runs already; not concurrently with :meth:`close`."""
        if not self._closed:
            self._tiering.start_shipper()

    def stop_shipper(self, *, wait: bool = True) -> None:
        """Stop the background shipper (a leader becoming a follower: followers never
        ship); :meth:`start_shipper` starts one again. No-op without one. ``wait=False``:
        ask it to stop after the step under way and return at once (its rounds and a new
        shipper's serialize on the log's control lock)."""
        self._tiering.stop_shipper(wait=wait)

    # ---- bounds ------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return log_start(self._local, self._remote, self._floor.offset)

    @property
    def next_offset(self) -> int:
        return self._local.next_offset

    @property
    def flushed_offset(self) -> int:
        return self._local.flushed_offset

    def bounds(self) -> PartitionBounds:
        nxt = self._local.next_offset
        remote_end = (
            self._remote.remote_end if self._remote is not None else self._local.log_start_offset
        )
        hw = min(self.high_watermark, nxt)
        return PartitionBounds(
            self.log_start_offset,
            self._local.log_start_offset,
            hw,
            nxt,
            self._local.flushed_offset,
            remote_end,
        )

    # ---- appending (local only) ----------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"log {self.log_id} is closed")

    def check_remote_view(self, offset: int | None = None) -> None:
        """PartitionNotReadyError (retriable) while this replica leads but has not yet
        read the bucket, for a read below its local start or (``offset`` None) the whole
        log (see :meth:`TierReads.check_remote_view
        <tiered_log.partition.reads.TierReads.check_remote_view>`). Any thread."""
        self._reads.check_remote_view(offset)

    def append(
        self,
        value: bytes | None,
        *,
        key: bytes | None = None,
        headers: Sequence[tuple[str, bytes | None]] = (),
        timestamp: int | None = None,
    ) -> int:
        self._check_open()
        self._tiering.reserve(self._local.next_offset + 1)
        active = self._local.active_base_offset
        offset = self._local.append(value, key=key, headers=headers, timestamp=timestamp)
        self._tiering.reserve(offset + 1)
        if self._local.active_base_offset != active:
            self._tiering.wake()  # the append rolled a segment: there may be one to ship
        return offset

    def append_batch(
        self,
        records: Sequence[ProducerRecord | bytes] | EncodedBatch,
    ) -> tuple[int, int]:
        """Append records in one write; returns ``(first_offset, last_offset)``.

        A client's Kafka batches (an :class:`~tiered_log.format.records.EncodedBatch`)
        of an idempotent producer (a producer id) come one batch per call and are
        checked against the partition's producer state first, under its lock
        (:meth:`ProducerStateManager.check
        <tiered_log.partition.producer_state.ProducerStateManager.check>`): a duplicate
        of one of the producer's last five batches is not written and the original's
        offsets are returned; a refused one raises a
        :class:`~tiered_log.errors.ProducerStateError` with nothing written. A replica
        that follows refuses them (NotLeaderError), a duplicate too."""
        self._check_open()
        self._replication.check_leads()
        if isinstance(records, EncodedBatch):
            pb = Idempotence.producer_batch_of(records)
            if pb is not None:
                return self._producers.append(records, pb, self._append_batch)
        return self._append_batch(records)

    def _append_batch(
        self,
        records: Sequence[ProducerRecord | bytes] | EncodedBatch,
    ) -> tuple[int, int]:
        count = records.count if isinstance(records, EncodedBatch) else len(records)
        self._tiering.reserve(self._local.next_offset + count)
        active = self._local.active_base_offset
        first_last = self._local.append_batch(records)
        self._tiering.reserve(first_last[1] + 1)
        if self._local.active_base_offset != active:
            self._tiering.wake()
        return first_last

    def flush(self) -> int:
        return self._local.flush()

    def flush_if_due(self) -> int:
        """fsync what the flush policy owes after ``append_replica(sync=False)``
        (nothing to do: no system call); returns the flushed offset."""
        return self._local.flush_if_due()

    def roll(self) -> None:
        """Seal the active segment (if not empty) and wake the shipper."""
        self._local.roll()
        self._tiering.wake()

    # ---- reading (either tier: partition/reads.py) -------------------------------------

    def read(self, offset: int) -> Record:
        """The record at ``offset``; OffsetOutOfRangeError if there is none."""
        return self._reads.read(offset)

    def read_range(
        self,
        offset: int,
        max_records: int = 500,
        max_bytes: int = 1 << 20,
        *,
        upto: int | None = None,
    ) -> list[Record]:
        """Records from ``offset`` on, from whichever tier holds them; ``upto`` (a
        consumer's read: the high watermark): none at or past it (see
        :meth:`TierReads.read_range <tiered_log.partition.reads.TierReads.read_range>`)."""
        return self._reads.read_range(offset, max_records, max_bytes, upto=upto)

    def read_batches(
        self,
        offset: int,
        max_records: int = 500,
        max_bytes: int = 1 << 20,
        *,
        upto: int | None = None,
    ) -> FetchData:
        """The stored batches from the one holding ``offset`` on, from whichever tier
        holds them, verified and not decoded: the one batch read of the log (limits,
        ``upto`` and errors: :meth:`TierReads.read_batches
        <tiered_log.partition.reads.TierReads.read_batches>`). Any thread, no lock."""
        return self._reads.read_batches(offset, max_records, max_bytes, upto=upto)

    def read_batch_ranges(
        self,
        offset: int,
        max_records: int = 500,
        max_bytes: int = 1 << 20,
        *,
        upto: int | None = None,
    ) -> FetchRanges:
        """:meth:`read_batches` answering where the batches lie (ranges of files, for
        ``sendfile``); close it once sent (see :meth:`TierReads.read_batch_ranges
        <tiered_log.partition.reads.TierReads.read_batch_ranges>`). Any thread."""
        return self._reads.read_batch_ranges(offset, max_records, max_bytes, upto=upto)

    def read_remote_batches(
        self,
        offset: int,
        max_records: int = 500,
        max_bytes: int = 1 << 20,
        *,
        upto: int | None = None,
    ) -> FetchData:
        """The remote tier's half of :meth:`read_batches` (see
        :meth:`TierReads.read_remote_batches
        <tiered_log.partition.reads.TierReads.read_remote_batches>`)."""
        return self._reads.read_remote_batches(offset, max_records, max_bytes, upto=upto)

    def offset_for_timestamp(self, timestamp: int) -> int | None:
        """First offset whose timestamp is >= ``timestamp`` in either tier, or None."""
        return self._reads.offset_for_timestamp(timestamp)

    def remote_view_status(self) -> dict[str, Any]:
        """``remote_view`` (``ready``, or ``not_ready`` while a new leader has not read
        the bucket yet) and ``rebuild_requests`` (bucket requests of the last rebuild of
        that view): for a cluster's status. Any thread, no I/O."""
        r = self._remote
        return {
            "remote_view": "not_ready" if self._tiering.remote_view_pending else "ready",
            "rebuild_requests": r.rebuild_requests if r is not None else 0,
        }

    # ---- truncation ---------------------------------------------------------------------

    def truncate(self, offset: int) -> None:
        """Remove every record at and after ``offset`` in both tiers.

        Below the local start the local log restarts empty at ``offset`` and the remote
        tier records the truncation in its metadata; readers never see truncated records.
        The leader-epoch cache loses the epochs starting at or after ``offset``; the high
        watermark drops to ``offset`` if above (before the records go).
        """
        _check_offset(offset)
        with self._ctl:
            self._check_open()
            start, nxt = self.log_start_offset, self.next_offset
            if offset < start or offset > nxt:
                raise OffsetOutOfRangeError(
                    f"cannot truncate to {offset}: the log holds [{start}, {nxt})",
                    log_start=start,
                    next_offset=nxt,
                )
            ps = self._producers.state
            with self._replication.moving_bounds(cut=offset), ps.lock:
                ps.delete_snapshot()  # never used past a cut; rebuilt below
                local_start = self._local.log_start_offset
                if self._remote is not None:
                    self._remote.truncate(offset, local_start)
                if offset >= local_start:
                    self._local.truncate(offset)
                    self._producers.rebuild()
                else:
                    self._local.reset(offset)
                    ps.clear(complete=offset == 0)
        self._tiering.wake()  # truncated remote segments are deleted by the next round

    # ---- tiering ------------------------------------------------------------------------

    def eligible_segments(self) -> list[SegmentInfo]:
        """Sealed, flushed local segments not yet in the remote tier, oldest first; in a
        replicated log only those below the high watermark (committed records only)."""
        return self._tiering.eligible_segments()

    def tiering_state(self) -> tuple[int, ...]:
        """What a tiering round depends on, besides the clock (see
        :meth:`Tiering.tiering_state <tiered_log.partition.tiering.Tiering.tiering_state>`)."""
        return self._tiering.tiering_state()

    def tier_once(self, stop: threading.Event | None = None) -> int:
        """One round: clean up, copy eligible segments (none once ``stop`` is set), apply
        both retentions. Returns the number of segments copied. Raises
        RemoteStorageError when the bucket fails (the shipper backs off and retries)."""
        return self._tiering.tier_once(stop)

    def hold_local_from(self, offset: int | None) -> None:
        """This leader's followers still copy from ``offset`` (the lowest next fetch of a
        live follower; None: none does): local retention keeps the shipped segments
        from there, up to ``catchup_retention_bytes`` past what it would keep, so a
        follower catching up (a rebuilt node) is not sent back to the remote end again
        and again while producers push the local start up, as Kafka's followers rely on
        their leader's local log. The node, after each follower fetch; any thread."""
        self._tiering.hold_local_from(offset)

    def maintain(self, *, tier: bool = True) -> None:
        """Time-based upkeep, run periodically by the owner (the service): flush by
        ``flush_ms``, roll by ``segment_ms``, checkpoint the high watermark when due,
        renew the offsets reserved in the bucket; without a shipper (remote tier off, or
        not started) the round of tiering and retention runs here, with one a roll wakes
        it. ``tier=False`` (a follower's upkeep: it ships nothing, see
        :meth:`apply_replica_retention`): no tiering round. Any thread."""
        if self._closed:
            return
        self._local.maybe_flush()
        self._producers.maybe_snapshot()
        hw = self._replication.hw
        if self._replication.following:  # a follower rolls where its leader did, ships nothing
            if hw is not None:
                hw.checkpoint_if_due()
            return
        rolled = self._local.maybe_roll_by_age()
        if hw is not None:
            hw.checkpoint_if_due()
        self._tiering.maintain(rolled=rolled, tier=tier)

    def remote_segments(
        self, log_start: int
    ) -> tuple[str | None, int | None, list[dict[str, Any]]]:
        """``(remote_url, remote_end, segments)``: the remote tier's URL and end and its
        finished segments holding offsets at or above ``log_start``, as
        :meth:`RemoteTier.archived_segments <tiered_log.remote.tier.RemoteTier.archived_segments>`
        lists them (what a reader that fetches from the bucket itself plans from);
        ``(None, None, [])`` without a remote tier. Reads the index files; any thread."""
        r = self._remote
        if r is None:
            return None, None, []
        return r.storage.url, r.remote_end, r.archived_segments(log_start)

    def delete_remote_objects(self) -> int:
        """Delete every object of this log from the remote tier (for a deleted topic).

        Call on a closed log. Returns the number of objects deleted; raises
        RemoteStorageError if the bucket fails (what is left is found again by listing
        the log's prefix).
        """
        if self._remote is None:
            return 0
        storage = self._remote.storage
        keys = [o.key for o in storage.list(naming.log_prefix(self.log_id) + "/")]
        storage.delete(keys)  # the store batches (S3: 1,000 keys per request)
        return len(keys)

    # ---- roles --------------------------------------------------------------------------

    @property
    def following(self) -> bool:
        """Whether this replica follows another's log (see :meth:`follow`)."""
        return self._replication.following

    def follow(self) -> None:
        """This replica follows: it appends only what its fetcher brings
        (:meth:`append_replica`), rolls only where the leader did, never by its own size
        or age, and ships nothing (its shipper stops; :meth:`maintain` flushes and
        checkpoints only). An append of a client's records (:meth:`append`,
        :meth:`append_batch`) raises NotLeaderError from now on; one running now ends
        first. The node, on a role change."""
        self._replication.follow()
        self._tiering.follow()

    def lead(self, epoch: int, fence: Callable[[], bool] | None = None) -> int:
        """This replica leads ``epoch`` from its log end (:meth:`assign_leader_epoch`;
        returns the epoch's start); it rolls by its own size and age again. With a
        remote tier, the next tiering round first rebuilds the remote state from the
        bucket (others shipped while this replica followed) and its copies then carry
        ``epoch``; ``fence()`` is asked before each copy is committed (False: this node
        was deposed, the copy is abandoned). A log that never held a record first
        continues above the bucket: with the view :meth:`read_bucket_view` read for
        ``epoch`` (no bucket request here, so a caller holding its own lock never waits
        on the bucket), else read now. The owner starts the shipper. The node, on a role
        change."""
        self._tiering.lead(epoch, fence)
        if self.needs_bucket_view():
            self._empty_lead.apply(epoch)
        start = self.assign_leader_epoch(epoch)
        self._replication.following = False
        return start

    def needs_bucket_view(self) -> bool:
        """Whether leading this log needs a read of the bucket first (see
        :mod:`tiered_log.partition.empty_lead`). Any thread."""
        return self._empty_lead.needed()

    def mark_created_empty(self) -> None:
        """This cluster replica's log was created empty while its node ran: it leads
        from 0 without the bucket (see :mod:`tiered_log.partition.empty_lead`). The
        node's poll thread, once the log is created."""
        self._empty_lead.mark_created_empty()

    def read_bucket_view(self, epoch: int) -> None:
        """Read the bucket for a lead of ``epoch`` to come (:meth:`lead` applies it; see
        :meth:`EmptyLead.read <tiered_log.partition.empty_lead.EmptyLead.read>`): a node
        runs it on a thread of its own before it takes its lock to change the role."""
        self._empty_lead.read(epoch)

    # ---- leader epochs ----------------------------------------------------------------

    def leader_epoch_entries(self) -> list[EpochEntry]:
        """This log's ``(epoch, start_offset)`` entries, oldest first. Any thread."""
        return self._replication.epochs.entries()

    @property
    def latest_leader_epoch(self) -> int:
        """The highest leader epoch this log holds, :data:`~tiered_log.local.leader_epoch.UNDEFINED_EPOCH`
        (-1) when none (what a follower sends in OffsetsForLeaderEpoch)."""
        return self._replication.latest_leader_epoch

    def assign_leader_epoch(self, epoch: int) -> int:
        """This replica became leader in ``epoch``: the epoch starts at the log's next
        offset (before any append of it). Returns that start; for the latest epoch again,
        its recorded start and nothing changes. An epoch below the latest is refused
        (InvalidArgumentError). The leader's election code; serialized with appends."""
        if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0:
            raise InvalidArgumentError(f"leader epoch must be an integer >= 0, got {epoch!r}")
        self._check_open()
        return self._replication.assign_leader_epoch(epoch)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """Kafka's OffsetsForLeaderEpoch answer of this log (as a leader): ``(epoch
        found, end offset)``, see :meth:`LeaderEpochCache.end_offset_for
        <tiered_log.local.leader_epoch.LeaderEpochCache.end_offset_for>`; the latest
        epoch ends at the log's next offset. Any thread."""
        self._check_open()
        return self._replication.end_offset_for_epoch(epoch)

    def record_leader_epoch(self, epoch: int, start_offset: int) -> None:
        """Record the leader's entry ``(epoch, start_offset)`` in this log's cache (a
        follower after :meth:`reset_replica`: the leader's epochs from the new start), as
        :meth:`LeaderEpochCache.assign <tiered_log.local.leader_epoch.LeaderEpochCache.assign>`
        (an epoch below the latest: InvalidArgumentError). The follower's fetcher."""
        self._check_open()
        self._replication.epochs.assign(epoch, start_offset)

    def divergence(self, leader_answer: tuple[int, int]) -> int:
        """The offset this log (as a follower) must be truncated to, given the leader's
        :meth:`end_offset_for_epoch` answer for :attr:`latest_leader_epoch`:
        :func:`~tiered_log.local.leader_epoch.divergence_point` on this log's cache and
        end (without an answer to go by, the high watermark: a plain log, which has none,
        keeps nothing), never below the log start. When the leader lacks this log's
        latest epoch the cut is partial: the next fetch, sending the new latest epoch,
        finds the rest. Truncates nothing: the fetcher calls :meth:`truncate`."""
        return self._replication.divergence(leader_answer)

    def local_bytes_from(self, offset: int) -> int:
        """Bytes of the local log from ``offset`` to its end: what a follower whose log
        ends at ``offset`` still has to copy from this leader (see
        :meth:`Log.bytes_from <tiered_log.local.log.Log.bytes_from>`). Any thread."""
        return self._local.bytes_from(offset)

    def segment_bases(self, start: int, end: int) -> list[int]:
        """Base offsets of the local segments beginning in ``[start, end)``: where a
        follower copying that range rolls (see :meth:`append_replica`)."""
        return self._local.segment_bases(start, end)

    # ---- the follower's side ------------------------------------------------------------

    def append_replica(
        self,
        data: bytes | bytearray | memoryview,
        epochs: Sequence[tuple[int, int]],
        rolls: Sequence[int] | None = None,
        *,
        sync: bool = True,
    ) -> int:
        """Append the leader's stored batches (as its ``read_batches`` returned them) at
        the offsets and with the timestamps they carry; returns the new next offset
        (empty ``data``: nothing happens). ``sync=False``: the fsync the flush policy
        owes is the caller's, by :meth:`flush_if_due` before this log's end can count
        towards a commit (the fetcher's rule, :mod:`tiered_log.cluster.fetcher`).

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
        The producer batches among them are recorded in this log's producer state
        (no checks: the leader made them), so that it knows its producers if it leads.
        The follower's fetcher only, one thread (see the module docstring)."""
        self._check_open()
        active = self._local.active_base_offset
        ps = self._producers.state
        with ps.lock:
            end = self._replication.append(data, epochs, rolls, sync=sync)
            if len(data):
                ps.apply_headers(buffer_headers(data))
        if self._local.active_base_offset != active:
            self._tiering.wake()
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
            ps = self._producers.state
            with self._replication.moving_bounds(cut=offset), ps.lock:
                ps.delete_snapshot()
                r = self._remote
                if r is not None and offset < r.remote_end:
                    r.truncate(offset, self._local.log_start_offset)
                self._local.reset(offset)
                ps.clear(complete=offset == 0)
                self._replication.epochs.clear()
                self._replication.clamp_high_watermark()

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

    def follow_bucket(self) -> bool:
        """A read-only mount's poll of a log another cluster ships (a log opened
        ``replicated`` and following, with no shipper): its view of the bucket takes what
        the owner committed since the last poll and drops what its retention removed
        (:class:`~tiered_log.remote.follow.BucketFollower`), then the local log, which
        holds no record, restarts empty at the new remote end and the high watermark
        moves there, so every offset the bucket holds is served from it. Reads only;
        whether anything changed; False without a remote tier. RemoteStorageError if the
        bucket fails (nothing changes)."""
        from ..remote.follow import BucketFollower

        r = self._remote
        if r is None:
            return False
        with self._ctl:
            self._check_open()
            changed = BucketFollower(r).follow()
            end = r.remote_end
            if (self._local.log_start_offset, self._local.next_offset) != (end, end):
                with self._replication.moving_bounds():
                    self._local.reset(end)
                    self._replication.clamp_high_watermark()
                changed = True
        self.set_high_watermark(end)
        return changed

    def delete_records(self, offset: int) -> int:
        """Kafka's DeleteRecords at this partition's leader (or a single node): the log
        start moves up to ``offset``; answers the log start now (see
        :meth:`LogStartFloor.delete_below <tiered_log.partition.log_start.LogStartFloor.delete_below>`).
        A replica told to follow refuses it as it refuses appends (NotLeaderError)."""
        _check_offset(offset)
        with self._ctl:
            self._check_open()
            self._replication.check_leads()
            b = self.bounds()
            self._floor.delete_below(offset, b, self._local, self._remote)
            return self.log_start_offset

    def follow_log_start(self, leader_start: int) -> None:
        """A follower takes its leader's log start from a fetch answer (see
        :meth:`LogStartFloor.follow <tiered_log.partition.log_start.LogStartFloor.follow>`)."""
        _check_offset(leader_start)
        if leader_start <= self._floor.offset:
            return  # every fetch answer carries it: nothing moved (no lock taken)
        with self._ctl:
            if not self._closed:
                self._floor.follow(leader_start, self._local)

    def apply_replica_retention(self, remote_end: int) -> None:
        """A follower's retention round (it ships nothing; the leader does): delete the
        oldest local segments past local retention (``local_retention_ms`` /
        ``local_retention_bytes``; without a remote tier the total ``retention_ms`` /
        ``retention_bytes``) that end at or below both ``remote_end`` (the leader's
        remote end, learnt from fetches: those records are in the bucket) and this log's
        high watermark. The follower's fetcher (or its node's upkeep), any one thread."""
        _check_offset(remote_end)
        self._tiering.apply_replica_retention(remote_end)

    # ---- the high watermark -------------------------------------------------------------

    @property
    def replicated(self) -> bool:
        """Whether this log keeps a high watermark of its own (else it is the next offset)."""
        return self._replication.hw is not None

    @property
    def high_watermark(self) -> int:
        """One past the last committed record: what consumers may read (``upto=``). The
        next offset for a log opened with ``replicated=False``. No lock."""
        return self._replication.high_watermark

    def set_high_watermark(self, hw: int) -> int:
        """Move the high watermark up to ``hw`` (clamped to ``[log_start, next_offset]``;
        a lower value leaves it as it is: it moves down only through a truncation).
        Returns the high watermark now. Checkpointed at most every
        ``hw_checkpoint_interval_ms``; wakes the shipper when it passes the last sealed
        segment (only committed segments ship). A no-op on a log opened with ``replicated=False``
        (its high watermark is always its next offset). Any thread."""
        _check_offset(hw)
        self._check_open()
        mark = self._replication.hw
        if mark is None:
            return self.next_offset
        old, value = mark.advance(hw)
        if old < self._local.active_base_offset <= value:
            self._tiering.wake()  # the sealed segments are committed now: one to ship
        mark.checkpoint_if_due()
        return value

    def checkpoint_high_watermark(self, *, quiet: bool = False) -> None:
        """Write the high watermark to its checkpoint file now, if it changed since the
        last write (``quiet``: a failure is logged, to be tried again, not raised: the
        file keeps an older, lower value, which is safe). No-op on a log opened with
        ``replicated=False``. Any thread."""
        if self._replication.hw is not None:
            self._replication.hw.checkpoint(quiet=quiet)

    # ---- reports ------------------------------------------------------------------------

    def stats(self) -> dict[str, float]:
        """Numeric counters and gauges, for /metrics (see :func:`~tiered_log.partition.report.stats`)."""
        return report.stats(self._local, self._remote)

    def describe(self) -> dict[str, Any]:
        """Local and remote segments, copy lag, cache and fetch counters (JSON-able)."""
        return report.describe(
            self.log_id, self.bounds(), self._local, self._remote, self._tiering.shipper
        )

    def remote_damage(self) -> list[dict[str, Any]]:
        """Remote ranges that cannot be read (see :func:`~tiered_log.partition.report.remote_damage`)."""
        return report.remote_damage(self._remote)

    def producers(self) -> list[ActiveProducer]:
        """The idempotent producers this partition knows (Kafka's DescribeProducers)."""
        return self._producers.state.active()

    def lost_offsets(self) -> list[list[int]]:
        """Offsets lost with a local disk (see :func:`~tiered_log.partition.report.lost_offsets`)."""
        return report.lost_offsets(self._remote)

    # ---- configuration ------------------------------------------------------------------

    def reconfigure(
        self, config: LogConfig, tier: TierConfig, *, remote_disable_policy: str | None = None
    ) -> None:
        """Apply a topic's changed settings to this open log, without reopening it.

        The local log takes ``config`` (:meth:`Log.reconfigure
        <tiered_log.local.log.Log.reconfigure>`: segment size and age for the active
        segment on, flush settings, retention, the timestamp type of new appends); the
        tiering and the remote tier take ``tier`` (retention and local retention at the
        next round, which this call asks for; compression for segments shipped from
        then on). ``tier.remote_enabled`` turning:

        - off, with ``remote_disable_policy="retain"``: nothing more is copied; what the
          bucket holds stays readable and ages out by the total retention, which then
          also applies to the local segments once the bucket holds none;
        - off, with ``"delete"``: the shipper stops, every object of this log is deleted
          from the bucket and the log is a local log from then on (its start moves up
          to the local start); InvalidArgumentError without a policy;
        - on: copying resumes (a log that never had a remote tier gets one; its first
          copy is its oldest local segment).

        A replicated log (a cluster's) does the same on every replica, with two rules
        that keep the replicas' copies consistent: only the replica that leads (its
        fence still answering True) deletes the bucket's objects (a follower, or a
        leader deposed meanwhile, only drops its remote tier: a late follower never
        deletes what a new leader shipped after tiering came back on), and a remote tier
        appearing on the leader takes its leader epoch and fence, rebuilds its view of
        the bucket at its next round and starts shipping (a follower's only reads the
        bucket). Any thread: the settings are swapped whole (an append, under the local
        log's lock, and a tiering round each read one set); a remote tier appears or
        goes under the control lock, after the round under way. LogClosedError once closed.
        """
        was = self.tier_config.remote_enabled
        now_on = tier.remote_enabled
        # Not only on the turn: a "delete" whose bucket failed half way is asked again.
        detach = not now_on and remote_disable_policy == "delete" and self._remote is not None
        attach = now_on and self._remote is None and self._storage is not None
        if was and not now_on and remote_disable_policy not in ("retain", "delete"):
            raise InvalidArgumentError(
                "remote_enabled=false needs remote_disable_policy: 'retain' (the remote "
                "data stays readable until retention removes it) or 'delete' (it is deleted now)"
            )
        self._check_open()
        # The settings themselves are swapped whole (a round reads them once); only a
        # remote tier appearing or going waits for the round under way.
        self._local.reconfigure(config)
        self.config = config
        self.tier_config = tier
        self._tiering.config = tier
        if self._remote is not None:
            self._remote.config = tier
        if detach:
            self._tiering.stop_shipper()  # its round takes the control lock: before it
        if not (detach or attach):
            self._tiering.wake()
            return
        with self._ctl:
            self._check_open()
            if detach and self._remote is not None:
                deleted = self._tiering.detach_remote(self.directory, self.log_id, self.replicated)
                self._remote = None
                log.info(
                    "%s: remote tier turned off, %d remote object(s) deleted", self.log_id, deleted
                )
            elif attach and self._storage is not None:
                r = RemoteTier(self.directory, self.log_id, self._storage, tier, self._limits)
                self._remote = r
                self._tiering.attach_remote(r)
                log.info("%s: remote tier turned on", self.log_id)
        if attach and (self._ships or (self.replicated and not self._replication.following)):
            self.start_shipper()
        self._tiering.wake()

    # ---- closing ------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the shipper (after its current step, which from now on ignores the upload
        limit, as fetches under way ignore the fetch quota), flush and close. Idempotent."""
        if self._closed:
            return
        self._tiering.stop()
        with self._ctl:
            self.checkpoint_high_watermark(quiet=True)
            self._producers.maybe_snapshot(force=True)
            self._closed = True
            end = self._local.next_offset
            self._local.close()
            self._tiering.close(end)

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> TieredLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["TieredBounds", "TieredLog"]
