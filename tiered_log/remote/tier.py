"""The remote tier of one log: a thin facade over its jobs.

:class:`RemoteTier` is the *mechanism* (each step idempotent, each state change journaled
before the next); the background loop that decides when to run it is
:class:`tiered_log.partition.scheduler.Shipper`, and the read resolution between tiers is
:class:`tiered_log.partition.log.TieredLog`. As Kafka's ``RemoteLogManager``, it is made of
named jobs over one shared state:

=====================  =============================================================
:mod:`.state`          :class:`~.state.TierState`: journal, metadata, index files,
                       damage, counters, and the offsets they imply (the facade *is*
                       the state: ``RemoteTier`` extends it)
:mod:`.copy`           :class:`~.copy.CopyTask`: the copy state machine and its cleanup
:mod:`.retention`      :class:`~.retention.RetentionTask`: retention and truncation
:mod:`.recovery`       :class:`~.recovery.RecoveryTask`: rebuilds from the manifests or
                       the bucket alone, recovery of a damaged journal or metadata
:mod:`.reader`         :class:`~.reader.RemoteReader`: fetch, prefetch, both read forms
:mod:`.manifest`       the manifest's layout, checks and repair
:mod:`.limits`         shared thread pools and rate limits
:mod:`.tier_config`    :class:`~.tier_config.TierConfig`, :class:`~.tier_config.TierStats`
=====================  =============================================================

Thread-safety: copy, delete, truncate and rebuild run under one lock (the shipper and
the owning log's control calls); reads are lock-free and may run from any thread.
Fetches and copy helpers run on thread pools shared by every log of the process
(:func:`~.limits.shared_pool`), so threads stay bounded however many partitions a node
holds.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, wait
from pathlib import Path
from typing import Any, TypeVar

from ..format import naming
from ..format.records import FetchData, Record
from ..local.ranges import Page
from ..local.segment import SegmentInfo
from .cache import ChunkCache
from .copy import ARCHIVE_TMP_SUFFIX, CopyAttempt, CopyTask
from .limits import COPY_THREADS, FETCH_THREADS, RateLimiter, TierLimits, shared_pool
from .metadata import RemoteSegment
from .reader import RemoteReader
from .recovery import RecoveryTask, load_meta
from .retention import RetentionTask
from .state import LOCATION_FILE, TierState, read_location
from .storage import RemoteStorage
from .tier_config import TierConfig, TierStats
from .worker import in_worker

R = TypeVar("R")

log = logging.getLogger(__name__)

CLOSE_WAIT_S = 60.0
"""How long :meth:`RemoteTier.close` waits for this log's pending remote work, each kind."""

__all__ = [
    "COPY_THREADS",
    "FETCH_THREADS",
    "LOCATION_FILE",
    "CopyAttempt",
    "RateLimiter",
    "RemoteTier",
    "TierConfig",
    "TierLimits",
    "TierStats",
    "read_location",
    "shared_pool",
]


class RemoteTier(TierState):
    """The remote tier of one log; see the module docstring. ``limits``: the node's
    shared rate limits (default: the log's own, from ``config``)."""

    def __init__(
        self,
        log_dir: Path,
        log_id: str,
        storage: RemoteStorage,
        config: TierConfig,
        limits: TierLimits | None = None,
    ) -> None:
        remote_dir = log_dir / naming.REMOTE_DIR
        remote_dir.mkdir(parents=True, exist_ok=True)
        for leftover in remote_dir.glob("*" + ARCHIVE_TMP_SUFFIX):
            leftover.unlink(missing_ok=True)  # an encoded copy a crash left half-built
        storage = in_worker(config, storage)  # every store call in a worker, its first too
        super().__init__(log_dir, log_id, storage, config, load_meta(log_dir, storage, log_id))
        limits = limits or TierLimits.of(config.upload_bytes_per_sec, config.fetch_bytes_per_sec)
        self.copier = CopyTask(self, limits.upload, shared_pool("remote-copy", COPY_THREADS))
        self.retention = RetentionTask(self)
        self.recovery = RecoveryTask(self)
        self.reader = RemoteReader(self, limits.fetch, shared_pool("remote-fetch", FETCH_THREADS))
        if self.journal.damaged:
            self.recovery._recover_journal()
        self.refresh()
        self.record_location()
        self.needs_index_rebuild = (
            self.needs_index_rebuild
            or bool(self.index.problems())
            or (self.index.last_offset != self.expected_index_last())
        )

    # ---- the jobs' resources ---------------------------------------------------------------

    @property
    def cache(self) -> ChunkCache:
        return self.reader.cache

    @property
    def limiter(self) -> RateLimiter:
        """The upload limit (a node's, when shared)."""
        return self.copier.limiter

    @property
    def fetch_limiter(self) -> RateLimiter:
        """The fetch quota (a node's, when shared)."""
        return self.reader.fetch_limiter

    # ---- copying (CopyTask) ------------------------------------------------------------------

    def copy_segment(
        self, seg: SegmentInfo, progress: Callable[[int], None] | None = None
    ) -> RemoteSegment:
        return self.copier.copy_segment(seg, progress)

    def start_copy(
        self, seg: SegmentInfo, progress: Callable[[int], None] | None = None
    ) -> CopyAttempt:
        return self.copier.start_copy(seg, progress)

    def finish_copy(self, attempt: CopyAttempt) -> RemoteSegment:
        return self.copier.finish_copy(attempt)

    def copy_segments(
        self, segments: Sequence[SegmentInfo], stop: threading.Event | None = None
    ) -> int:
        return self.copier.copy_segments(segments, stop)

    def abandon_copy(self, attempt: CopyAttempt) -> None:
        self.copier.abandon_copy(attempt)

    def cleanup_pending(self) -> int:
        return self.copier.cleanup_pending()

    # ---- retention and truncation (RetentionTask) --------------------------------------------

    def delete_before(self, offset: int) -> list[RemoteSegment]:
        return self.retention.delete_before(offset)

    def retention_cutoff(self, local_unshipped_bytes: int, now_ms: int) -> int | None:
        return self.retention.retention_cutoff(local_unshipped_bytes, now_ms)

    def truncate(self, offset: int, local_start: int) -> None:
        self.retention.truncate(offset, local_start)

    def advance_start(self, offset: int) -> None:
        self.retention.advance_start(offset)

    # ---- rebuilding (RecoveryTask) -----------------------------------------------------------

    def rebuild_index_files(self) -> int:
        return self.recovery.rebuild_index_files()

    def rebuild_from_bucket(self, progress: Callable[[int, int], None] | None = None) -> int:
        return self.recovery.rebuild_from_bucket(progress)

    def resync_from_bucket(self, *, read_only: bool = False) -> int:
        return self.recovery.resync_from_bucket(read_only=read_only)

    # ---- reading (RemoteReader; any thread) --------------------------------------------------

    def read_range(self, offset: int, max_records: int, max_bytes: int) -> list[Record]:
        return self.reader.read_range(offset, max_records, max_bytes)

    def read_batches(
        self, offset: int, max_records: int, max_bytes: int, upto: int | None = None
    ) -> FetchData:
        return self.reader.read_batches(offset, max_records, max_bytes, upto)

    def walk_batches(
        self, offset: int, max_records: int, max_bytes: int, upto: int | None, page: Page[R]
    ) -> R:
        return self.reader.walk_batches(offset, max_records, max_bytes, upto, page)

    def archived_segments(self, log_start: int) -> list[dict[str, Any]]:
        return self.reader.archived_segments(log_start)

    def offset_for_timestamp(self, ts: int) -> int | None:
        return self.reader.offset_for_timestamp(ts)

    # ---- closing -------------------------------------------------------------------------------

    def release_limits(self) -> None:
        """Let this log's uploads and fetches under way run unthrottled from now on
        (closing); other logs sharing the limits keep to them."""
        self.closing.set()

    def close(self) -> None:
        """Cancel this log's queued fetches and wait for its running ones, its uploads and
        its chunk cache writes (the thread pools are shared by every log of the process
        and stay up). Fetches waiting for the fetch quota stop waiting. Each wait is
        bounded (:data:`CLOSE_WAIT_S`): work still pending then is left to finish on
        its own, with a WARNING, rather than hang the close (an upload cut short is a
        torn copy, which recovery and reconcile clear)."""
        self.release_limits()
        futs: set[Future[Any]] = self.reader.fetch_futures() | self.copier.pending_futures()
        for f in futs:
            f.cancel()
        left = wait(futs, timeout=CLOSE_WAIT_S).not_done
        # cache writes of finished fetches: let them land
        left |= wait(self.reader.cache_writes(), timeout=CLOSE_WAIT_S).not_done
        if left:
            log.warning(
                "%s: closed with %d remote fetch(es), upload(s) or cache write(s) still "
                "pending after %.0f s",
                self.log_id,
                len(left),
                CLOSE_WAIT_S,
            )
