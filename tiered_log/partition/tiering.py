"""A partition's tiering: which local segments ship, one round of copying and retention,
the offsets reserved in the bucket, and the shipper that runs the rounds.

:class:`Tiering` is a collaborator the partition log
(:class:`~tiered_log.partition.log.TieredLog`) holds over the same local log and remote
tier. A round (:meth:`Tiering.tier_once`) cleans up interrupted copies, copies the
eligible segments (sealed, flushed, not in the bucket yet and, in a replicated log,
below the high watermark), then applies both retentions: the total one moves the log
start in both tiers; the local one drops only segments whose copy is finished, keeping
what a follower still copies (:meth:`Tiering.hold_local_from`) within a bound. A
:class:`~tiered_log.partition.scheduler.Shipper` runs the rounds in the background on a
:class:`~tiered_log.partition.scheduler.TieringScheduler`; without one the owner's upkeep
runs them.

Who may write the bucket: a single node, or a cluster's leader. A new leader's view of
the bucket is stale until its first round rebuilds it (:attr:`Tiering.view_pending`:
others shipped, and retention moved the log start, while it followed); until then it
only moves the end the bucket records, and reads below its local start wait. A follower
ships nothing and reserves nothing; its retention (:meth:`Tiering.apply_replica_retention`)
drops only what its leader has shipped and committed.

Offsets handed out are reserved in the bucket before they are acknowledged
(:meth:`Tiering.reserve`), ``offset_reserve`` ahead, so a log rebuilt from the bucket after
its disk was lost continues above every offset it ever acknowledged.

Thread-safety: rounds, retention and :meth:`Tiering.close` run under the partition's
control lock (``control``, shared with the log's truncation and resets); reservations
serialize on their own lock and may come from any thread; :meth:`Tiering.tiering_state`
and :meth:`Tiering.eligible_segments` take no lock.
"""

from __future__ import annotations

import logging
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

from ..errors import NotLeaderError, RemoteStorageError
from ..format import naming
from ..local.log import Log, now_ms
from ..local.segment import SegmentInfo
from ..remote.tier import RemoteTier, TierConfig
from .log_start import LogStartFloor
from .replication import Replication
from .scheduler import Shipper, TieringScheduler

RETENTION_BATCH_SEGMENTS = 64
"""Local retention deletes at most this many segments a batch, and a follower one batch
a fetch round (its fetches wait on the round): a backlog, such as a follower's thousands
of segments once its leader's shipping catches up, goes over several rounds instead of
holding the follower's fetches for seconds."""

LEADER_RETENTION_BATCHES = 16
"""A leader's tiering round deletes up to this many batches (after each group of copies
too), so its local deletes keep pace with a round's copies; each batch takes the log's
lock only to take the segments out (their files are unlinked after)."""

log = logging.getLogger(__name__)


def log_start(local: Log, remote: RemoteTier | None, floor: int = 0) -> int:
    """A partition's log start: the remote tier's start when it holds data below the
    local start, else the local start; never below ``floor``, where deleting records
    moved it (:mod:`~tiered_log.partition.log_start`)."""
    local_start = local.log_start_offset
    if remote is not None and remote.has_data and remote.start_offset < local_start:
        return max(remote.start_offset, floor)
    return max(local_start, floor)


class Tiering:
    """One partition's tiering (see the module docstring). ``remote`` None: no bucket; a
    round then applies the total retention to the local log. ``control`` is the
    partition's control lock; ``clock`` (milliseconds) dates retention; ``scheduler``
    runs the shipper's rounds (the process-wide one when None)."""

    def __init__(
        self,
        log_id: str,
        local: Log,
        remote: RemoteTier | None,
        config: TierConfig,
        replication: Replication,
        control: threading.Lock,
        floor: LogStartFloor,
        *,
        clock: Callable[[], int] = now_ms,
        scheduler: TieringScheduler | None = None,
    ) -> None:
        self.log_id = log_id
        self.config = config
        self._local = local
        self._remote = remote
        self._replication = replication
        self._control = control
        self._floor = floor
        self._clock = clock
        self._scheduler = scheduler
        self._shipper: Shipper | None = None
        self._closed = False
        self._hold: int | None = None
        self._reserve_lock = threading.Lock()
        self._reserve_failing = False
        self._renewal_asked = False
        self.view_pending = False
        """This replica leads but has not rebuilt its view of the bucket yet."""
        self._leading: tuple[int, Callable[[], bool] | None] | None = None
        """The epoch and fence this replica leads with (None: it follows, or a single
        node's log), for a remote tier attached while it leads."""

    # ---- the shipper ---------------------------------------------------------------------

    @property
    def shipper(self) -> Shipper | None:
        """The background shipper while one runs (its rounds, its last error)."""
        return self._shipper

    def start_shipper(self) -> None:
        """Start the background shipper; no-op without a remote tier, when one runs
        already or once closed. Not concurrently with :meth:`close`."""
        if self._remote is None or self._shipper is not None or self._closed:
            return
        self._shipper = Shipper(self, self.config.ship_interval_ms, self._scheduler)
        self._shipper.start()

    def stop_shipper(self, *, wait: bool = True) -> None:
        """Stop the background shipper (``wait=False``: ask it to stop after the step
        under way and return at once). No-op without one."""
        shipper, self._shipper = self._shipper, None
        if shipper is not None:
            shipper.stop(timeout=30.0 if wait else 0.0)

    def wake(self) -> None:
        """A segment may be ready to ship (a roll, a truncation, the HW passing a sealed
        segment): run a round soon. No-op without a shipper."""
        if self._shipper is not None:
            self._shipper.wake()

    # ---- roles and the view of the bucket ---------------------------------------------------

    @property
    def remote_view_pending(self) -> bool:
        """Whether this replica leads but has not rebuilt its view of the bucket yet."""
        return self.view_pending and self._remote is not None and not self._replication.following

    def lead(self, epoch: int, fence: Callable[[], bool] | None) -> None:
        """This replica leads ``epoch``: its copies carry it, ``fence()`` is asked before
        each is committed, and its next round first rebuilds the view of the bucket."""
        self._leading = (epoch, fence)
        if self._remote is not None:
            self._hand_lead(self._remote)

    def _hand_lead(self, remote: RemoteTier) -> None:
        """Give ``remote`` this replica's lead: its epoch and fence, the log end it took
        the lead at, and a rebuild of the view of the bucket at the next round."""
        assert self._leading is not None
        remote.leader_epoch, remote.fence = self._leading
        remote.sweep_below = self._local.next_offset
        self.view_pending = True

    def follow(self) -> None:
        """This replica follows: it keeps nothing for others and ships nothing (the copies
        under way stay fenced: the fence now answers False, and the round starts no more)."""
        self._leading = None
        self._hold = None
        self.stop_shipper(wait=False)

    def resync_view(self) -> int:
        """Rebuild this leader's view of the bucket (others shipped while it followed) and
        take the log start found there (its floor raised, local segments below dropped);
        returns the number of remote segments. Under the control lock; RemoteStorageError if the bucket fails."""
        r = self._remote
        assert r is not None
        n = r.resync_from_bucket()
        self.view_pending = False
        # The bucket's log start (retention's, or records deleted by an earlier leader)
        # is this leader's too, even inside its first local segment.
        self._floor.follow(r.meta.log_start_offset, self._local)
        return n

    def attach_remote(self, remote: RemoteTier) -> None:
        """Tier to ``remote`` from now on (the topic's tiering was turned on). Under the
        control lock. A replica that leads gives it its epoch and fence and rebuilds its
        view of the bucket at the next round, as on :meth:`lead`; a single node's log
        copies with no epoch and no fence."""
        self._remote = remote
        if self._leading is not None:
            self._hand_lead(remote)

    def detach_remote(self, directory: Path, log_id: str, replicated: bool) -> int:
        """Tier to no bucket from now on (the topic's tiering was turned off with its
        remote data deleted): the replica that owns the bucket's copies (a single node, or
        a leader whose fence still answers True) deletes every object of the log; any
        other only drops its remote tier (a late follower never deletes what a new leader
        shipped after tiering came back on). The remote tier's local files go; rounds
        then apply the total retention to the local log. Returns how many objects were
        deleted. Under the control lock, the shipper stopped."""
        r = self._remote
        if r is None:
            return 0
        owner = not replicated or (
            not self._replication.following and (r.fence is None or r.fence())
        )
        storage = r.storage
        keys = [o.key for o in storage.list(naming.log_prefix(log_id) + "/")] if owner else []
        storage.delete(keys)
        self._remote = None
        self.view_pending = False
        r.close()
        shutil.rmtree(directory / naming.REMOTE_DIR, ignore_errors=True)
        return len(keys)

    # ---- reservations ------------------------------------------------------------------------

    def reserve(self, end: int) -> None:
        """Make sure the bucket records that offsets up to ``end`` may be handed out
        (:attr:`RemoteMeta.end_offset <tiered_log.remote.metadata.RemoteMeta.end_offset>`)
        before an append past the recorded end is acknowledged: a log rebuilt from the
        bucket after its disk was lost continues above it and never hands an
        acknowledged offset out again. Reserved ``offset_reserve`` offsets ahead, so one
        small write covers many appends; once appends used half of it the shipper is
        woken to renew it (:meth:`_renew_reservation`) off the append thread. Called
        before an append (with the offsets it will take) and after it (appends racing
        for the same offsets); raises RemoteStorageError when the bucket cannot record it
        (not acknowledged: retry) and NotLeaderError when the fence says this node was
        deposed. Leaders and single nodes only. Any thread."""
        r = self._remote
        if r is None or self._replication.following:
            return
        recorded = r.meta.end_offset
        if end > recorded:
            self._record_end(r, end)
        elif end > recorded - self.config.offset_reserve // 2 and not self._renewal_asked:
            self._renewal_asked = True
            self.wake()

    def _record_end(self, r: RemoteTier, end: int) -> None:
        """Record ``end`` + ``offset_reserve`` in the bucket unless ``end`` is recorded."""
        with self._reserve_lock:
            if end <= r.meta.end_offset:
                return
            ahead = end + self.config.offset_reserve
            # A new leader's view of the bucket is stale until its first round: it moves
            # only the end of the bucket's own metadata.
            record = r.record_end_fresh if self.view_pending else r.record_end
            if not record(ahead):
                raise NotLeaderError(f"{self.log_id}: this node no longer leads the partition")

    def _renew_reservation(self) -> None:
        """Renew the reservation once appends used half of it (a no-op before), so that
        appends find their offsets reserved: the upkeep's and each tiering round's first
        step (the round is woken when an append passes the half). A bucket that fails is
        logged once per outage; the append that reaches the end then reserves, or fails.
        Leaders and single nodes only. Any thread."""
        r = self._remote
        nxt = self._local.next_offset
        if r is None or self._replication.following or self.view_pending or not nxt:
            # Not for a log that never handed an offset out: a cluster's replica that
            # leads with an empty log continues above the reservation.
            return
        self._renewal_asked = False
        end = nxt + self.config.offset_reserve // 2
        try:
            if end > r.meta.end_offset:  # most rounds: nothing to renew, no lock taken
                self._record_end(r, end)
        except (RemoteStorageError, NotLeaderError) as exc:
            if not self._reserve_failing:  # once per outage, not every upkeep round
                log.warning("%s: offsets not reserved in the bucket: %s", self.log_id, exc)
            self._reserve_failing = True
        else:
            self._reserve_failing = False

    def maintain(self, *, rolled: bool, tier: bool) -> None:
        """A leader's (or single node's) upkeep: renew the reservation before appends run
        out of it; with ``tier``, run a round here when no shipper runs, else wake it if
        the upkeep ``rolled`` a segment. Any thread."""
        self._renew_reservation()
        if not tier:
            return
        if self._shipper is None:
            self.tier_once()
        elif rolled:
            self._shipper.wake()

    # ---- rounds ------------------------------------------------------------------------------

    def eligible_segments(self) -> list[SegmentInfo]:
        """Sealed, flushed local segments not yet in the remote tier, oldest first; in a
        replicated log only those below the high watermark (committed records only)."""
        if self._remote is None or not self.config.remote_enabled:
            return []
        end = self._remote.remote_end
        flushed = min(self._local.flushed_offset, self._replication.high_watermark)
        return [
            s
            for s in self._local.segments()
            if s.sealed and s.base_offset >= end and s.next_offset <= flushed
        ]

    def tiering_state(self) -> tuple[int, ...]:
        """What a round depends on, besides the clock: the shipper skips a round when
        this has not changed since the last one. Cheap (no I/O, no lock); a racing
        append at worst causes one more round."""
        loc, r = self._local, self._remote
        state = (
            loc.next_offset,
            loc.flushed_offset,
            loc.log_start_offset,
            loc.active_base_offset,
            self._replication.high_watermark,
        )
        if r is None:
            return state
        return (*state, r.remote_end, r.start_offset, int(r.needs_index_rebuild))

    def tier_once(self, stop: threading.Event | None = None) -> int:
        """One round: clean up, copy eligible segments, apply both retentions. Returns
        the number of segments copied (none once ``stop`` is set); 0 once closed. Raises
        RemoteStorageError when the bucket fails (the shipper backs off and retries)."""
        with self._control:
            if self._closed:
                return 0
            copied = 0
            r = self._remote
            self._renew_reservation()
            if r is not None and self.view_pending:
                n = self.resync_view()  # a cluster's new leader: others shipped meanwhile
                log.info(
                    "%s: remote state rebuilt from the bucket (%d segment(s), remote end "
                    "%d) for leader epoch %s",
                    self.log_id,
                    n,
                    r.remote_end,
                    r.leader_epoch,
                )
            if r is not None:
                r.cleanup_pending()
                if r.needs_index_rebuild:
                    r.rebuild_index_files()
                # In groups, so that a long round (a backlog of many segments) keeps the
                # partition snapshot current as it goes.
                todo, step = self.eligible_segments(), self.config.snapshot_interval_segments
                for i in range(0, len(todo), step):
                    if i:
                        self._renew_reservation()  # a long round: appends went on meanwhile
                    copied += r.copy_segments(todo[i : i + step], stop)
                    if r.snapshot_due():
                        r.write_snapshot()
                    if i + step < len(todo):
                        self._delete_shipped(r.remote_end)  # keep pace with the copies
                    if stop is not None and stop.is_set():
                        break
            self._apply_retention()
            self._replication.epochs.truncate_from_start(log_start(self._local, r))
            self._replication.clamp_high_watermark()
            if r is not None and r.snapshot_due():
                r.write_snapshot()  # a successor reads this view in a few requests
            return copied

    def _apply_retention(self) -> None:
        now = self._clock()
        r = self._remote
        tc = self.config
        if r is None:
            cands = self._local.retention_candidates(tc.retention_ms, tc.retention_bytes, now)
            if cands:
                self._local.delete_segments_before(cands[-1].next_offset)
            return
        # Remote (total) retention: moves the log start, in both tiers.
        unshipped = self._local.bytes_from(r.remote_end)
        cut = r.retention_cutoff(unshipped, now)
        if cut is not None:
            r.delete_before(cut)
        # Local segments below the log start go too: those just cut, and any a crash
        # left behind after the start had moved (then ``cut`` is None on the retry).
        self._local.delete_segments_before(max(cut or 0, r.meta.log_start_offset))
        if not tc.remote_enabled and not r.has_data:
            # Copying is off (the bucket's data kept) and the bucket holds nothing more
            # below the local segments: the total retention applies to them, as to a log
            # without a remote tier (never before: the log start stays contiguous).
            cands = self._local.retention_candidates(tc.retention_ms, tc.retention_bytes, now)
            if cands:
                self._local.delete_segments_before(cands[-1].next_offset)
        self._delete_shipped(r.remote_end, now)

    def _delete_shipped(self, remote_end: int, now: int | None = None) -> None:
        """Local retention: only segments whose copy is finished (below ``remote_end``),
        in batches (each takes the log's lock briefly), as many as a round copies at
        most."""
        now = self._clock() if now is None else now
        for _ in range(LEADER_RETENTION_BATCHES):
            if not self._delete_shipped_batch(remote_end, now):
                break

    def _delete_shipped_batch(self, remote_end: int, now: int) -> bool:
        """Delete the oldest :data:`RETENTION_BATCH_SEGMENTS` shipped local segments past
        local retention (keeping those a catching-up follower needs, within the bound);
        whether any went."""
        tc = self.config
        hold = self._hold
        shipped = self._local.retention_candidates(
            tc.local_retention_ms,
            tc.local_retention_bytes,
            now,
            up_to=remote_end,
            # Keeping a follower's segments looks at the newest candidates: all of them.
            limit=RETENTION_BATCH_SEGMENTS if hold is None else None,
        )
        if hold is not None:
            # Keep the newest of those a follower still copies, within the bound.
            kept, cut = 0, len(shipped)
            while (
                cut > 0
                and shipped[cut - 1].next_offset > hold
                and kept + shipped[cut - 1].size <= tc.catchup_retention_bytes
            ):
                cut -= 1
                kept += shipped[cut].size
            shipped = shipped[:cut]
        shipped = shipped[:RETENTION_BATCH_SEGMENTS]
        if shipped:
            self._local.delete_segments_before(shipped[-1].next_offset)
        return bool(shipped)

    def hold_local_from(self, offset: int | None) -> None:
        """This leader's followers still copy from ``offset`` (None: none does): local
        retention keeps the shipped segments from there, up to
        ``catchup_retention_bytes`` past what it would keep. Any thread."""
        self._hold = offset

    def apply_replica_retention(self, remote_end: int) -> None:
        """A follower's retention round (it ships nothing; the leader does): delete the
        oldest local segments past local retention (``local_retention_ms`` /
        ``local_retention_bytes``; without a remote tier the total ``retention_ms`` /
        ``retention_bytes``) that end at or below both ``remote_end`` (the leader's
        remote end: those records are in the bucket) and the high watermark, at most
        :data:`RETENTION_BATCH_SEGMENTS` a call (the next fetch's round goes on). No-op
        once closed."""
        tc = self.config
        with self._control:
            if self._closed:
                return
            limit = min(remote_end, self._replication.high_watermark)
            if self._remote is None:
                ms, size = tc.retention_ms, tc.retention_bytes
            else:
                ms, size = tc.local_retention_ms, tc.local_retention_bytes
            cands = self._local.retention_candidates(
                ms, size, self._clock(), up_to=limit, limit=RETENTION_BATCH_SEGMENTS
            )
            if cands:
                self._local.delete_segments_before(cands[-1].next_offset)
                # This log's start moved (a follower's remote tier holds nothing): its
                # epochs start there, as they would when it opens again.
                self._replication.epochs.truncate_from_start(log_start(self._local, self._remote))
                self._replication.clamp_high_watermark()

    # ---- closing ------------------------------------------------------------------------------

    def stop(self) -> None:
        """The first step of closing, before the control lock: the copy or fetch under
        way need not sit out its quota any more, and the shipper stops after its step."""
        if self._remote is not None:
            self._remote.release_limits()
        if self._shipper is not None:
            self._shipper.stop()

    def close(self, end: int) -> None:
        """Under the control lock, the local log closed at ``end``: no round runs any
        more; a leader (or single node) lowers the end recorded in the bucket from the
        reservation to ``end`` (a log rebuilt after a later disk loss then reports
        exactly the unshipped tail lost; best effort), and the remote tier closes."""
        self._closed = True
        r = self._remote
        if r is None:
            return
        if not self._replication.following and not self.view_pending:
            try:
                r.release_end(end)
            except RemoteStorageError as exc:
                log.warning(
                    "%s: reserved offsets not released in the bucket: %s", self.log_id, exc.message
                )
        r.close()
