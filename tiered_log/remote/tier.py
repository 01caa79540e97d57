"""The remote tier of one log: copying sealed segments, remote indexes, reads, retention.

:class:`RemoteTier` is the *mechanism* (each step idempotent, each state change journaled
before the next); the background loop that decides when to run it is
:class:`tiered_log.remote.shipper.Shipper`, and the read resolution between tiers is
:class:`tiered_log.tiered.TieredLog`.

Copying a segment (KIP-405's RemoteLogSegmentState machine, one unique id per attempt)::

    journal COPY_STARTED(id)
    PUT <base>-<id>.log                           (rate-limited, multipart when large)
      meanwhile, in a helper thread: scan the store (SCAN_WINDOW bytes at a time),
      verifying every batch, cut it into chunks of ~chunk_bytes, and PUT
      <base>-<id>.rli (the manifest, see below)
    journal COPY_FINISHED(id)                     (once both PUTs succeeded)
    append the entries to the local remote-index files

A round keeps up to ``copies_in_flight`` (2) copies under way
(:meth:`RemoteTier.copy_segments`): the next one's uploads start while the previous
one's finish; each is *finished* (journaled, indexed)
strictly in offset order, and if one fails, those started after it are abandoned
(cleaned up like a failed attempt). More in flight ships faster and costs producers
latency (their fsyncs and CPU compete with the shipper's); 1 copies one segment at a
time, as Kafka's RLMTask does.

The two objects go up at the same time, so a copy costs one data upload plus nothing
on its critical path but the scan. A copy is complete when *both* exist: rebuilding from
the bucket treats a manifest without its ``.log`` (or the reverse) as an interrupted
attempt. The manifest (``.rli``, layout and checks in :mod:`tiered_log.remote.manifest`)
carries the segment's facts, its own indexes and its remoteLogIndex entries, so the
bucket alone is enough to rebuild; a manifest that fails its checks is made again from
its data object, and a range that cannot be (its data damaged too) answers
RemoteCorruptionError while the rest of the log serves.

A failed attempt (including a damaged local segment, found by the scan) is journaled
DELETE_STARTED and its objects deleted (DELETE_FINISHED);
an attempt interrupted by a crash is found as COPY_STARTED on the next open and cleaned
up the same way before it is retried under a new id. So each segment ends with exactly
one copy and no orphaned objects.

Reads of remote offsets look up the chunk in the remote-index files and fetch it with a
ranged GET, coalescing consecutive chunks of one object into one request of up to
``fetch_bytes`` and prefetching ahead of a sequential reader; chunks go through a
bounded on-disk LRU cache. Every record's checksum is verified; a corrupt chunk raises
RemoteCorruptionError and is dropped from the cache.

Thread-safety: copy, delete, truncate and rebuild run under one lock (the shipper and
the owning log's control calls); reads are lock-free and may run from any thread.
Fetches and copy helpers run on thread pools shared by every log of the process
(:func:`shared_pool`), so threads stay bounded however many partitions a node holds.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..errors import (
    CorruptIndexError,
    CorruptRecordError,
    DataLossError,
    RemoteCorruptionError,
    RemoteObjectNotFoundError,
    RemoteStorageError,
    TieredLogError,
)
from ..format import naming
from ..format.records import (
    HEADER_SIZE,
    Record,
    batch_header,
    batch_table,
    decode_records,
    first_timestamp,
    rebatch,
)
from ..format.remote_index import RemoteLogIndexEntry
from ..local.segment import SegmentInfo, write_atomic
from .cache import ChunkCache
from .index_files import RemoteIndexFiles
from .manifest import (
    COMMITTED,
    chunk_entries,
    clip_entries,
    decode_manifest,
    encode_manifest,
    repair_manifest,
)
from .metadata import CopyJournal, CopyState, RemoteMeta, RemoteSegment, new_segment_id
from .storage import ObjectInfo, RemoteStorage

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TierConfig:
    """Settings of a log's remote tier. ``None`` (or -1) retention means forever."""

    remote_enabled: bool = True
    local_retention_bytes: int | None = None
    local_retention_ms: int | None = None
    retention_bytes: int | None = None
    retention_ms: int | None = None
    chunk_bytes: int = 1 << 20
    fetch_bytes: int = 8 << 20
    prefetch_bytes: int = 32 << 20
    cache_bytes: int = 256 << 20
    upload_bytes_per_sec: int | None = None
    fetch_bytes_per_sec: int | None = None
    fetch_max_wait_ms: int = 5000  # a reader's wait for the bucket (remote/fetch_wait.py)
    copies_in_flight: int = 2
    ship_interval_ms: int = 500
    index_rotate_bytes: int = 16 << 20
    index_rotate_ms: int = 7 * 24 * 3600 * 1000

    def __post_init__(self) -> None:
        from ..errors import InvalidArgumentError

        for name in ("local_retention_bytes", "local_retention_ms", "retention_bytes",
                     "retention_ms", "upload_bytes_per_sec", "fetch_bytes_per_sec"):
            v = getattr(self, name)
            if v == -1:
                object.__setattr__(self, name, None)
            elif v is not None and (not isinstance(v, int) or v < 0):
                raise InvalidArgumentError(f"{name} must be -1 or a non-negative integer, got {v!r}")
        for name in ("chunk_bytes", "fetch_bytes", "prefetch_bytes", "cache_bytes",
                     "copies_in_flight", "ship_interval_ms", "index_rotate_bytes",
                     "index_rotate_ms", "fetch_max_wait_ms"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise InvalidArgumentError(f"{name} must be a positive integer, got {v!r}")


FETCH_THREADS = 16
"""Threads fetching remote chunks, shared by every log of the process (a log's own GETs in
flight are bounded by its prefetch window: ``prefetch_bytes / fetch_bytes`` + 1)."""
COPY_THREADS = 8
"""Threads that upload segments and their manifests, shared by every log of the process
(a log has at most ``copies_in_flight`` copies, two uploads each, in flight)."""

_pools: dict[str, ThreadPoolExecutor] = {}
_pools_lock = threading.Lock()


def shared_pool(name: str, workers: int) -> ThreadPoolExecutor:
    """The process-wide thread pool ``name`` (created on first use; its threads start as
    work arrives and live as long as the process). Thread-safe."""
    with _pools_lock:
        pool = _pools.get(name)
        if pool is None:
            pool = _pools[name] = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
        return pool


class RateLimiter:
    """A token bucket of bytes per second (a burst of one second's worth);
    ``consume(n)`` sleeps as needed: it returns once the bytes taken so far fit the rate.
    ``None`` is unlimited. One limiter may serve many logs (a node's, see
    :class:`TierLimits`). ``clock``/``sleep`` are the time source and the wait (default:
    the monotonic clock, and a wait on the caller's ``cancel`` event). Thread-safe:
    concurrent callers queue up, each waiting for its own share.
    """

    def __init__(self, bytes_per_sec: int | None, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], object] | None = None) -> None:
        self.rate = bytes_per_sec
        self._clock, self._sleep = clock, sleep
        self._never = threading.Event()
        self._lock = threading.Lock()
        self._tokens = float(bytes_per_sec or 0)
        self._last = clock()
        self.waiting = 0
        """Callers waiting right now."""

    def consume(self, n: int, cancel: threading.Event | None = None) -> float:
        """Take ``n`` bytes; returns the seconds it meant to wait for them. Setting
        ``cancel`` ends the wait (a log that is closing does not sit out a slow quota);
        with ``cancel`` already set it does not wait at all."""
        if not self.rate or n <= 0 or (cancel is not None and cancel.is_set()):
            return 0.0
        with self._lock:
            now = self._clock()
            self._tokens = min(float(self.rate), self._tokens + (now - self._last) * self.rate)
            self._last = now
            self._tokens -= n
            wait = -self._tokens / self.rate if self._tokens < 0 else 0.0
            if wait > 0:
                self.waiting += 1
        if wait > 0:
            try:
                if self._sleep is not None:
                    self._sleep(wait)
                else:
                    (cancel or self._never).wait(wait)
            finally:
                with self._lock:
                    self.waiting -= 1
        return wait


@dataclass(frozen=True)
class TierLimits:
    """Rate limits several logs share: a node's, as Kafka's broker-wide remote copy and
    fetch quotas (the service gives every partition its node's). A log opened without
    them limits itself by its :class:`TierConfig`."""

    upload: RateLimiter
    fetch: RateLimiter

    @classmethod
    def of(cls, upload_bytes_per_sec: int | None, fetch_bytes_per_sec: int | None) -> TierLimits:
        return cls(RateLimiter(upload_bytes_per_sec), RateLimiter(fetch_bytes_per_sec))


@dataclass
class TierStats:
    """Counters of one remote tier (read by describe and /metrics)."""

    uploaded_bytes: int = 0
    uploaded_segments: int = 0
    copy_failures: int = 0
    remote_fetch_bytes: int = 0
    remote_fetch_requests: int = 0
    remote_fetch_errors: int = 0
    remote_fetch_throttled_ms: int = 0
    """Time fetches waited for the fetch quota (``fetch_bytes_per_sec``)."""
    deleted_segments: int = 0


LOCATION_FILE = "location.json"
"""In ``<log dir>/remote/``: the log id and the remote tier's URL (see :func:`read_location`)."""


def read_location(log_dir: Path) -> dict[str, str | None] | None:
    """What a log directory records about its remote tier: ``log_id``, ``url`` (e.g.
    ``s3://bucket/prefix``), ``endpoint_url`` and ``region`` (None for a local directory
    store); None if nothing (or nothing readable) is recorded."""
    try:
        d = json.loads((log_dir / naming.REMOTE_DIR / LOCATION_FILE).read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(d, dict) or not isinstance(d.get("url"), str):
        return None
    return {k: (str(d[k]) if d.get(k) is not None else None)
            for k in ("log_id", "url", "endpoint_url", "region")}


@dataclass(frozen=True, slots=True)
class CopyAttempt:
    """One segment's copy in progress (:meth:`RemoteTier.start_copy`): its COPY_STARTED
    record and the futures of its two uploads."""

    segment: RemoteSegment
    upload: Future[None]
    manifest: Future[tuple[RemoteSegment, list[RemoteLogIndexEntry]]]

    def futures(self) -> list[Future[Any]]:
        return [self.upload, self.manifest]


class RemoteTier:
    """The remote tier of one log; see the module docstring."""

    def __init__(self, log_dir: Path, log_id: str, storage: RemoteStorage, config: TierConfig,
                 limits: TierLimits | None = None) -> None:
        self.log_id = naming.validate_log_id(log_id)
        self.storage = storage
        self.config = config
        self.dir = log_dir / naming.REMOTE_DIR
        self.dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self.stats = TierStats()
        self.journal = CopyJournal(self.dir / "segments.jsonl")
        self.meta = self._load_meta()
        self.damage: dict[str, str] = {}
        """Finished copies (by id) whose range cannot be read, and why: their manifest and
        data object are damaged. Reads there answer RemoteCorruptionError."""
        self.index = RemoteIndexFiles(self.dir / "index", rotate_bytes=config.index_rotate_bytes,
                                      rotate_ms=config.index_rotate_ms)
        self._prefetch_window = max(config.chunk_bytes, min(config.prefetch_bytes,
                                                            config.cache_bytes // 2))
        # A window ending inside an object takes the object's rest too when it is at most
        # this (see _window); within half the cache, as the window itself.
        self._window_tail = min(config.fetch_bytes,
                                max(0, config.cache_bytes // 2 - self._prefetch_window))
        # Prefetched chunks also wait in memory for their first read (the window, its
        # tail and one group in flight): a sequential reader does not read back what was
        # just written.
        self.cache = ChunkCache(self.dir / "cache", config.cache_bytes,
                                memory_bytes=self._prefetch_window + self._window_tail
                                + config.fetch_bytes)
        limits = limits or TierLimits.of(config.upload_bytes_per_sec, config.fetch_bytes_per_sec)
        self.limiter = limits.upload
        # Bytes fetched from the bucket (KIP-956's remote fetch quota): a throttled fetch
        # waits in its pool thread, so a catch-up reader's GETs, checksum passes and cache
        # writes are spread out instead of competing with producers all at once.
        self.fetch_limiter = limits.fetch
        self._closing = threading.Event()  # set: this log's waits for the limits end
        self._pool = shared_pool("remote-fetch", FETCH_THREADS)
        self._copy_pool = shared_pool("remote-copy", COPY_THREADS)
        self._copy_helpers: set[Future[Any]] = set()  # this log's, for close()
        self._inflight: dict[tuple[str, int], Future[None]] = {}
        self._persisting: set[Future[None]] = set()  # chunk cache file writes
        self._inflight_lock = threading.RLock()  # re-entered by done callbacks of finished futures
        self._finished: list[RemoteSegment] = []
        self.needs_index_rebuild = False
        if self.journal.damaged:
            self._recover_journal()
        self._refresh()
        self._record_location()
        self.needs_index_rebuild = self.needs_index_rebuild or bool(self.index.problems()) or (
            self.index.last_offset != self._expected_index_last()
        )

    # ---- state ---------------------------------------------------------------------------

    def _record_location(self) -> None:
        """Remember the log id and where its remote tier lives (``remote/location.json``),
        so tools opening the directory later (``tiered-log describe``) find the bucket.
        Written only when it changes; no credentials are ever recorded."""
        loc = {"log_id": self.log_id, "url": self.storage.url,
               "endpoint_url": getattr(self.storage, "endpoint_url", None),
               "region": getattr(self.storage, "region", None)}
        if read_location(self.dir.parent) != loc:
            write_atomic(self.dir / LOCATION_FILE, json.dumps(loc, sort_keys=True).encode())

    def _refresh(self) -> None:
        self._finished = self.journal.finished()
        for s in self._finished:
            if s.unreadable and s.id not in self.damage:
                self.damage[s.id] = (
                    f"remote segment {s.id} at offsets [{s.base_offset}, {s.next_offset}) was "
                    "found with its manifest and its data object damaged; both are kept in "
                    "the bucket as they are")

    def _expected_index_last(self) -> int:
        fin = self._finished
        return self.served_end(fin[-1]) - 1 if fin else -1

    def served_end(self, seg: RemoteSegment) -> int:
        """One past the last offset ``seg`` serves: its next offset, or its clip when a
        truncation cut it (the objects keep the records above the clip; nothing reads
        them). Every bound on what a remote segment serves goes through here."""
        return min(seg.next_offset, self.meta.clips.get(seg.id, seg.next_offset))

    @property
    def finished_segments(self) -> list[RemoteSegment]:
        return list(self._finished)

    @property
    def has_data(self) -> bool:
        return self.remote_end > self.start_offset

    @property
    def start_offset(self) -> int:
        """First offset the remote tier serves (log start as moved by retention)."""
        fin = self._finished
        if not fin:
            return self.meta.log_start_offset
        return max(self.meta.log_start_offset, fin[0].base_offset)

    @property
    def remote_end(self) -> int:
        """One past the last offset the remote tier serves (0 if it holds nothing)."""
        fin = self._finished
        if not fin:
            return self.meta.log_start_offset
        return self.served_end(fin[-1])

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._finished)

    @property
    def max_timestamp(self) -> int:
        return max((s.max_timestamp for s in self._finished), default=-1)

    def _keys(self, seg: RemoteSegment) -> list[str]:
        return [naming.segment_object_key(self.log_id, seg.base_offset, seg.id, sfx)
                for sfx in naming.SEGMENT_OBJECT_SUFFIXES]

    def _save_meta(self) -> None:
        self.meta.save(self.dir / "meta.json")
        self.storage.put(naming.meta_object_key(self.log_id), self.meta.to_bytes())

    # ---- copying -------------------------------------------------------------------------

    def copy_segment(self, seg: SegmentInfo, progress: Callable[[int], None] | None = None) -> RemoteSegment:
        """Copy one sealed local segment (see the module docstring for the steps)."""
        return self.finish_copy(self.start_copy(seg, progress))

    def start_copy(self, seg: SegmentInfo,
                   progress: Callable[[int], None] | None = None) -> CopyAttempt:
        """Journal COPY_STARTED and start the two uploads (data and manifest) in the copy
        pool; :meth:`finish_copy` (or :meth:`abandon_copy`) must follow. ``progress(n)``
        is called from the upload thread with the bytes sent so far."""
        with self._lock:
            with open(seg.store_path, "rb") as f:
                head = f.read(HEADER_SIZE + 8)
            # Unverified here: the manifest's scan verifies every batch before the copy ends.
            first_ts = first_timestamp(head) if len(head) >= HEADER_SIZE + 8 else -1
            rs = RemoteSegment(new_segment_id(), seg.base_offset, seg.next_offset, seg.size,
                               first_ts, seg.max_timestamp, CopyState.COPY_STARTED)
            data_key, rli_key = self._keys(rs)
            rs = self.journal.record(rs, CopyState.COPY_STARTED)
            sent = 0

            def on_progress(n: int) -> None:
                nonlocal sent
                self.limiter.consume(n - sent, self._closing)
                sent = n
                if progress is not None:
                    progress(n)

            def upload() -> None:
                self.storage.put_file(data_key, seg.store_path, progress=on_progress)
                if sent < seg.size:
                    self.limiter.consume(seg.size - sent, self._closing)

            def put_manifest() -> tuple[RemoteSegment, list[RemoteLogIndexEntry]]:
                entries = chunk_entries(seg.store_path, seg.size, seg.base_offset,
                                        seg.next_offset, data_key, self.config.chunk_bytes)
                done = replace(rs, chunks=len(entries))
                self.storage.put(rli_key, encode_manifest(
                    done, entries, seg.store_path.with_suffix(naming.INDEX_SUFFIX).read_bytes(),
                    seg.store_path.with_suffix(naming.TIMEINDEX_SUFFIX).read_bytes()))
                return done, entries

            # The scan (CPU) and the manifest upload run beside the data upload.
            attempt = CopyAttempt(rs, self._copy_pool.submit(upload),
                                  self._copy_pool.submit(put_manifest))
            self._copy_helpers |= set(attempt.futures())
            return attempt

    def finish_copy(self, attempt: CopyAttempt) -> RemoteSegment:
        """Wait for an attempt's uploads; journal COPY_FINISHED and append its entries to
        the remote-index files. If an upload failed: clean the attempt up and raise."""
        wait(attempt.futures())
        with self._lock:
            self._copy_helpers -= set(attempt.futures())
            try:
                attempt.upload.result()
                rs, entries = attempt.manifest.result()
            except BaseException:
                self.stats.copy_failures += 1
                self._cleanup_attempt(attempt.segment)
                raise
            rs = self.journal.record(rs, CopyState.COPY_FINISHED)
            self.index.append(entries)
            self._refresh()
            self.stats.uploaded_bytes += rs.size
            self.stats.uploaded_segments += 1
            return rs

    def copy_segments(self, segments: Sequence[SegmentInfo],
                      stop: threading.Event | None = None) -> int:
        """Copy ``segments`` (consecutive, oldest first), up to ``copies_in_flight`` at a
        time, finished in order (see the module docstring); returns how many were
        copied. Stops starting new copies once ``stop`` is set. Raises the first
        failure after abandoning the copies started after the failed one."""
        pending: deque[CopyAttempt] = deque()
        copied = 0
        try:
            for seg in segments:
                if stop is not None and stop.is_set():
                    break
                while len(pending) >= self.config.copies_in_flight:
                    self.finish_copy(pending.popleft())
                    copied += 1
                pending.append(self.start_copy(seg))
            while pending:
                self.finish_copy(pending.popleft())
                copied += 1
        except BaseException:
            for attempt in pending:
                self.abandon_copy(attempt)
            raise
        return copied

    def abandon_copy(self, attempt: CopyAttempt) -> None:
        """Wait for an attempt's uploads and delete what they put (a copy before it in
        the log failed: this one may not be finished ahead of it)."""
        wait(attempt.futures())
        with self._lock:
            self._copy_helpers -= set(attempt.futures())
            self._cleanup_attempt(attempt.segment)

    def _cleanup_attempt(self, rs: RemoteSegment) -> None:
        """Delete an attempt's objects; stays DELETE_STARTED (retried later) if that fails."""
        try:
            rs = self.journal.record(rs, CopyState.DELETE_STARTED)
            self.storage.delete(self._keys(rs))
            self.journal.record(rs, CopyState.DELETE_FINISHED)
            self.journal.forget([rs.id])
        except (RemoteStorageError, OSError) as exc:
            log.warning("cleanup of copy attempt %s of %s deferred: %s", rs.id, self.log_id, exc)

    def cleanup_pending(self) -> int:
        """Finish interrupted attempts: COPY_STARTED (crashed copy) and DELETE_STARTED.

        Returns how many attempts were cleaned up. Raises RemoteStorageError if the
        bucket is unreachable (the journal keeps them for the next try).
        """
        with self._lock:
            done = 0
            for rs in self.journal.segments():
                if rs.state == CopyState.COPY_STARTED:
                    rs = self.journal.record(rs, CopyState.DELETE_STARTED)
                if rs.state == CopyState.DELETE_STARTED:
                    # A crashed put leaves a temp file (directory store) or an unfinished
                    # multipart upload (S3) that no listing shows: discard those too.
                    self.storage.discard_partial(self._keys(rs))
                    self.storage.delete(self._keys(rs))
                    self.journal.record(rs, CopyState.DELETE_FINISHED)
                    self.journal.forget([rs.id])
                    done += 1
            if done:
                self.journal.compact()
            return done

    # ---- retention and truncation ----------------------------------------------------------

    def delete_before(self, offset: int) -> list[RemoteSegment]:
        """Delete remote segments that end at or before ``offset``; move the log start."""
        with self._lock:
            doomed = [s for s in self._finished if self.served_end(s) <= offset]
            if not doomed:
                return []
            new_start = max(self.meta.log_start_offset, self.served_end(doomed[-1]))
            # Record the intent first: readers stop at the new start at once.
            marked = [self.journal.record(s, CopyState.DELETE_STARTED) for s in doomed]
            self.meta.log_start_offset = new_start
            for s in doomed:
                self.meta.clips.pop(s.id, None)
            self._refresh()
            self._save_meta()
            for s in marked:
                self.storage.delete(self._keys(s))
                self.journal.record(s, CopyState.DELETE_FINISHED)
            self.journal.forget([s.id for s in marked])
            self.journal.compact()
            self.index.drop_files_below(new_start)
            self.stats.deleted_segments += len(marked)
            return doomed

    def retention_cutoff(self, local_unshipped_bytes: int, now_ms: int) -> int | None:
        """The offset remote retention would move the log start to, or None."""
        cfg = self.config
        total = self.size_bytes + local_unshipped_bytes
        cut: int | None = None
        for s in self._finished:
            by_time = cfg.retention_ms is not None and s.max_timestamp < now_ms - cfg.retention_ms
            by_size = cfg.retention_bytes is not None and total - s.size >= cfg.retention_bytes
            if not (by_time or by_size):
                break
            cut = self.served_end(s)
            total -= s.size
        return cut

    def truncate(self, offset: int, local_start: int) -> None:
        """Make offsets >= ``offset`` unreadable remotely and delete what lies above it.

        A remote segment wholly at or above ``offset`` is deleted; the one holding
        ``offset`` is deleted too if its data is still local (it will be shipped again),
        and otherwise clipped (the clip is recorded in the remote metadata, and its
        remote-index entries end below it). A segment clipped before at or below
        ``offset`` is left as it is: what it served stays what it serves.
        """
        with self._lock:
            doomed: list[RemoteSegment] = []
            clipped: RemoteSegment | None = None
            for s in self._finished:
                if self.served_end(s) <= offset:
                    continue
                if s.base_offset >= offset or s.base_offset >= local_start:
                    doomed.append(s)
                else:
                    clipped = s
            if not doomed and clipped is None:
                return
            marked = [self.journal.record(s, CopyState.DELETE_STARTED) for s in doomed]
            if clipped is not None:
                self.meta.clips[clipped.id] = offset
            if self.meta.log_start_offset > offset:
                self.meta.log_start_offset = offset
            self._refresh()
            self._save_meta()
            gone = {naming.segment_object_key(self.log_id, s.base_offset, s.id, naming.LOG_SUFFIX)
                    for s in doomed}
            self.index.rewrite(clip_entries(
                [e for e in self.index.all_entries() if e.object_key not in gone], offset))
            for s in marked:
                self.storage.delete(self._keys(s))
                self.journal.record(s, CopyState.DELETE_FINISHED)
            self.journal.forget([s.id for s in marked])
            self.journal.compact()

    # ---- rebuilding ----------------------------------------------------------------------

    def _list_copies(self) -> dict[tuple[int, str], dict[str, ObjectInfo]]:
        """The log's segment objects in the bucket, by copy attempt ``(base, id)`` and
        suffix (one listing)."""
        groups: dict[tuple[int, str], dict[str, ObjectInfo]] = {}
        for info in self.storage.list(naming.segment_objects_prefix(self.log_id)):
            parsed = naming.parse_segment_object_key(info.key)
            if parsed is not None:
                groups.setdefault((parsed[0], parsed[1]), {})[parsed[2]] = info
        return groups

    def _load_manifest(self, base: int, seg_id: str, data_size: int | None = None
                       ) -> tuple[RemoteSegment, list[RemoteLogIndexEntry]] | str:
        """A copy's checked manifest (see :mod:`~tiered_log.remote.manifest`); a damaged
        one is made again from its data object and put back. Returns what is wrong
        (logged) when that fails too: the data object is damaged as well, and both are
        kept as they are. RemoteStorageError if the bucket fails."""
        key = naming.segment_object_key(self.log_id, base, seg_id, naming.RLI_SUFFIX)
        try:
            rs, entries, _, _ = decode_manifest(self.storage.get(key), key, data_size)
            return rs, entries
        except RemoteCorruptionError as exc:
            damage = exc.message
        except RemoteObjectNotFoundError:
            damage = f"manifest {key} is missing"
        log.error("%s: %s; making it again from its data object", self.log_id, damage)
        try:
            rs, entries = repair_manifest(self.storage, key, self.config.chunk_bytes, self.dir)
        except (RemoteCorruptionError, RemoteObjectNotFoundError) as exc:
            log.error("%s: %s (objects kept as they are)", self.log_id, exc.message)
            return f"{damage}; {exc.message}"
        log.warning("%s: manifest %s made again from its data object: offsets [%d, %d)",
                    self.log_id, key, rs.base_offset, rs.next_offset)
        return rs, entries

    def _unreadable(self, base: int, seg_id: str, size: int, end: int) -> RemoteSegment:
        """The journal record of a copy whose manifest and data object are both damaged:
        it stands for offsets ``[base, end)`` (reads there answer RemoteCorruptionError),
        so the log neither shrinks nor hands those offsets out again; no chunks.

        What the damaged manifest's header still claims is taken only where a wrong
        claim does no harm: a larger end (offsets skipped, never reused) and its
        timestamps (timestamp lookups past the range; without them such lookups fail,
        as the answer might lie in the range)."""
        first_ts, max_ts = -1, int(time.time() * 1000)
        key = naming.segment_object_key(self.log_id, base, seg_id, naming.RLI_SUFFIX)
        try:
            # A range: the whole object fails its stored digest, its first line may not.
            head = json.loads(self.storage.get(key, 0, min(4096, self.storage.size(key) - 1))
                              .partition(b"\n")[0])
            end = max(end, int(head["next_offset"]))
            first_ts, max_ts = int(head["first_timestamp"]), int(head["max_timestamp"])
        except (TieredLogError, ValueError, KeyError, TypeError, AttributeError):
            pass
        return RemoteSegment(seg_id, base, max(end, base + 1), size, first_ts, max_ts,
                             CopyState.COPY_FINISHED, unreadable=True)

    def rebuild_index_files(self) -> int:
        """Rewrite the local remote-index files from the ``.rli`` objects of finished copies.

        A damaged manifest is made again from its data object; where that fails its range
        is left out of the index and named in :attr:`damage` (reads there answer
        RemoteCorruptionError), and the rest is indexed. RemoteStorageError if the bucket
        fails (``needs_index_rebuild`` stays set; the shipper's next round tries again)."""
        with self._lock:
            entries: list[RemoteLogIndexEntry] = []
            damage: dict[str, str] = {}
            for rs in self._finished:
                got = self._load_manifest(rs.base_offset, rs.id)
                if isinstance(got, str) or (got[0].base_offset, got[0].next_offset) != (
                        rs.base_offset, rs.next_offset):
                    damage[rs.id] = got if isinstance(got, str) else (
                        f"the manifest of remote segment {rs.id} describes offsets "
                        f"[{got[0].base_offset}, {got[0].next_offset}), its copy "
                        f"[{rs.base_offset}, {rs.next_offset})")
                    continue
                entries.extend(clip_entries(got[1], self.served_end(rs)))
            self.index.rewrite(entries)
            self.damage = damage
            self.needs_index_rebuild = False
            return len(entries)

    def _load_meta(self) -> RemoteMeta:
        """The local remote metadata; if it is damaged, the bucket's copy (the same facts,
        written right after it); CorruptIndexError naming the file if both fail."""
        path = self.dir / "meta.json"
        try:
            return RemoteMeta.load(path)
        except CorruptIndexError as exc:
            log.error("%s: %s is damaged (%s); taking the bucket's copy", self.log_id, path,
                      exc.message)
            try:
                return RemoteMeta.from_bytes(self.storage.get(naming.meta_object_key(self.log_id)))
            except (RemoteStorageError, CorruptIndexError) as exc2:
                raise CorruptIndexError(f"{path} is damaged ({exc.message}) and the bucket's "
                                        f"copy cannot be read: {exc2.message}") from exc2

    def _recover_journal(self) -> None:
        """The copy journal has damaged lines (not a torn last line): find the copies they
        described in the bucket and journal them again, then set the damaged file aside.

        Lines that read are trusted (a DELETE_STARTED copy stays doomed), but a copy
        whose last readable line is COPY_STARTED may have finished in a damaged line. So
        a complete copy in the bucket that is unknown or only started is journaled
        finished when its checked (or remade) manifest fits between the finished copies,
        and kept untouched and logged otherwise; incomplete unknown ones are left for an
        operator (the attempt may have been doomed). CorruptIndexError naming the file if
        the bucket cannot be read, or if the copies then overlap: the partition does not
        open rather than shrink or serve a doubtful range.
        """
        path = self.journal.path
        damaged = self.journal.damaged
        settled = {s.id for s in self.journal.segments() if s.state != CopyState.COPY_STARTED}
        try:
            groups = self._list_copies()
            finished = self.journal.finished()
            recovered = 0
            for (base, seg_id), objs in sorted(groups.items()):
                if seg_id in settled:
                    continue
                if not set(objs) >= COMMITTED:
                    log.warning("%s: copy %s-%s in the bucket is incomplete and named by no "
                                "readable journal line; left as it is", self.log_id, base, seg_id)
                    continue
                size = objs[naming.LOG_SUFFIX].size
                got = self._load_manifest(base, seg_id, size)
                if isinstance(got, str):
                    above = [s.base_offset for s in finished if s.base_offset > base]
                    rs = self._unreadable(base, seg_id, size, min(above, default=base + 1))
                else:
                    rs = got[0]
                if any(self.served_end(s) > rs.base_offset and s.base_offset < rs.next_offset
                       for s in finished):
                    log.error("%s: copy %s-%s [%d, %d) in the bucket overlaps the journal's "
                              "copies; left as it is", self.log_id, base, seg_id,
                              rs.base_offset, rs.next_offset)
                    continue
                finished.append(self.journal.record(rs, CopyState.COPY_FINISHED))
                recovered += 1
        except RemoteStorageError as exc:
            raise CorruptIndexError(
                f"{path} is damaged ({'; '.join(damaged)}) and the bucket, which holds the "
                f"same facts, cannot be read to recover it: {exc.message}") from exc
        finished.sort(key=lambda s: s.base_offset)
        for a, b in itertools.pairwise(finished):  # finished copies tile their range
            if b.base_offset != self.served_end(a):
                raise CorruptIndexError(
                    f"{path} is damaged ({'; '.join(damaged)}); recovered from the bucket, "
                    f"copies {a.id} [{a.base_offset}, {self.served_end(a)}) and {b.id} "
                    f"[{b.base_offset}, {b.next_offset}) "
                    f"{'overlap' if b.base_offset < self.served_end(a) else 'leave a gap'}: "
                    "not opened")
        aside = path.with_name(f"{path.name}.damaged-{int(time.time() * 1000)}")
        os.replace(path, aside)
        self.journal.compact()
        log.error("%s: copy journal %s was damaged (%s); %d copies recovered from the bucket; "
                  "the damaged file is kept as %s", self.log_id, path, "; ".join(damaged),
                  recovered, aside.name)
        self.needs_index_rebuild = True

    def rebuild_from_bucket(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Rebuild journal, metadata and remote-index files from the bucket alone.

        Lists the log's objects once and reads only the small ``.rli`` manifests (never
        segment data, unless a manifest is damaged and must be made again). Deletes
        incomplete attempts (a data object or a manifest alone), copies that end below
        the log start, and exact duplicates of a copy already taken (same offsets, both
        manifests checked). Never deletes because of what another object claims: a copy
        that overlaps another differently is kept in the bucket, left out and logged; a
        copy whose manifest and data are both damaged is kept and journaled as an
        unreadable range (see :meth:`_unreadable`). Returns the number of segments
        recovered. A copy is complete when both its data object and its manifest are there.
        """
        with self._lock:
            try:
                self.meta = RemoteMeta.from_bytes(self.storage.get(naming.meta_object_key(self.log_id)))
            except RemoteObjectNotFoundError:
                self.meta = RemoteMeta()
            groups = self._list_copies()
            complete = sorted(k for k, objs in groups.items() if set(objs) >= COMMITTED)
            orphans = [o.key for k, objs in groups.items() if k not in complete
                       for o in objs.values()]
            segs: list[tuple[RemoteSegment, list[RemoteLogIndexEntry]]] = []
            damaged: list[tuple[int, str, int, str]] = []  # base, id, size, what
            for n, (base, seg_id) in enumerate(complete):
                size = groups[(base, seg_id)][naming.LOG_SUFFIX].size
                got = self._load_manifest(base, seg_id, size)
                if progress is not None:
                    progress(n + 1, len(complete))
                if isinstance(got, str):
                    damaged.append((base, seg_id, size, got))
                    continue
                rs, ents = got
                prev = segs[-1][0] if segs else None
                if rs.next_offset <= self.meta.log_start_offset:
                    orphans.extend(o.key for o in groups[(base, seg_id)].values())  # retention
                elif prev is None or rs.base_offset >= self.served_end(prev):
                    segs.append((rs, ents))
                elif (rs.base_offset, rs.next_offset, rs.size) == (
                        prev.base_offset, prev.next_offset, prev.size):
                    orphans.extend(o.key for o in groups[(base, seg_id)].values())  # a duplicate
                else:
                    log.error("%s: copy %s-%s [%d, %d) overlaps copy %s [%d, %d); both kept in "
                              "the bucket, the first is served", self.log_id, base, seg_id,
                              rs.base_offset, rs.next_offset, prev.id, prev.base_offset,
                              prev.next_offset)
            if orphans:
                self.storage.delete(orphans)
            for rs, _ in segs:
                self.journal.record(rs, CopyState.COPY_FINISHED)
            for base, seg_id, size, _what in damaged:
                if base < self.meta.log_start_offset:
                    continue
                above = [r.base_offset for r, _ in segs if r.base_offset > base]
                taken = [r for r, _ in segs if r.base_offset <= base < self.served_end(r)]
                if taken:
                    log.error("%s: damaged copy %s-%s lies inside copy %s; kept in the bucket, "
                              "not served", self.log_id, base, seg_id, taken[0].id)
                    continue
                self.journal.record(self._unreadable(base, seg_id, size,
                                                     min(above, default=base + 1)),
                                    CopyState.COPY_FINISHED)
            self.meta.save(self.dir / "meta.json")
            self._refresh()
            self.damage = {seg_id: what for _, seg_id, _, what in damaged}
            self.index.rewrite([e for rs, ents in segs
                                for e in clip_entries(ents, self.served_end(rs))])
            self.needs_index_rebuild = False
            return len(segs)

    # ---- reading (any thread) ------------------------------------------------------------

    def _fetch_group(self, group: Sequence[RemoteLogIndexEntry]) -> None:
        """One ranged GET covering consecutive chunks of one object; caches each chunk."""
        first, last = group[0], group[-1]
        start, end = first.position, last.position + last.data_length
        self._fetch_quota(end - start)
        try:
            blob = self.storage.get(first.object_key, start, end)
        except RemoteStorageError:
            self.stats.remote_fetch_errors += 1
            raise
        self.stats.remote_fetch_requests += 1
        self.stats.remote_fetch_bytes += len(blob)
        if len(blob) != end - start:
            self.stats.remote_fetch_errors += 1
            raise RemoteCorruptionError(
                f"{first.object_key}: asked for {end - start} bytes at {start}, got {len(blob)}"
            )
        chunks = [(e, blob[e.position - start : e.position - start + e.data_length])
                  for e in group]
        for e, data in chunks:
            self.cache.hold(e.object_key, e.position, data)
        # The files are written after this fetch counts as done: readers take the chunks
        # from memory and do not wait for the disk.
        fut = self._pool.submit(self._persist, chunks)
        with self._inflight_lock:
            self._persisting.add(fut)
        fut.add_done_callback(self._persisted)

    def _fetch_quota(self, n: int) -> None:
        """Wait until ``n`` more bytes from the bucket fit the fetch quota (not past this
        log's close), counting the time waited."""
        self.stats.remote_fetch_throttled_ms += round(
            1000 * self.fetch_limiter.consume(n, self._closing))

    def _persisted(self, fut: Future[None]) -> None:
        with self._inflight_lock:
            self._persisting.discard(fut)

    def _persist(self, chunks: list[tuple[RemoteLogIndexEntry, bytes]]) -> None:
        for e, data in chunks:
            self.cache.persist(e.object_key, e.position, data)

    def _schedule(self, entries: Sequence[RemoteLogIndexEntry]) -> dict[tuple[str, int], Future[None]]:
        """Start fetches for the entries not cached or in flight, coalesced by object."""
        futs: dict[tuple[str, int], Future[None]] = {}
        with self._inflight_lock:
            group: list[RemoteLogIndexEntry] = []

            def flush() -> None:
                if not group:
                    return
                g = list(group)
                fut = self._pool.submit(self._fetch_group, g)
                for e in g:
                    self._inflight[(e.object_key, e.position)] = fut
                    futs[(e.object_key, e.position)] = fut

                def done(_: Future[None], g: list[RemoteLogIndexEntry] = g) -> None:
                    with self._inflight_lock:
                        for e in g:
                            self._inflight.pop((e.object_key, e.position), None)

                fut.add_done_callback(done)
                group.clear()

            size = 0
            for e in entries:
                k = (e.object_key, e.position)
                if k in self._inflight:
                    flush()
                    size = 0
                    futs[k] = self._inflight[k]
                    continue
                if self.cache.contains(e.object_key, e.position, e.data_length):
                    flush()
                    size = 0
                    continue
                contiguous = group and group[-1].object_key == e.object_key and (
                    group[-1].position + group[-1].data_length == e.position)
                if group and (not contiguous or size + e.data_length > self.config.fetch_bytes):
                    flush()
                    size = 0
                group.append(e)
                size += e.data_length
            flush()
        return futs

    def _covered(self, entries: Sequence[RemoteLogIndexEntry]) -> int:
        """Bytes of the leading ``entries`` already cached or being fetched."""
        n = 0
        with self._inflight_lock:
            for e in entries:
                if (e.object_key, e.position) not in self._inflight and not self.cache.contains(
                        e.object_key, e.position, e.data_length):
                    break
                n += e.data_length
        return n

    def _window(self, entry: RemoteLogIndexEntry) -> list[RemoteLogIndexEntry]:
        """The chunks after ``entry`` that a sequential reader at it prefetches: a window
        of ``prefetch_bytes`` (at most half the cache), and, when the window ends inside
        an object, the rest of that object if it is at most ``_window_tail`` bytes. The
        rest would otherwise go out later as a small ranged GET of its own; a store that
        reads the whole object for every ranged GET (moto's server) pays a whole object
        for it, and S3 bills it as a request like any other.
        """
        ahead: list[RemoteLogIndexEntry] = []
        rest: list[RemoteLogIndexEntry] = []
        budget, rest_bytes, key = self._prefetch_window, 0, entry.object_key
        for e in self.index.entries_from(entry.last_offset + 1):
            if budget > 0:
                ahead.append(e)
                budget -= e.data_length
                key = e.object_key
                continue
            if e.object_key != key:
                break  # the window's last object ends here: its rest is all in ``rest``
            rest_bytes += e.data_length
            if rest_bytes > self._window_tail:
                return ahead
            rest.append(e)
        return ahead + rest

    def _chunk(self, entry: RemoteLogIndexEntry) -> bytes:
        """The bytes of one chunk: from the cache, an in-flight fetch, or a new fetch.

        Also prefetches the following chunks in the background: up to ``prefetch_bytes``,
        but never more than half the chunk cache (prefetched chunks wait there to be read:
        a window larger than the cache would evict them before the reader gets to them
        and fetch them twice).
        """
        data = self.cache.get(entry.object_key, entry.position, entry.data_length)
        ahead = self._window(entry)
        window = self._prefetch_window
        if data is None:
            futs = self._schedule([entry, *ahead])
            fut = futs.get((entry.object_key, entry.position))
            if fut is not None:  # waited for at most fetch_max_wait_ms (quota waits aside)
                from .fetch_wait import wait_for_fetch

                wait_for_fetch(fut, self.config.fetch_max_wait_ms,
                               lambda: self.fetch_limiter.waiting > 0,
                               f"{entry.object_key} bytes {entry.position}+{entry.data_length}")
            data = self.cache.get(entry.object_key, entry.position, entry.data_length)
            if data is None:  # evicted at once (a tiny cache): fetch directly
                self._fetch_quota(entry.data_length)
                blob = self.storage.get(entry.object_key, entry.position,
                                        entry.position + entry.data_length)
                self.stats.remote_fetch_bytes += len(blob)
                data = blob
        elif ahead and self._covered(ahead) < window // 2:
            # Top the window up only once half of it is consumed: then the uncached tail
            # goes out as a few requests of up to fetch_bytes, not one small request per
            # chunk read (on stores that read the whole object per ranged GET, as moto's
            # server does, many small requests cost far more than few large ones).
            self._schedule(ahead)
        if len(data) >= 20 and batch_header(data)[0] != entry.first_offset:
            self.cache.discard(entry.object_key, entry.position, entry.data_length)
            raise RemoteCorruptionError(
                f"chunk at {entry.position} of {entry.object_key} does not start at offset "
                f"{entry.first_offset}"
            )
        return data

    def _remote_end_above(self, offset: int) -> int:
        """The remote end, if ``offset`` is in the remote tier; else DataLossError."""
        end = self.remote_end
        if offset < self.start_offset or offset >= end:
            raise DataLossError(
                f"offset {offset} is not in the remote tier [{self.start_offset}, {end})"
            )
        return end

    def _chunks_from(self, offset: int) -> Iterator[tuple[RemoteLogIndexEntry, bytes]]:
        """The chunk holding ``offset`` and the ones after it, in order, each with its
        bytes (fetched when the caller gets to it). A hole in the remote index or a chunk
        that cannot be had ends the chunks after the first; at the first, it raises (see
        :meth:`_hole`), so a page stops before damage and the next read names it."""
        expect = offset
        for entry in self.index.entries_from(offset):
            if entry.last_offset < expect:
                continue
            if entry.first_offset > expect:
                if expect > offset:
                    return  # a page stops before a hole; a read starting there gets the error
                raise self._hole(expect)
            try:
                data = self._chunk(entry)
            except RemoteStorageError:
                if expect > offset:
                    return  # likewise before a chunk that cannot be fetched or is damaged
                raise
            yield entry, data
            expect = entry.last_offset + 1
        if offset == expect < self.remote_end:
            raise self._hole(expect)

    def _hole(self, offset: int) -> TieredLogError:
        """The error for a remote ``offset`` the remote index has no chunk for: a range
        found damaged (RemoteCorruptionError naming it), index files still to be rebuilt
        from the bucket (retriable RemoteStorageError), a hole in a finished copy
        (RemoteCorruptionError; the index is rebuilt at the next round), or else
        DataLossError."""
        seg = next((s for s in self._finished
                    if s.base_offset <= offset < self.served_end(s)), None)
        if seg is not None and seg.id in self.damage:
            return RemoteCorruptionError(
                f"offsets [{seg.base_offset}, {self.served_end(seg)}) of the remote tier "
                f"cannot be read: {self.damage[seg.id]}")
        if self.needs_index_rebuild:
            return RemoteStorageError(f"offset {offset}: the remote index of {self.log_id} is "
                                      "being rebuilt from the bucket; try again", retriable=True)
        if seg is not None:
            self.needs_index_rebuild = True
            return RemoteCorruptionError(
                f"offset {offset} of remote segment {seg.id} [{seg.base_offset}, "
                f"{self.served_end(seg)}) is missing from the remote index files (rebuilt "
                "from the bucket at the next round)")
        return DataLossError(f"offset {offset} is missing from the remote index")

    def read_range(self, offset: int, max_records: int, max_bytes: int) -> list[Record]:
        """Verified records from the remote tier, from ``offset`` to at most the remote end."""
        end = self._remote_end_above(offset)
        out: list[Record] = []
        budget = max_bytes
        for entry, data in self._chunks_from(offset):
            try:
                recs, _, used = decode_records(data, 0, len(data), start_offset=offset,
                                              max_records=max_records - len(out),
                                              max_bytes=budget if out else max_bytes)
            except CorruptRecordError as exc:
                self.cache.discard(entry.object_key, entry.position, entry.data_length)
                self.stats.remote_fetch_errors += 1
                if out:
                    break  # the page stops before the damaged chunk
                raise RemoteCorruptionError(f"{entry.object_key}: {exc}") from exc
            stop = min(end, entry.last_offset + 1)  # a clipped chunk holds records above it
            recs = [r for r in recs if r.offset < stop]
            if out and used > budget:
                break
            out.extend(recs)
            budget -= used
            if not recs or len(out) >= max_records or budget <= 0 or recs[-1].offset + 1 >= end:
                break
            offset = recs[-1].offset + 1
            if offset <= entry.last_offset:
                break  # a limit stopped us inside the chunk
        return out

    def read_batches(self, offset: int, max_records: int, max_bytes: int) -> tuple[bytes, int]:
        """Stored batches from the remote tier as they are, for a binary fetch: ``(data,
        next_offset)``. The first batch is the one holding ``offset`` (it may start below
        it, as a local binary fetch's does); whole batches follow while fewer than
        ``max_records`` records from ``offset`` and fewer than ``max_bytes`` bytes were
        taken (the first always). Every batch of a chunk read is verified
        (RemoteCorruptionError, the chunk dropped from the cache). A batch reaching past
        the remote end (a truncation inside it) is cut: its records below the end are
        batched again. Nothing is decoded otherwise: a consumer catching up from the
        archive costs the server a GET and a checksum pass, not a decode and re-encode.
        """
        end = self._remote_end_above(offset)
        parts: list[bytes | memoryview] = []
        taken = 0
        cur = offset
        for entry, data in self._chunks_from(offset):
            batches, verified = batch_table(data, entry.first_offset)
            if verified != len(data) or not batches:
                self.cache.discard(entry.object_key, entry.position, entry.data_length)
                self.stats.remote_fetch_errors += 1
                if parts:
                    break  # the page stops before the damaged chunk
                raise RemoteCorruptionError(
                    f"{entry.object_key}: the chunk at byte {entry.position} does not verify "
                    f"past byte {verified} of {len(data)}")
            stop = min(end, entry.last_offset + 1)  # a clipped chunk holds records above it
            for b in batches:
                after = b.base_offset + b.record_count
                if after <= cur:
                    continue
                if b.base_offset >= stop:
                    break
                if parts and (taken + b.size > max_bytes or cur - offset >= max_records):
                    return b"".join(parts), cur
                part: bytes | memoryview
                if after > stop:  # cut by a truncation: only the records below the cut
                    recs = decode_records(data, b.position, b.position + b.size)[0]
                    part = rebatch([r for r in recs if r.offset < stop])
                    after = stop
                else:
                    part = memoryview(data)[b.position : b.position + b.size]
                parts.append(part)
                taken += len(part)
                cur = after
                if cur >= end:
                    return b"".join(parts), cur
        return b"".join(parts), cur

    def archived_segments(self, log_start: int) -> list[dict[str, Any]]:
        """Finished remote segments holding offsets at or above ``log_start``, clipped by
        truncation, each with its ``.log`` object key (relative to the store) and its
        remoteLogIndex chunks ``[first_offset, last_offset, first_timestamp,
        last_timestamp, position, length]`` (JSON-able): what a reader that fetches from
        the bucket itself (the Spark source) plans from. Reads the index files; any thread.
        """
        out: list[dict[str, Any]] = []
        for s in self.finished_segments:
            nxt = self.served_end(s)
            if nxt <= log_start or nxt <= s.base_offset:
                continue
            key = naming.segment_object_key(self.log_id, s.base_offset, s.id, naming.LOG_SUFFIX)
            chunks = []
            for e in self.index.entries_from(s.base_offset):
                if e.last_offset < s.base_offset:
                    continue
                if e.first_offset >= nxt or e.object_key != key:
                    break
                chunks.append([e.first_offset, e.last_offset, e.first_timestamp, e.last_timestamp,
                               e.position, e.data_length])
            out.append({"base_offset": s.base_offset, "last_offset": nxt - 1, "next_offset": nxt,
                        "first_timestamp": s.first_timestamp, "max_timestamp": s.max_timestamp,
                        "object_key": key, "size": s.size, "chunks": chunks})
        return out

    def offset_for_timestamp(self, ts: int) -> int | None:
        """First remote offset (>= start, < remote end) whose timestamp is >= ``ts``."""
        start, end = self.start_offset, self.remote_end
        if start >= end:
            return None
        entry = self.index.first_entry_at_or_after_time(ts)
        limit = end if entry is None else entry.first_offset
        for s in self._finished:  # the answer may lie in a range that cannot be read
            if (s.id in self.damage and s.base_offset < limit and self.served_end(s) > start
                    and s.max_timestamp >= ts):
                raise RemoteCorruptionError(
                    f"the first offset at or after timestamp {ts} may lie in offsets "
                    f"[{s.base_offset}, {self.served_end(s)}) of the remote tier, which cannot "
                    f"be read: {self.damage[s.id]}")
        if entry is None:
            return None
        offset = max(entry.first_offset, start)
        while offset < end:
            recs = self.read_range(offset, 10_000, 8 << 20)
            if not recs:
                return None
            for r in recs:
                if r.timestamp >= ts:
                    return r.offset
            offset = recs[-1].offset + 1
        return None

    def release_limits(self) -> None:
        """Let this log's uploads and fetches under way run unthrottled from now on
        (closing); other logs sharing the limits keep to them."""
        self._closing.set()

    def close(self) -> None:
        """Cancel this log's queued fetches and wait for its running ones and for their
        chunk cache writes (the thread pools are shared by every log of the process and
        stay up). Fetches waiting for the fetch quota stop waiting."""
        self.release_limits()
        with self._inflight_lock:
            futs: set[Future[Any]] = set(self._inflight.values())
        futs |= self._copy_helpers
        for f in futs:
            f.cancel()
        wait(futs)
        with self._inflight_lock:  # cache writes of finished fetches: let them land
            writes = set(self._persisting)
        wait(writes)
