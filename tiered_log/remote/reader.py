"""Reading one log's archived records from the bucket (Kafka's ``RemoteLogReader``).

Reads of remote offsets look up the chunk in the remote-index files and fetch it with a
ranged GET, coalescing consecutive chunks of one object into one request (a group) of up
to ``fetch_bytes`` and prefetching ahead of a sequential reader; chunks go through a
bounded on-disk LRU cache (:mod:`~tiered_log.remote.cache`), held in memory for their
first read. Where the store can be opened again by another process (a directory or S3),
the GET and the cache file writes run in the tier's worker process
(:mod:`~tiered_log.remote.worker`), off the producers' interpreter; it hands each chunk
over as soon as its file is written, and this process reads the file (the ranges form
names it, unread). Every batch is verified once, where this process reads it to serve
it (never in the worker: damage to a file after its hand-over is caught too); a corrupt
chunk raises RemoteCorruptionError and is dropped from the cache.

A chunk stored compressed or encrypted (:mod:`~tiered_log.remote.chunk_codec`) is
decoded where it is fetched (the worker or the fetch thread), after its stored checksum
is verified; the cache holds it decoded, so everything after the fetch reads plain
batches. An encrypted segment's data key is unwrapped with the node's key ring from
what the node kept of the segment's manifest (:mod:`~tiered_log.remote.data_keys`:
the copies it made and the manifests it read), else from the manifest (one GET per
segment), and kept in memory by object key; it is looked up in the background as soon
as a fetch of the segment is queued (so a prefetched segment's key is at hand when its
fetch starts). A key the ring lacks is a KeyUnavailableError naming it, never a wrong
answer.

Prefetching is a pipeline in read order: a log's groups wait in one queue and at most
:data:`~tiered_log.remote.limits.FETCH_DEPTH` of them are fetched at once, so the chunks
a reader needs next arrive first instead of sharing the bucket's bandwidth with the rest
of the window (a group a reader waits for goes to the front of the queue); each chunk
of a group can be read as soon as it is there. Fetches wait for the fetch quota
(a node's, :class:`~tiered_log.remote.limits.TierLimits`), and a reader waits for its
fetch at most ``fetch_max_wait_ms`` (:mod:`~tiered_log.remote.fetch_wait`). Two read
forms: decoded :class:`~tiered_log.format.records.Record` lists (:meth:`RemoteReader.read_range`)
and the stored batches as they are, for a binary fetch (:meth:`RemoteReader.read_batches`);
the latter's walk (:meth:`RemoteReader.walk_batches`) also says where the batches lie
instead (a :class:`~tiered_log.local.ranges.RangesPage`: the chunk cache's files, checked
where they lie in the page cache; a chunk not on disk yet comes from memory).
A page stops before a hole or damage; a read starting there gets the error.

Thread-safety: reads are lock-free and may run from any thread (fetches run on the
process-wide fetch pool; the queue and the in-flight map are guarded by one lock).
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, InvalidStateError, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..errors import (
    CorruptRecordError,
    DataLossError,
    LogClosedError,
    RemoteCorruptionError,
    RemoteStorageError,
    TieredLogError,
)
from ..format import naming
from ..format.records import (
    HEADER_SIZE,
    FetchData,
    Record,
    batch_header,
    batch_table,
    decode_records,
    rebatch,
)
from ..format.remote_index import RemoteLogIndexEntry
from ..local.files import ReadFd
from ..local.ranges import BytesPage, Page
from .cache import ChunkCache
from .chunk_codec import decode_chunk
from .crypto import KeyRing, KeyUnavailableError
from .fetch_wait import wait_for_fetch
from .limits import FETCH_DEPTH, RateLimiter
from .manifest import check_batch_format, manifest_encryption
from .state import TierState
from .worker import StorageSpec, TierWorker, worker_for

R = TypeVar("R")


@dataclass(eq=False)
class _Group:
    """Consecutive chunks of one object fetched with one ranged GET; ``done[i]``
    completes once chunk ``i`` can be read (or its fetch failed)."""

    entries: list[RemoteLogIndexEntry]
    done: list[Future[None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.done = [Future() for _ in self.entries]


def _settle(fut: Future[None], exc: BaseException | None = None) -> None:
    """Complete ``fut`` (with ``exc``), unless it is complete or cancelled already."""
    try:
        if exc is None:
            fut.set_result(None)
        else:
            fut.set_exception(exc)
    except InvalidStateError:
        pass


class RemoteReader:
    """Reads of one log's remote tier; see the module docstring."""

    def __init__(
        self, state: TierState, fetch_limiter: RateLimiter, pool: ThreadPoolExecutor
    ) -> None:
        self.st = state
        config = state.config
        self._prefetch_window = max(
            config.chunk_bytes, min(config.prefetch_bytes, config.cache_bytes // 2)
        )
        # A window ending inside an object takes the object's rest too when it is at most
        # this (see _window); within half the cache, as the window itself.
        self._window_tail = min(
            config.fetch_bytes, max(0, config.cache_bytes // 2 - self._prefetch_window)
        )
        # Prefetched chunks also wait in memory for their first read (the window, its
        # tail and one group in flight): a sequential reader does not read back what was
        # just written.
        self.cache = ChunkCache(
            state.dir / naming.CHUNK_CACHE_DIR,
            config.cache_bytes,
            memory_bytes=self._prefetch_window + self._window_tail + config.fetch_bytes,
        )
        # Bytes fetched from the bucket (KIP-956's remote fetch quota): a throttled fetch
        # waits in its pool thread, so a catch-up reader's GETs, checksum passes and cache
        # writes are spread out instead of competing with producers all at once.
        self.fetch_limiter = fetch_limiter
        self._pool = pool
        # Per chunk: the future of its fetch, queued or running (one per chunk of a group).
        self._inflight: dict[tuple[str, int], Future[None]] = {}
        self._queue: deque[_Group] = deque()  # groups waiting, in the order they are read
        self._running: set[Future[None]] = set()  # pool tasks of the groups being fetched
        self._persisting: set[Future[None]] = set()  # chunk cache file writes
        self._inflight_lock = threading.RLock()  # re-entered by done callbacks of finished futures
        # Object key -> its data key (None: plain), looked up once: the first caller
        # reads the manifest, later ones wait for its answer.
        self._deks: dict[str, Future[bytes | None]] = {}
        self._deks_lock = threading.Lock()

    def fetch_futures(self) -> set[Future[Any]]:
        """The fetches under way or queued (for the log's close: a queued one can be
        cancelled, a running one is waited for)."""
        with self._inflight_lock:
            return set(self._inflight.values()) | self._running

    def _pump(self) -> None:
        """Start queued groups while fewer than FETCH_DEPTH run (cancelled ones are
        dropped). A group handed to the pool has its chunks' futures running: they
        complete however its task ends (:meth:`_group_ended`)."""
        with self._inflight_lock:
            while len(self._running) < FETCH_DEPTH and self._queue:
                g = self._queue.popleft()
                live = [f.set_running_or_notify_cancel() for f in g.done]
                if not any(live):
                    continue  # the log is closing: nobody waits for it
                try:
                    task = self._pool.submit(self._run_group, g)
                except RuntimeError as exc:  # the pool is shut down (the interpreter exits)
                    for f in g.done:
                        _settle(f, exc)
                    continue
                self._running.add(task)
                task.add_done_callback(functools.partial(self._group_ended, g))

    def _group_ended(self, g: _Group, task: Future[None]) -> None:
        """A group's pool task is done. Cancelled before it ran (the log's close), it
        never completes the group's chunks, which are running already: they fail here,
        or the close and any reader of them would wait for them for ever."""
        if task.cancelled():
            closed = LogClosedError(
                f"{self.st.log_id}: the remote tier closed before the fetch of "
                f"{g.entries[0].object_key} bytes {g.entries[0].position}+ ran"
            )
            for f in g.done:
                _settle(f, closed)
        with self._inflight_lock:
            self._running.discard(task)
        self._pump()

    def _run_group(self, g: _Group) -> None:
        """Fetch one group; every chunk's future completes, with the error if it failed."""
        try:
            self._fetch_group(g.entries, g.done)
        except BaseException as exc:
            for f in g.done:
                _settle(f, exc)
            raise
        for f in g.done:
            _settle(f)

    def cache_writes(self) -> set[Future[None]]:
        """The chunk cache writes of finished fetches (for the log's close)."""
        with self._inflight_lock:
            return set(self._persisting)

    def _data_key(self, object_key: str) -> bytes | None:
        """The data key of the segment ``object_key`` (None: not encrypted, or this
        node has no key ring: an encrypted chunk then fails with :meth:`_no_key`),
        unwrapped from its manifest once and kept. KeyUnavailableError naming the
        key id when the ring lacks it."""
        ring = self.st.config.key_ring
        if ring is None:
            return None
        with self._deks_lock:
            fut = self._deks.get(object_key)
            mine = fut is None
            if fut is None:
                fut = self._deks[object_key] = Future()
        if not mine:
            return fut.result()
        try:
            dek = self._known_key(object_key, ring)
            if dek is None:
                rli = naming.manifest_key_of(object_key)
                found = manifest_encryption(self.st.storage.get(rli), rli)
                dek = None if found is None else ring.unwrap(*found)
                if found is not None:
                    self.st.data_keys.put(object_key, *found)
        except BaseException as exc:
            with self._deks_lock:  # the next reader asks the bucket again
                del self._deks[object_key]
            fut.set_exception(exc)
            raise
        fut.set_result(dek)
        return dek

    def _known_key(self, object_key: str, ring: KeyRing) -> bytes | None:
        """The data key of ``object_key`` unwrapped with ``ring`` from what this node
        kept of its manifest (:mod:`~tiered_log.remote.data_keys`); None when it kept
        nothing, or what it kept no longer unwraps (re-wrapped since, the old key
        removed from the ring): then the manifest is read."""
        found = self.st.data_keys.get(object_key)
        if found is None:
            return None
        try:
            return ring.unwrap(*found)
        except (KeyUnavailableError, RemoteCorruptionError):
            return None

    def _warm_keys(self, groups: Sequence[_Group]) -> None:
        """Look up, in the background, the data keys of the objects of ``groups`` (just
        queued) not known yet: a cold sequential reader then finds each segment's key
        at hand when its fetch starts, instead of reading the manifest first."""
        if self.st.config.key_ring is None:
            return
        with self._deks_lock:
            keys = {g.entries[0].object_key for g in groups} - self._deks.keys()
        for key in keys:
            try:
                self._pool.submit(self._warm_key, key)
            except RuntimeError:  # the pool is shut down: the fetch looks it up itself
                return

    def _warm_key(self, object_key: str) -> None:
        with contextlib.suppress(TieredLogError):  # the fetch that needs it reports it
            self._data_key(object_key)

    def _no_key(self, object_key: str) -> KeyUnavailableError:
        """The error for an encrypted chunk of ``object_key`` read without its data
        key: names the key id its manifest gives (when it can be read)."""
        rli = naming.manifest_key_of(object_key)
        try:
            found = manifest_encryption(self.st.storage.get(rli), rli)
            which = f"encryption key {found[0]!r}" if found else "an encryption key"
        except RemoteStorageError as exc:
            which = f"an encryption key (its manifest cannot be read: {exc.message})"
        return KeyUnavailableError(
            f"{object_key} is encrypted with {which}, and this node has no key ring "
            "(set remote_encryption_key_file to a ring holding it)"
        )

    def _fetch_group(
        self, group: Sequence[RemoteLogIndexEntry], done: Sequence[Future[None]]
    ) -> None:
        """One ranged GET covering consecutive chunks of one object; decodes and caches
        each chunk and completes ``done[i]`` once chunk ``i`` can be read. In a worker
        process where the store allows (:mod:`~tiered_log.remote.worker`: it GETs,
        decodes and writes the cache files; this process only waits)."""
        try:
            self._fetch_decoded(group, done)
        except KeyUnavailableError as exc:
            self.st.stats.remote_fetch_errors += 1
            if self.st.config.key_ring is None:
                raise self._no_key(group[0].object_key) from exc
            raise

    def _fetch_decoded(
        self, group: Sequence[RemoteLogIndexEntry], done: Sequence[Future[None]]
    ) -> None:
        first, last = group[0], group[-1]
        start, end = first.position, last.position + last.data_length
        dek = self._data_key(first.object_key)
        self._fetch_quota(end - start)
        placed = worker_for(self.st.config, self.st.storage)
        if placed is not None:
            self._fetch_in_worker(*placed, group, done, start, end, dek)
            return
        try:
            blob = self.st.storage.get(first.object_key, start, end)
        except RemoteStorageError:
            self.st.stats.remote_fetch_errors += 1
            raise
        self.st.stats.remote_fetch_requests += 1
        self.st.stats.remote_fetch_bytes += len(blob)
        if len(blob) != end - start:
            self.st.stats.remote_fetch_errors += 1
            raise RemoteCorruptionError(
                f"{first.object_key}: asked for {end - start} bytes at {start}, got {len(blob)}"
            )
        try:
            chunks = [
                (
                    e,
                    bytes(
                        decode_chunk(
                            blob[e.position - start : e.position - start + e.data_length],
                            dek,
                            f"{e.object_key} byte {e.position}",
                        )
                    ),
                )
                for e in group
            ]
        except RemoteCorruptionError:
            self.st.stats.remote_fetch_errors += 1
            raise
        for (e, data), f in zip(chunks, done, strict=True):
            self.cache.hold(e.object_key, e.position, data, e.data_length)
            _settle(f)
        # The files are written after this fetch counts as done: readers take the chunks
        # from memory and do not wait for the disk.
        fut = self._pool.submit(self._persist, chunks)
        with self._inflight_lock:
            self._persisting.add(fut)
        fut.add_done_callback(self._persisted)

    def _fetch_in_worker(
        self,
        worker: TierWorker,
        spec: StorageSpec,
        group: Sequence[RemoteLogIndexEntry],
        done: Sequence[Future[None]],
        start: int,
        end: int,
        dek: bytes | None,
    ) -> None:
        cache = self.cache
        for e in group:
            cache.expect(e.object_key, e.position, e.data_length)
        entered = [False] * len(group)

        def on_chunk(i: int, written: bool, size: int) -> None:  # the worker channel's thread
            e = group[i]
            cache.adopt(e.object_key, e.position, e.data_length, written, size)
            entered[i] = True
            # Counted before a reader can have it (it may be done before the fetch is).
            self.st.stats.remote_fetch_requests += i == 0
            self.st.stats.remote_fetch_bytes += e.data_length
            _settle(done[i])

        try:
            worker.fetch(
                spec,
                group[0].object_key,
                start,
                end,
                [(e.position, e.data_length) for e in group],
                cache.directory,
                on_chunk,
                dek,
            )
        except RemoteStorageError:
            self.st.stats.remote_fetch_errors += 1
            raise
        finally:
            for e, ok in zip(group, entered, strict=True):
                if not ok:  # never handed over (the fetch failed): forget the expectation
                    cache.adopt(e.object_key, e.position, e.data_length, False)

    def _fetch_quota(self, n: int) -> None:
        """Wait until ``n`` more bytes from the bucket fit the fetch quota (not past this
        log's close), counting the time waited."""
        self.st.stats.remote_fetch_throttled_ms += round(
            1000 * self.fetch_limiter.consume(n, self.st.closing)
        )

    def _persisted(self, fut: Future[None]) -> None:
        with self._inflight_lock:
            self._persisting.discard(fut)

    def _persist(self, chunks: list[tuple[RemoteLogIndexEntry, bytes]]) -> None:
        for e, data in chunks:
            self.cache.persist(e.object_key, e.position, data, e.data_length)

    def _schedule(
        self, entries: Sequence[RemoteLogIndexEntry], urgent: bool = False
    ) -> dict[tuple[str, int], Future[None]]:
        """Queue fetches for the entries not cached or in flight, coalesced by object,
        in order; their futures (those already in flight too). ``urgent``: a reader
        waits for the first entry now, so its group goes to the front of the queue."""
        futs: dict[tuple[str, int], Future[None]] = {}
        with self._inflight_lock:
            group: list[RemoteLogIndexEntry] = []
            new: list[_Group] = []

            def flush() -> None:
                if not group:
                    return
                g = _Group(list(group))
                new.append(g)
                for e, f in zip(g.entries, g.done, strict=True):
                    k = (e.object_key, e.position)
                    self._inflight[k] = futs[k] = f

                    def drop(f: Future[None], k: tuple[str, int] = k) -> None:
                        with self._inflight_lock:  # only its own: a later fetch may have it now
                            if self._inflight.get(k) is f:
                                del self._inflight[k]

                    f.add_done_callback(drop)
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
                contiguous = (
                    group
                    and group[-1].object_key == e.object_key
                    and (group[-1].position + group[-1].data_length == e.position)
                )
                if group and (not contiguous or size + e.data_length > self.st.config.fetch_bytes):
                    flush()
                    size = 0
                group.append(e)
                size += e.data_length
            flush()
            self._queue.extend(new)
            if urgent and entries:
                self._to_front(entries[0])
        self._warm_keys(new)
        self._pump()
        return futs

    def _to_front(self, entry: RemoteLogIndexEntry) -> None:
        """Move the queued group holding ``entry`` to the front (caller holds the lock)."""
        k = (entry.object_key, entry.position)
        fut = self._inflight.get(k)
        for g in self._queue:
            if fut in g.done:
                self._queue.remove(g)
                self._queue.appendleft(g)
                return

    def _covered(self, entries: Sequence[RemoteLogIndexEntry]) -> int:
        """Bytes of the leading ``entries`` already cached or being fetched."""
        n = 0
        with self._inflight_lock:
            for e in entries:
                if (e.object_key, e.position) not in self._inflight and not self.cache.contains(
                    e.object_key, e.position, e.data_length
                ):
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
        for e in self.st.index.entries_from(entry.last_offset + 1):
            if e.last_offset <= entry.last_offset:
                continue  # past the archive's end the lookup yields the last chunk again
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
        if data is None:
            self._fetch_now(entry, ahead)
            data = self.cache.get(entry.object_key, entry.position, entry.data_length)
            if data is None:  # evicted at once (a tiny cache): fetch directly
                self._fetch_quota(entry.data_length)
                blob = self.st.storage.get(
                    entry.object_key, entry.position, entry.position + entry.data_length
                )
                self.st.stats.remote_fetch_bytes += len(blob)
                where = f"{entry.object_key} byte {entry.position}"
                try:
                    data = bytes(decode_chunk(blob, self._data_key(entry.object_key), where))
                except KeyUnavailableError as exc:
                    if self.st.config.key_ring is None:
                        raise self._no_key(entry.object_key) from exc
                    raise
        else:
            self._top_up(ahead)
        self._check_start(entry, data)
        return data

    def _fetch_now(self, entry: RemoteLogIndexEntry, ahead: list[RemoteLogIndexEntry]) -> None:
        """Fetch ``entry`` (first in the queue) and queue ``ahead``; wait until ``entry``
        can be read, at most fetch_max_wait_ms (quota waits aside)."""
        fut = self._schedule([entry, *ahead], urgent=True).get((entry.object_key, entry.position))
        if fut is not None:
            wait_for_fetch(
                fut,
                self.st.config.fetch_max_wait_ms,
                lambda: self.fetch_limiter.waiting > 0,
                f"{entry.object_key} bytes {entry.position}+{entry.data_length}",
            )

    def _top_up(self, ahead: list[RemoteLogIndexEntry]) -> None:
        """Prefetch ``ahead`` of a cached chunk read, only once half the window is
        consumed: then the uncached tail goes out as a few requests of up to fetch_bytes,
        not one small request per chunk read (on stores that read the whole object per
        ranged GET, as moto's server does, many small requests cost far more than few
        large ones)."""
        if ahead and self._covered(ahead) < self._prefetch_window // 2:
            self._schedule(ahead)

    def _check_start(self, entry: RemoteLogIndexEntry, data: bytes | memoryview) -> None:
        """RemoteCorruptionError (the chunk dropped from the cache) unless ``data``
        starts with the batch the index entry names, and, when its batch headers walk
        to its end, reaches the entry's last offset: a decoded chunk's cache file has no
        stored length to be checked against, so one cut at a batch boundary is found
        here (the batches' checksums are verified where they are read). A chunk of
        tiered_log's former batch format (a bucket written before Kafka's) is refused
        with CorruptRecordError saying so (:func:`~.manifest.check_batch_format`), never
        read as damage or data."""
        try:
            check_batch_format(data, f"chunk at {entry.position} of {entry.object_key}")
        except CorruptRecordError:
            self.cache.discard(entry.object_key, entry.position, entry.data_length)
            raise
        problem = None
        if len(data) >= HEADER_SIZE and batch_header(data)[0] != entry.first_offset:
            problem = f"does not start at offset {entry.first_offset}"
        else:
            pos, last = 0, -1
            while pos + HEADER_SIZE <= len(data):
                base, size, count = batch_header(data, pos)
                if size < HEADER_SIZE:
                    break
                pos, last = pos + size, base + count - 1
            if pos == len(data) and last < entry.last_offset:
                problem = f"ends at offset {last}, before {entry.last_offset}"
        if problem is not None:
            self.cache.discard(entry.object_key, entry.position, entry.data_length)
            raise RemoteCorruptionError(
                f"chunk at {entry.position} of {entry.object_key} {problem}"
            )

    def _chunk_place(
        self, entry: RemoteLogIndexEntry, page: Page[Any]
    ) -> tuple[ReadFd | None, bytes | memoryview]:
        """The bytes of one chunk for ``page``: from its cache file, read through the
        page's reader (``(file, view)``), when the page wants files and the file is on
        disk; else :meth:`_chunk`'s bytes (``(None, bytes)``)."""
        if page.wants_files:
            placed = self._from_file(entry, page)
            if placed is None and not self.cache.contains(
                entry.object_key, entry.position, entry.data_length
            ):  # not fetched yet: fetch it, then read the file handed over
                self._fetch_now(entry, self._window(entry))
                placed = self._from_file(entry, page, top_up=False)  # just queued
            if placed is not None:
                return placed
        return None, self._chunk(entry)

    def _from_file(
        self, entry: RemoteLogIndexEntry, page: Page[Any], top_up: bool = True
    ) -> tuple[ReadFd, bytes | memoryview] | None:
        """The chunk read from its cache file through ``page``'s reader (and the window
        after it topped up, unless not ``top_up``); None when the file is not there (or
        unreadable: then it is dropped)."""
        fd = self.cache.open_file(entry.object_key, entry.position, entry.data_length)
        if fd is None:
            return None
        try:  # the file holds the chunk decoded: its own size, not the stored length
            data = page.reader(fd)(0, os.fstat(fd.fd).st_size)
        except OSError:  # unreadable cache file: drop it, fetch the chunk again
            self.cache.discard(entry.object_key, entry.position, entry.data_length)
            return None
        if top_up:
            self._top_up(self._window(entry))
        self._check_start(entry, data)
        return fd, data

    def _remote_end_above(self, offset: int) -> int:
        """The remote end, if ``offset`` is in the remote tier; else DataLossError."""
        end = self.st.remote_end
        if offset < self.st.start_offset or offset >= end:
            raise DataLossError(
                f"offset {offset} is not in the remote tier [{self.st.start_offset}, {end})"
            )
        return end

    def _chunks_from(
        self,
        offset: int,
        page: Page[Any] | None = None,
    ) -> Iterator[tuple[RemoteLogIndexEntry, ReadFd | None, bytes | memoryview]]:
        """The chunk holding ``offset`` and the ones after it, in order, each with its
        bytes (fetched when the caller gets to it; for a ``page`` that wants files, from
        the cache file where there is one, with that file: see :meth:`_chunk_place`). A
        hole in the remote index or a chunk that cannot be had ends the chunks after the
        first; at the first, it raises (see :meth:`_hole`), so a page stops before damage
        and the next read names it."""
        expect = offset
        for entry in self.st.index.entries_from(offset):
            if entry.last_offset < expect:
                continue
            if entry.first_offset > expect:
                if expect > offset:
                    return  # a page stops before a hole; a read starting there gets the error
                raise self._hole(expect)
            try:
                fd, data = (
                    (None, self._chunk(entry)) if page is None else self._chunk_place(entry, page)
                )
            except RemoteStorageError:
                if expect > offset:
                    return  # likewise before a chunk that cannot be fetched or is damaged
                raise
            yield entry, fd, data
            expect = entry.last_offset + 1
        if offset == expect < self.st.remote_end:
            raise self._hole(expect)

    def _hole(self, offset: int) -> TieredLogError:
        """The error for a remote ``offset`` the remote index has no chunk for: a range
        found damaged (RemoteCorruptionError naming it), index files still to be rebuilt
        from the bucket (retriable RemoteStorageError), a hole in a finished copy
        (RemoteCorruptionError; the index is rebuilt at the next round), or else
        DataLossError."""
        seg = next(
            (s for s in self.st.finished if s.base_offset <= offset < self.st.served_end(s)), None
        )
        if seg is not None and seg.id in self.st.damage:
            return RemoteCorruptionError(
                f"offsets [{seg.base_offset}, {self.st.served_end(seg)}) of the remote tier "
                f"cannot be read: {self.st.damage[seg.id]}"
            )
        if self.st.needs_index_rebuild:
            return RemoteStorageError(
                f"offset {offset}: the remote index of {self.st.log_id} is "
                "being rebuilt from the bucket; try again",
                retriable=True,
            )
        if seg is not None:
            self.st.needs_index_rebuild = True
            return RemoteCorruptionError(
                f"offset {offset} of remote segment {seg.id} [{seg.base_offset}, "
                f"{self.st.served_end(seg)}) is missing from the remote index files (rebuilt "
                "from the bucket at the next round)"
            )
        return DataLossError(f"offset {offset} is missing from the remote index")

    def read_range(self, offset: int, max_records: int, max_bytes: int) -> list[Record]:
        """Verified records from the remote tier, from ``offset`` to at most the remote end."""
        end = self._remote_end_above(offset)
        out: list[Record] = []
        budget = max_bytes
        for entry, _, data in self._chunks_from(offset):
            try:
                recs, _, used = decode_records(
                    data,
                    0,
                    len(data),
                    start_offset=offset,
                    max_records=max_records - len(out),
                    max_bytes=budget if out else max_bytes,
                )
            except CorruptRecordError as exc:
                self.cache.discard(entry.object_key, entry.position, entry.data_length)
                self.st.stats.remote_fetch_errors += 1
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

    def read_batches(
        self, offset: int, max_records: int, max_bytes: int, upto: int | None = None
    ) -> FetchData:
        """Stored batches from the remote tier as they are, for a binary fetch (the same
        :class:`~tiered_log.format.batch.FetchData` a local read returns). The first
        batch is the one holding ``offset`` (it may start below it, as a local read's
        does); whole batches follow while fewer than
        ``max_records`` records from ``offset`` and fewer than ``max_bytes`` bytes were
        taken (the first always). Every batch of a chunk read is verified
        (RemoteCorruptionError, the chunk dropped from the cache). A batch reaching past
        the remote end (a truncation inside it) is cut: its records below the end are
        batched again. Nothing is decoded otherwise: a consumer catching up from the
        archive costs the server a GET and a checksum pass, not a decode and re-encode.
        ``upto`` (a replicated log's high watermark): the page ends before the first batch
        holding an offset at or past it (batches stay whole; the page may be empty).
        """
        return self.walk_batches(offset, max_records, max_bytes, upto, BytesPage(offset))

    def walk_batches(
        self, offset: int, max_records: int, max_bytes: int, upto: int | None, page: Page[R]
    ) -> R:
        """:meth:`read_batches` into ``page``, which decides the result's form (a
        :class:`~tiered_log.local.ranges.RangesPage`: where the batches lie, the chunk
        cache's files where it has them); the same walk, limits and errors."""
        try:
            return self._walk(offset, max_records, max_bytes, upto, page)
        except BaseException:
            page.close()
            raise

    def _walk(
        self, offset: int, max_records: int, max_bytes: int, upto: int | None, page: Page[R]
    ) -> R:
        end = self._remote_end_above(offset)
        cur = offset
        for entry, fd, data in self._chunks_from(offset, page):
            batches, verified = batch_table(data, entry.first_offset)
            if verified != len(data) or not batches or batches[-1].next_offset <= entry.last_offset:
                self.cache.discard(entry.object_key, entry.position, entry.data_length)
                self.st.stats.remote_fetch_errors += 1
                if page.size:
                    break  # the page stops before the damaged chunk
                raise RemoteCorruptionError(
                    f"{entry.object_key}: the chunk at byte {entry.position} does not verify "
                    f"past byte {verified} of {len(data)}"
                )
            stop = min(end, entry.last_offset + 1)  # a clipped chunk holds records above it
            for b in batches:
                after = b.base_offset + b.record_count
                if after <= cur:
                    continue
                if b.base_offset >= stop:
                    break
                if upto is not None and after > upto:
                    return page.result(cur)
                if page.size and (page.size + b.size > max_bytes or cur - offset >= max_records):
                    return page.result(cur)
                if after > stop:  # cut by a truncation: only the records below the cut
                    recs = decode_records(data, b.position, b.position + b.size)[0]
                    again = rebatch([r for r in recs if r.offset < stop])
                    page.add(None, 0, again, 0, len(again))
                    after = stop
                else:
                    page.add(fd, b.position, data, b.position, b.size)
                cur = after
                if cur >= end or (upto is not None and cur >= upto):
                    return page.result(cur)
        return page.result(cur)

    def archived_segments(self, log_start: int) -> list[dict[str, Any]]:
        """Finished remote segments holding offsets at or above ``log_start``, clipped by
        truncation, each with its ``.log`` object key (relative to the store) and its
        remoteLogIndex chunks ``[first_offset, last_offset, first_timestamp,
        last_timestamp, position, length]`` (the stored chunks' places; ``size`` the data
        object's bytes, ``log_bytes`` the segment's own) (JSON-able): what a reader that fetches from
        the bucket itself (the Spark source) plans from. Reads the index files; any thread.
        """
        out: list[dict[str, Any]] = []
        for s in self.st.finished_segments:
            nxt = self.st.served_end(s)
            if nxt <= log_start or nxt <= s.base_offset:
                continue
            key = naming.segment_object_key(self.st.log_id, s.base_offset, s.id, naming.LOG_SUFFIX)
            chunks = []
            for e in self.st.index.entries_from(s.base_offset):
                if e.last_offset < s.base_offset:
                    continue
                if e.first_offset >= nxt or e.object_key != key:
                    break
                chunks.append(
                    [
                        e.first_offset,
                        e.last_offset,
                        e.first_timestamp,
                        e.last_timestamp,
                        e.position,
                        e.data_length,
                    ]
                )
            out.append(
                {
                    "base_offset": s.base_offset,
                    "last_offset": nxt - 1,
                    "next_offset": nxt,
                    "first_timestamp": s.first_timestamp,
                    "max_timestamp": s.max_timestamp,
                    "object_key": key,
                    # The data object's bytes: the stored chunks' end (a compressed or
                    # encrypted segment's differ from its log bytes) where they reach it.
                    "size": chunks[-1][4] + chunks[-1][5]
                    if chunks and nxt == s.next_offset
                    else s.size,
                    "log_bytes": s.size,
                    "chunks": chunks,
                }
            )
        return out

    def offset_for_timestamp(self, ts: int) -> int | None:
        """First remote offset (>= start, < remote end) whose timestamp is >= ``ts``."""
        start, end = self.st.start_offset, self.st.remote_end
        if start >= end:
            return None
        entry = self.st.index.first_entry_at_or_after_time(ts)
        limit = end if entry is None else entry.first_offset
        for s in self.st.finished:  # the answer may lie in a range that cannot be read
            if (
                s.id in self.st.damage
                and s.base_offset < limit
                and self.st.served_end(s) > start
                and s.max_timestamp >= ts
            ):
                raise RemoteCorruptionError(
                    f"the first offset at or after timestamp {ts} may lie in offsets "
                    f"[{s.base_offset}, {self.st.served_end(s)}) of the remote tier, which cannot "
                    f"be read: {self.st.damage[s.id]}"
                )
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
