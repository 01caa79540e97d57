"""TieredLog: a local segmented log plus its remote tier, with transparent reads.

Offsets are laid out over the two tiers like this::

    log_start          local_start                     remote_end         next_offset
       |---- remote only ----|==== local and remote ====|---- local only ----|
                              (shipped, kept locally until local retention drops them)

A read at ``offset >= local_start`` is served from disk; a lower one from the bucket via
the remote-index files and ranged GETs (:class:`~tiered_log.remote.tier.RemoteTier`).
Appends only ever touch the local log. A background :class:`~tiered_log.shipper.Shipper`
copies sealed, flushed segments, drops local copies past local retention (only once
copied), and deletes remote segments past total retention, moving the log start.

Opening a TieredLog on an empty directory whose bucket holds the log's segments rebuilds
the remote state from the bucket alone (manifests, never segment data) and continues
the log above every offset it handed out (the end recorded in the bucket; what lies
between the remote end and it is reported lost, never reused).

Replication (leader epochs, the follower's append, the high watermark that caps
consumers' reads with ``upto=``) is :class:`~tiered_log.replicated.ReplicatedLogMixin`'s;
a log opened with ``replicated=False`` (the default) has no high watermark of its own
(it is the next offset) and behaves as before.

Thread-safety: as :class:`~tiered_log.local.log.Log`: appends serialize, reads take no
lock and never wait for the shipper; control operations (truncate, retention, close)
serialize with shipping on the remote tier's lock.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from .bounds import PartitionBounds
from .errors import (
    CorruptRangeError,
    DataLossError,
    InvalidArgumentError,
    InvalidOffsetError,
    LogClosedError,
    NotLeaderError,
    OffsetOutOfRangeError,
    PartitionNotReadyError,
    RemoteStorageError,
)
from .format import naming
from .format.records import EncodedBatch, FetchData, ProducerRecord, Record
from .local.batch_read import walk_batches as walk_local_batches
from .local.log import Log, LogConfig, now_ms
from .local.ranges import BytesPage, FetchRanges, Page, RangesPage
from .local.segment import SegmentInfo
from .remote.storage import RemoteStorage
from .remote.tier import RemoteTier, TierConfig, TierLimits
from .replicated import ReplicatedLogMixin
from .shipper import Shipper
from .tiered_report import LogReportMixin

log = logging.getLogger(__name__)
R = TypeVar("R")


TieredBounds = PartitionBounds
"""The bounds of a tiered log: :class:`~tiered_log.bounds.PartitionBounds` (one type
from the log to the client; this name stays for the public API)."""


class TieredLog(ReplicatedLogMixin, LogReportMixin):
    """A log whose old segments live in object storage; see the module docstring.

    ``storage=None`` (or ``tier.remote_enabled=False``) makes it a plain local log that
    applies ``retention_ms``/``retention_bytes`` locally (in :meth:`tier_once`).
    ``rebuild=False`` skips the rebuild from the bucket of a log opened on an empty
    directory (a log created just now, whose id is new, has nothing in the bucket).
    ``limits``: upload and fetch rate limits shared with other logs (a node's); without
    them the log limits itself by ``tier``'s ``upload_bytes_per_sec`` and
    ``fetch_bytes_per_sec``. ``replicated``: the log keeps a high watermark of its own
    (checkpointed at most every ``hw_checkpoint_interval_ms``) and ships only segments
    below it (see :mod:`tiered_log.replicated`).
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
    ) -> None:
        self.directory = Path(directory)
        self.log_id = naming.validate_log_id(log_id or self.directory.name)
        self.config = config or LogConfig()
        self.tier_config = tier or TierConfig()
        self._closed = False
        self._ctl = threading.Lock()
        self.directory.mkdir(parents=True, exist_ok=True)
        fresh = not naming.list_segment_bases(self.directory)
        self._remote: RemoteTier | None = None
        if storage is not None and self.tier_config.remote_enabled:
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
            resume = self._resume_offset()
        self._local = Log(self.directory, self.config, initial_offset=resume)
        if self._remote is not None and self._local.next_offset < resume:
            # The local disk lost data the bucket holds: continue after the bucket.
            self._local.reset(resume)
        if self._remote is not None:
            # A crash between moving the remote log start (retention) and deleting the
            # local segments below it left them here: never serve them again.
            self._local.delete_segments_before(self._remote.meta.log_start_offset)
        self._shipper: Shipper | None = None
        self._reserve_lock = threading.Lock()
        self._reserve_failing = False
        self._local_hold: int | None = None
        self._open_replication(replicated, hw_checkpoint_interval_ms)
        if start_shipper:
            self.start_shipper()

    def _resume_offset(self) -> int:
        """Where a log with no local record continues, given its view of the bucket: the
        remote end, or above the end the bucket records (every offset this log's
        partition handed out) when that is higher; the offsets between were
        acknowledged and never reached the bucket: noted lost (a WARNING, describe,
        metrics), never reused. 0 without a remote tier. Opening, and a replica that
        takes the lead with an empty log (:meth:`lead`)."""
        r = self._remote
        if r is None:
            return 0
        resume, end = r.remote_end, r.meta.end_offset
        if end <= resume:
            return resume
        if not any(a <= resume and end <= b for a, b in r.meta.lost):
            log.warning(
                "%s: offsets [%d, %d) were handed out (or reserved to be) but never "
                "reached the bucket before the local disk was lost: they are lost; "
                "the log continues at %d",
                self.log_id,
                resume,
                end,
                end,
            )
            r.note_lost(resume, end)
        return end

    def start_shipper(self) -> None:
        """Start the background shipper (a log opened with ``start_shipper=False`` is
        tiered only by explicit :meth:`tier_once` calls until then). No-op without a
        remote tier or when one runs already; not concurrently with :meth:`close`."""
        if self._remote is None or self._shipper is not None or self._closed:
            return
        self._shipper = Shipper(self, self.tier_config.ship_interval_ms)
        self._shipper.start()

    def stop_shipper(self, *, wait: bool = True) -> None:
        """Stop the background shipper (a leader becoming a follower: followers never
        ship); :meth:`start_shipper` starts one again. No-op without one. ``wait=False``:
        ask it to stop after the step under way and return at once (its rounds and a new
        shipper's serialize on the log's control lock)."""
        shipper, self._shipper = self._shipper, None
        if shipper is not None:
            shipper.stop(timeout=30.0 if wait else 0.0)

    # ---- bounds ------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        local_start = self._local.log_start_offset
        r = self._remote
        if r is not None and r.has_data and r.start_offset < local_start:
            return r.start_offset
        return local_start

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

    @property
    def _remote_view_pending(self) -> bool:
        """Whether this replica leads but has not rebuilt its view of the bucket yet."""
        return self._resync_pending and self._remote is not None and not self._following

    def check_remote_view(self, offset: int | None = None) -> None:
        """PartitionNotReadyError (retriable) while this replica leads but has not yet
        rebuilt its view of the bucket (:meth:`lead`: others shipped, and retention moved
        the log start, while it followed): for a read at ``offset`` below its local
        start, or (``offset`` None) a question about the whole log (its bounds as the API
        reports them, a timestamp lookup). Until then its own view would answer a log
        start above the true one and 416 for archived offsets. Offsets at or above the
        local start are always served. Any thread, no lock."""
        if not self._remote_view_pending:
            return
        local_start = self._local.log_start_offset
        if offset is None or offset < local_start:
            raise PartitionNotReadyError(
                f"{self.log_id}: this replica has just become leader and is reading the "
                f"bucket for its archived offsets (below {local_start}): retry shortly"
            )

    def append(
        self,
        value: bytes,
        *,
        key: bytes | None = None,
        headers: Sequence[tuple[str, bytes | None]] = (),
        timestamp: int | None = None,
    ) -> int:
        self._check_open()
        self._reserve_offsets(self._local.next_offset + 1)
        active = self._local.active_base_offset
        offset = self._local.append(value, key=key, headers=headers, timestamp=timestamp)
        self._reserve_offsets(offset + 1)
        if self._shipper is not None and self._local.active_base_offset != active:
            self._shipper.wake()  # the append rolled a segment: there may be one to ship
        return offset

    def append_batch(
        self,
        records: Sequence[ProducerRecord | bytes] | EncodedBatch,
    ) -> tuple[int, int]:
        self._check_open()
        count = records.count if isinstance(records, EncodedBatch) else len(records)
        self._reserve_offsets(self._local.next_offset + count)
        active = self._local.active_base_offset
        first_last = self._local.append_batch(records)
        self._reserve_offsets(first_last[1] + 1)
        if self._shipper is not None and self._local.active_base_offset != active:
            self._shipper.wake()
        return first_last

    def _reserve_offsets(self, end: int) -> None:
        """Make sure the bucket records that offsets up to ``end`` may be handed out
        (:attr:`RemoteMeta.end_offset <tiered_log.remote.metadata.RemoteMeta.end_offset>`)
        before an append past the recorded end is acknowledged: a log rebuilt from the
        bucket after its disk was lost continues above it and never hands an
        acknowledged offset out again. Reserved ``offset_reserve`` offsets ahead, so one
        small write covers many appends; :meth:`maintain` renews the reservation before
        it runs out, so appends rarely wait for it. Called before an append (with the
        offsets it will take) and after it (appends racing for the same offsets); raises
        RemoteStorageError when the bucket cannot record it (not acknowledged: retry) and
        NotLeaderError when the fence says this node was deposed. Leaders and single
        nodes only (a follower's appends are its leader's). Any thread."""
        r = self._remote
        if r is None or self._following or end <= r.meta.end_offset:
            return
        with self._reserve_lock:
            if end <= r.meta.end_offset:
                return
            ahead = end + self.tier_config.offset_reserve
            # A new leader's view of the bucket is stale until its first round: it moves
            # only the end of the bucket's own metadata.
            record = r.record_end_fresh if self._resync_pending else r.record_end
            if not record(ahead):
                raise NotLeaderError(f"{self.log_id}: this node no longer leads the partition")

    def flush(self) -> int:
        return self._local.flush()

    def roll(self) -> None:
        """Seal the active segment (if not empty) and wake the shipper."""
        self._local.roll()
        if self._shipper is not None:
            self._shipper.wake()

    # ---- reading (either tier) -----------------------------------------------------------

    def read(self, offset: int) -> Record:
        recs = self.read_range(offset, max_records=1)
        if not recs:
            raise OffsetOutOfRangeError(
                f"offset {offset} is not in the log [{self.log_start_offset}, {self.next_offset})",
                log_start=self.log_start_offset,
                next_offset=self.next_offset,
            )
        return recs[0]

    def read_range(
        self,
        offset: int,
        max_records: int = 500,
        max_bytes: int = 1 << 20,
        *,
        upto: int | None = None,
    ) -> list[Record]:
        """Records from ``offset`` on, from whichever tier holds them (see module doc).
        ``upto`` (a consumer's read: the high watermark): none at or past it; ``[]`` at or
        past it (up to the next offset)."""
        self._check_read(offset, max_records, max_bytes)
        if upto is not None:
            if self._at_cap(offset, upto):
                return []
            if upto > offset:  # the walk stops at the cap (records are counted from offset)
                max_records = min(max_records, upto - offset)
        if offset >= self._local.log_start_offset or self._remote is None:
            return self._local.read_range(offset, max_records, max_bytes)
        return self._archive_of(offset).read_range(offset, max_records, max_bytes)

    def _at_cap(self, offset: int, upto: int) -> bool:
        """Whether a read capped at ``upto`` answers empty at ``offset``: at or past the
        cap and in the log's bounds (outside them the read's own error is due)."""
        if not isinstance(upto, int) or isinstance(upto, bool):
            raise InvalidArgumentError(f"upto must be an integer offset, got {upto!r}")
        return upto <= offset and self.log_start_offset <= offset <= self.next_offset

    def _check_read(self, offset: int, max_records: int, max_bytes: int) -> None:
        """The argument checks every read makes, then that the log is open."""
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise InvalidOffsetError(f"offset must be a non-negative integer, got {offset!r}")
        if max_records < 1 or max_bytes < 1:
            raise InvalidArgumentError("max_records and max_bytes must be at least 1")
        self._check_open()

    def remote_view_status(self) -> dict[str, Any]:
        """``remote_view`` (``ready``, or ``not_ready`` while a new leader has not read
        the bucket yet) and ``rebuild_requests`` (bucket requests of the last rebuild of
        that view): for a cluster's status. Any thread, no I/O."""
        r = self._remote
        return {
            "remote_view": "not_ready" if self._remote_view_pending else "ready",
            "rebuild_requests": r.rebuild_requests if r is not None else 0,
        }

    def _archive_of(self, offset: int) -> RemoteTier:
        """The remote tier, for an ``offset`` below the local start: OffsetOutOfRangeError
        below the log start, DataLossError if no remote tier holds it,
        PartitionNotReadyError before a new leader knows the bucket."""
        self.check_remote_view(offset)
        start, nxt = self.log_start_offset, self.next_offset
        if offset < start:
            raise OffsetOutOfRangeError(
                f"offset {offset} is not in the log [{start}, {nxt})",
                log_start=start,
                next_offset=nxt,
            )
        r = self._remote
        if r is None or offset >= r.remote_end:
            raise DataLossError(
                f"offset {offset} is in neither tier (remote ends at "
                f"{r.remote_end if r else start}, local starts at "
                f"{self._local.log_start_offset})"
            )
        return r

    def read_batches(
        self,
        offset: int,
        max_records: int = 500,
        max_bytes: int = 1 << 20,
        *,
        upto: int | None = None,
    ) -> FetchData:
        """The stored batches from the one holding ``offset`` on, from whichever tier
        holds them, verified and not decoded (a binary fetch sends them as they are): at
        least one batch if there is a record at ``offset``, then whole batches while
        fewer than ``max_records`` records from ``offset`` and fewer than ``max_bytes``
        bytes were taken; empty at exactly the next offset. The one batch read of the
        log: locally :meth:`Log.read_batches <tiered_log.local.log.Log.read_batches>`,
        below the local start :meth:`read_remote_batches`; both return one
        :class:`~tiered_log.format.batch.FetchData`. ``upto`` (a consumer's read: the
        high watermark): no batch holding a record at or past it (one straddling it ends
        the page before it); empty at or past it (up to the next offset). A follower's
        fetch passes none: it copies up to the log end.

        OffsetOutOfRangeError outside ``[log_start, next_offset]`` (also when retention
        or a truncation moved the bounds during the read); CorruptRangeError where the
        stored batch at ``offset`` is damaged (a page stops before damage further on);
        the remote tier's errors below the local start. Blocks on disk and the bucket;
        any thread, no lock (as :meth:`read_range`)."""
        return self._read_batches(offset, max_records, max_bytes, upto, BytesPage)

    def read_batch_ranges(
        self,
        offset: int,
        max_records: int = 500,
        max_bytes: int = 1 << 20,
        *,
        upto: int | None = None,
    ) -> FetchRanges:
        """:meth:`read_batches`'s other result form: the same read (same walk, checks,
        limits and errors) answering *where* the batches lie instead of their bytes, for
        a sender that moves them from the files to a socket (``sendfile``): a
        :class:`~tiered_log.local.ranges.FetchRanges` of ranges of the segment files
        and, below the local start, of the chunk cache's files (a chunk not on disk yet
        is a ``bytes`` part, fetched as for :meth:`read_batches`). The checks read the
        page cache where the data lies (mapped), not a copy. It holds the files open:
        :meth:`~tiered_log.local.ranges.FetchRanges.close` it once sent. Any thread."""
        return self._read_batches(offset, max_records, max_bytes, upto, RangesPage)

    def _read_batches(
        self,
        offset: int,
        max_records: int,
        max_bytes: int,
        upto: int | None,
        page: Callable[[int], Page[R]],
    ) -> R:
        """The batch read of :meth:`read_batches`, its result in the form of the page
        ``page(offset)`` makes."""
        self._check_read(offset, max_records, max_bytes)
        self.check_remote_view(offset)
        for _ in range(3):  # the bounds may move under the read: look again
            start, nxt = self.log_start_offset, self.next_offset
            if offset < start or offset > nxt:
                break
            if offset == nxt or (upto is not None and self._at_cap(offset, upto)):
                return page(offset).result(offset)
            try:
                if offset >= self._local.log_start_offset or self._remote is None:
                    return walk_local_batches(
                        self._local.segment_for, offset, max_records, max_bytes, upto, page(offset)
                    )
                return self._walk_remote_batches(offset, max_records, max_bytes, upto, page(offset))
            except CorruptRangeError:
                raise  # damaged where the read starts: no other tier has it
            except (OffsetOutOfRangeError, DataLossError):
                # Local retention or a truncation moved the local start past ``offset``
                # (read it from the bucket now), or the log start past it (416), or a
                # truncation moved the remote end below it (read it locally now).
                if (
                    self.log_start_offset <= offset < self._local.log_start_offset
                    and self._remote is not None
                    and offset >= self._remote.remote_end
                ):
                    raise  # truly missing from both tiers
        start, nxt = self.log_start_offset, self.next_offset
        raise OffsetOutOfRangeError(
            f"offset {offset} is not in the log [{start}, {nxt})", log_start=start, next_offset=nxt
        )

    def read_remote_batches(
        self,
        offset: int,
        max_records: int = 500,
        max_bytes: int = 1 << 20,
        *,
        upto: int | None = None,
    ) -> FetchData:
        """The remote tier's half of :meth:`read_batches`: the stored batches from the one
        holding ``offset``, verified, not decoded (see
        :meth:`RemoteTier.read_batches <tiered_log.remote.tier.RemoteTier.read_batches>`).
        OffsetOutOfRangeError below the log start; DataLossError at or above the local
        start (read those from the local segments) or where no tier holds ``offset``."""
        self._check_read(offset, max_records, max_bytes)
        return self._walk_remote_batches(offset, max_records, max_bytes, upto, BytesPage(offset))

    def _walk_remote_batches(
        self, offset: int, max_records: int, max_bytes: int, upto: int | None, page: Page[R]
    ) -> R:
        local_start = self._local.log_start_offset
        if offset >= local_start:
            page.close()
            raise DataLossError(f"offset {offset} is not below the local start {local_start}")
        try:
            archive = self._archive_of(offset)
        except BaseException:
            page.close()
            raise
        return archive.walk_batches(offset, max_records, max_bytes, upto, page)

    def offset_for_timestamp(self, timestamp: int) -> int | None:
        """First offset whose timestamp is >= ``timestamp`` in either tier, or None."""
        if not isinstance(timestamp, int) or isinstance(timestamp, bool):
            raise InvalidArgumentError(f"timestamp must be an integer (ms), got {timestamp!r}")
        self._check_open()
        self.check_remote_view()
        r = self._remote
        if r is not None and r.has_data and r.start_offset < self._local.log_start_offset:
            found = r.offset_for_timestamp(timestamp)
            if found is not None and found >= self.log_start_offset:
                return found
        return self._local.offset_for_timestamp(timestamp)

    # ---- truncation ---------------------------------------------------------------------

    def truncate(self, offset: int) -> None:
        """Remove every record at and after ``offset`` in both tiers.

        Below the local start the local log restarts empty at ``offset`` and the remote
        tier records the truncation in its metadata; readers never see truncated records.
        The leader-epoch cache loses the epochs starting at or after ``offset``; the high
        watermark drops to ``offset`` if above (before the records go).
        """
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise InvalidOffsetError(f"offset must be a non-negative integer, got {offset!r}")
        with self._ctl:
            self._check_open()
            start, nxt = self.log_start_offset, self.next_offset
            if offset < start or offset > nxt:
                raise OffsetOutOfRangeError(
                    f"cannot truncate to {offset}: the log holds [{start}, {nxt})",
                    log_start=start,
                    next_offset=nxt,
                )
            with self._hw_lock:
                self._lower_high_watermark(offset)
                local_start = self._local.log_start_offset
                if self._remote is not None:
                    self._remote.truncate(offset, local_start)
                if offset >= local_start:
                    self._local.truncate(offset)
                else:
                    self._local.reset(offset)
                self._epochs.truncate_from_end(offset)
        if self._shipper is not None:
            self._shipper.wake()  # truncated remote segments are deleted by the next round

    # ---- tiering (the shipper's round) -----------------------------------------------------

    def eligible_segments(self) -> list[SegmentInfo]:
        """Sealed, flushed local segments not yet in the remote tier, oldest first; in a
        replicated log only those below the high watermark (committed records only)."""
        if self._remote is None:
            return []
        end = self._remote.remote_end
        flushed = min(self._local.flushed_offset, self.high_watermark)
        return [
            s
            for s in self._local.segments()
            if s.sealed and s.base_offset >= end and s.next_offset <= flushed
        ]

    def tiering_state(self) -> tuple[int, ...]:
        """What a tiering round depends on, besides the clock: the shipper skips a round
        when this has not changed since the last one. Cheap (no I/O, no lock); a racing
        append at worst causes one more round."""
        loc, r = self._local, self._remote
        state = (
            loc.next_offset,
            loc.flushed_offset,
            loc.log_start_offset,
            loc.active_base_offset,
            self.high_watermark,
        )
        if r is None:
            return state
        return (*state, r.remote_end, r.start_offset, int(r.needs_index_rebuild))

    def tier_once(self, stop: threading.Event | None = None) -> int:
        """One round: clean up, copy eligible segments, apply both retentions.

        Returns the number of segments copied. Raises RemoteStorageError when the bucket
        fails (the shipper backs off and retries).
        """
        with self._ctl:
            if self._closed:
                return 0
            copied = 0
            r = self._remote
            if r is not None and self._resync_pending:
                # A cluster's new leader: others shipped while it followed.
                n = r.resync_from_bucket()
                self._resync_pending = False
                self._local.delete_segments_before(r.meta.log_start_offset)
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
                todo, step = self.eligible_segments(), self.tier_config.snapshot_interval_segments
                for i in range(0, len(todo), step):
                    copied += r.copy_segments(todo[i : i + step], stop)
                    if r.snapshot_due():
                        r.write_snapshot()
                    if stop is not None and stop.is_set():
                        break
            self._apply_retention()
            self._epochs.truncate_from_start(self.log_start_offset)
            self._clamp_high_watermark()
            if r is not None and r.snapshot_due():
                r.write_snapshot()  # a successor reads this view in a few requests
            return copied

    def _apply_retention(self) -> None:
        now = now_ms()
        r = self._remote
        tc = self.tier_config
        if r is None:
            cands = self._local.retention_candidates(tc.retention_ms, tc.retention_bytes, now)
            if cands:
                self._local.delete_segments_before(cands[-1].next_offset)
            return
        # Remote (total) retention: moves the log start, in both tiers.
        unshipped = sum(s.size for s in self._local.segments() if s.base_offset >= r.remote_end)
        cut = r.retention_cutoff(unshipped, now)
        if cut is not None:
            r.delete_before(cut)
        # Local segments below the log start go too: those just cut, and any a crash
        # left behind after the start had moved (then ``cut`` is None on the retry).
        self._local.delete_segments_before(max(cut or 0, r.meta.log_start_offset))
        # Local retention: only segments whose copy is finished.
        end = r.remote_end
        cands = self._local.retention_candidates(
            tc.local_retention_ms, tc.local_retention_bytes, now
        )
        shipped = [s for s in cands if s.next_offset <= end]
        hold = self._local_hold
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
        if shipped:
            self._local.delete_segments_before(shipped[-1].next_offset)

    def hold_local_from(self, offset: int | None) -> None:
        """This leader's followers still copy from ``offset`` (the lowest next fetch of a
        live follower; None: none does): local retention keeps the shipped segments
        from there, up to ``catchup_retention_bytes`` past what it would keep, so a
        follower catching up (a rebuilt node) is not sent back to the remote end again
        and again while producers push the local start up, as Kafka's followers rely on
        their leader's local log. The node, after each follower fetch; any thread."""
        self._local_hold = offset

    def maintain(self, *, tier: bool = True) -> None:
        """Time-based upkeep, run periodically by the owner (the service): flush by
        ``flush_ms``, roll by ``segment_ms``, checkpoint the high watermark when due; without a
        shipper (remote tier off, or not started) the round of tiering and retention runs
        here, with one a roll wakes it. ``tier=False`` (a follower's upkeep: it ships
        nothing, see :meth:`apply_replica_retention`): no tiering round. Any thread."""
        if self._closed:
            return
        self._local.maybe_flush()
        if self._following:  # a follower rolls where its leader did, and ships nothing
            self._checkpoint_if_due()
            return
        rolled = self._local.maybe_roll_by_age()
        self._checkpoint_if_due()
        if self._remote is not None and not self._resync_pending and self._local.next_offset:
            # Renew the offsets reserved in the bucket before appends run out of them
            # (not for a log that never handed one out: a cluster's replica that leads
            # with an empty log continues above the reservation).
            ahead = self._local.next_offset + self.tier_config.offset_reserve // 2
            try:
                self._reserve_offsets(ahead)
            except (RemoteStorageError, NotLeaderError) as exc:
                if not self._reserve_failing:  # once per outage, not every upkeep round
                    log.warning("%s: offsets not reserved in the bucket: %s", self.log_id, exc)
                self._reserve_failing = True
            else:
                self._reserve_failing = False
        if not tier:
            return
        if self._shipper is None:
            self.tier_once()
        elif rolled:
            self._shipper.wake()  # a segment to ship

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

    # ---- closing ------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the shipper (after its current step, which from now on ignores the upload
        limit, as fetches under way ignore the fetch quota), flush and close. Idempotent."""
        if self._closed:
            return
        if self._remote is not None:
            self._remote.release_limits()  # a copy or fetch under way need not sit out its quota
        if self._shipper is not None:
            self._shipper.stop()
        with self._ctl:
            self.checkpoint_high_watermark(quiet=True)
            self._closed = True
            self._local.close()
            if self._remote is not None:
                if not self._following and not self._resync_pending:
                    self._release_reserved_offsets()
                self._remote.close()

    def _release_reserved_offsets(self) -> None:
        """On a clean close, lower the end recorded in the bucket from the reservation
        to the offsets truly handed out (no append can follow): a log rebuilt after a
        later disk loss then reports exactly the unshipped tail lost. Best effort."""
        assert self._remote is not None
        try:
            self._remote.release_end(self._local.next_offset)
        except RemoteStorageError as exc:
            log.warning(
                "%s: reserved offsets not released in the bucket: %s", self.log_id, exc.message
            )

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> TieredLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
