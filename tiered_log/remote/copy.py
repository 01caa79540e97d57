"""Copying sealed segments to the bucket: KIP-405's copy state machine (Kafka's
``RLMCopyTask``), with its cleanup.

Copying a segment (one unique id per attempt)::

    journal COPY_STARTED(id)
    PUT <base>-<id>.log                           (rate-limited, multipart when large)
      meanwhile, in a helper thread: scan the store (SCAN_WINDOW bytes at a time),
      verifying every batch, cut it into chunks of ~chunk_bytes, and PUT
      <base>-<id>.rli (the manifest, :mod:`~tiered_log.remote.manifest`)
    journal COPY_FINISHED(id)                     (once both PUTs succeeded)
    append the entries to the local remote-index files

A round keeps up to ``copies_in_flight`` (2) copies under way
(:meth:`CopyTask.copy_segments`): the next one's uploads start while the previous one's
finish; each is *finished* (journaled, indexed) strictly in offset order, and if one
fails, those started after it are abandoned (cleaned up like a failed attempt). More in
flight ships faster and costs producers latency; 1 copies one segment at a time, as
Kafka's RLMTask does.

A topic with ``remote_compression`` other than ``none``, or a node with a key ring
(:mod:`~tiered_log.remote.crypto`), ships *encoded* instead: one task scans the store,
encodes each chunk (:mod:`~tiered_log.remote.chunk_codec`: compressed where that pays,
encrypted with a new data key of the segment's own) into a temporary file beside the
store (``<store>.<uuid>.archive.tmp``, removed after; a crash leaves it for the log's
open to delete), PUTs that as the data object, then the manifest (the stored chunks'
entries, ``stored_size``, the codec and the wrapped data key). The upload quota counts
the stored bytes.

The data object is stored in the topic's ``remote_storage_class`` (S3's
``StorageClass``; a directory store ignores it), the manifest in the default class: the
manifests are what a rebuild and the scrubber read first, and are small.

A copy is complete when *both* objects exist. A failed attempt (including a damaged local
segment, found by the scan) is journaled DELETE_STARTED and its objects deleted
(DELETE_FINISHED); an attempt interrupted by a crash is found as COPY_STARTED on the next
open and cleaned up the same way before it is retried under a new id. So each segment
ends with exactly one copy and no orphaned objects. The journal refuses any other
transition (:meth:`~tiered_log.remote.metadata.CopyState.can_become`).

Who may write: the log's shipper round and control calls, under the state's lock; the
uploads run in the process-wide copy pool, whose threads hand the data upload and the
scan to the worker processes (:mod:`~tiered_log.remote.worker`) where the store allows:
off this process's interpreter, so producers do not wait for the GIL behind them. The
fence and the manifest's put (the commit point) stay here.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from typing import Any

from ..errors import RemoteStorageError
from ..format import naming
from ..format.kafka.layout import BASE_TIMESTAMP_AT, HEADER_SIZE
from ..format.remote_index import RemoteLogIndexEntry
from ..local.segment import SegmentInfo
from .crypto import new_data_key
from .limits import RateLimiter
from .manifest import COMMITTED, chunk_entries, encode_manifest, encode_segment
from .metadata import CopyState, RemoteSegment, new_segment_id
from .state import TierState
from .worker import worker_for

log = logging.getLogger(__name__)

ARCHIVE_TMP_SUFFIX = ".archive" + naming.TMP_SUFFIX
"""The suffix of a segment's encoded (compressed or encrypted) copy while it is built,
in the log's remote directory."""


@dataclass(frozen=True, slots=True)
class CopyAttempt:
    """One segment's copy in progress (:meth:`CopyTask.start_copy`): its COPY_STARTED
    record and the futures of its two uploads."""

    segment: RemoteSegment
    upload: Future[None]
    manifest: Future[tuple[RemoteSegment, list[RemoteLogIndexEntry]]]

    def futures(self) -> list[Future[Any]]:
        return [self.upload, self.manifest]


class CopyTask:
    """Copies of one log's sealed segments; see the module docstring."""

    def __init__(self, state: TierState, limiter: RateLimiter, pool: ThreadPoolExecutor) -> None:
        self.st = state
        self.limiter = limiter
        self._copy_pool = pool
        self._copy_helpers: set[Future[Any]] = set()  # this log's, for close()

    def pending_futures(self) -> set[Future[Any]]:
        """The uploads under way (for the log's close)."""
        return set(self._copy_helpers)

    def copy_segment(
        self, seg: SegmentInfo, progress: Callable[[int], None] | None = None
    ) -> RemoteSegment:
        """Copy one sealed local segment (see the module docstring for the steps)."""
        return self.finish_copy(self.start_copy(seg, progress))

    def start_copy(
        self, seg: SegmentInfo, progress: Callable[[int], None] | None = None
    ) -> CopyAttempt:
        """Journal COPY_STARTED and start the two uploads (data and manifest) in the copy
        pool; :meth:`finish_copy` (or :meth:`abandon_copy`) must follow. ``progress(n)``
        is called from the upload thread with the bytes sent so far."""
        with self.st.lock:
            with open(seg.store_path, "rb") as f:
                head = f.read(HEADER_SIZE)
            # The first batch's baseTimestamp (big-endian int64 in its Kafka v2 header).
            # Unverified here: the manifest's scan verifies every batch before the copy ends.
            first_ts = (
                int.from_bytes(head[BASE_TIMESTAMP_AT : BASE_TIMESTAMP_AT + 8], "big", signed=True)
                if len(head) == HEADER_SIZE
                else -1
            )
            rs = RemoteSegment(
                new_segment_id(),
                seg.base_offset,
                seg.next_offset,
                seg.size,
                first_ts,
                seg.max_timestamp,
                CopyState.COPY_STARTED,
                leader_epoch=self.st.leader_epoch,
            )
            fence = self.st.fence
            data_key, rli_key = self.st.keys(rs)
            rs = self.st.journal.record(rs, CopyState.COPY_STARTED)
            sent = 0

            def on_progress(n: int) -> None:
                nonlocal sent
                self.limiter.consume(n - sent, self.st.closing)
                sent = n
                if progress is not None:
                    progress(n)

            placed = worker_for(self.st.config, self.st.storage)
            # The data object goes in the topic's storage class; the manifest (read by
            # every rebuild and scrub) in the default one.
            storage_class = self.st.config.storage_class

            def upload() -> None:
                if placed is not None:
                    worker, spec = placed
                    # The quota is taken before (the worker cannot report as it sends):
                    # the same rate over a segment, paid up front.
                    on_progress(seg.size)
                    worker.upload(spec, data_key, seg.store_path, storage_class)
                    return
                self.st.storage.put_file(
                    data_key, seg.store_path, progress=on_progress, storage_class=storage_class
                )
                if sent < seg.size:
                    self.limiter.consume(seg.size - sent, self.st.closing)

            def put_manifest() -> tuple[RemoteSegment, list[RemoteLogIndexEntry]]:
                args = (
                    seg.store_path,
                    seg.size,
                    seg.base_offset,
                    seg.next_offset,
                    data_key,
                    self.st.config.chunk_bytes,
                )
                entries = placed[0].scan(*args) if placed is not None else chunk_entries(*args)
                done = replace(rs, chunks=len(entries))
                if fence is not None and not fence():  # the commit point: a deposed leader stops
                    raise RemoteStorageError(
                        f"{self.st.log_id}: copy of [{seg.base_offset}, {seg.next_offset}) "
                        f"abandoned: this node no longer leads epoch {rs.leader_epoch}"
                    )
                self.st.storage.put(
                    rli_key,
                    encode_manifest(
                        done,
                        entries,
                        seg.store_path.with_suffix(naming.INDEX_SUFFIX).read_bytes(),
                        seg.store_path.with_suffix(naming.TIMEINDEX_SUFFIX).read_bytes(),
                    ),
                )
                return done, entries

            cfg = self.st.config
            if cfg.compression != "none" or cfg.key_ring is not None:
                dek = new_data_key() if cfg.key_ring is not None else None
                wrapped = cfg.key_ring.wrap(dek) if cfg.key_ring is not None and dek else None

                def encode_and_put() -> tuple[RemoteSegment, list[RemoteLogIndexEntry]]:
                    # In the log's remote directory, not beside the segments: the log's
                    # own directory is the local log's (its open removes every temp
                    # file there, and a live-directory check would take this one for a
                    # leftover); the remote tier's open removes the ones a crash left.
                    tmp = (
                        seg.store_path.parent
                        / naming.REMOTE_DIR
                        / f"{seg.store_path.name}.{uuid.uuid4().hex}{ARCHIVE_TMP_SUFFIX}"
                    )
                    try:
                        args = (
                            seg.store_path,
                            seg.size,
                            seg.base_offset,
                            seg.next_offset,
                            data_key,
                            cfg.chunk_bytes,
                            cfg.compression,
                            dek,
                            tmp,
                        )
                        entries = (
                            placed[0].encode(*args) if placed is not None else encode_segment(*args)
                        )
                        stored = sum(e.data_length for e in entries)
                        if placed is not None:
                            on_progress(stored)  # paid up front, as for a plain upload
                            placed[0].upload(placed[1], data_key, tmp, storage_class)
                        else:
                            self.st.storage.put_file(
                                data_key, tmp, progress=on_progress, storage_class=storage_class
                            )
                            if sent < stored:
                                self.limiter.consume(stored - sent, self.st.closing)
                    finally:
                        tmp.unlink(missing_ok=True)
                    done = replace(rs, chunks=len(entries))
                    if fence is not None and not fence():
                        raise RemoteStorageError(
                            f"{self.st.log_id}: copy of [{seg.base_offset}, {seg.next_offset}) "
                            f"abandoned: this node no longer leads epoch {rs.leader_epoch}"
                        )
                    self.st.storage.put(
                        rli_key,
                        encode_manifest(
                            done,
                            entries,
                            seg.store_path.with_suffix(naming.INDEX_SUFFIX).read_bytes(),
                            seg.store_path.with_suffix(naming.TIMEINDEX_SUFFIX).read_bytes(),
                            stored_size=stored,
                            compression=cfg.compression,
                            encryption=(
                                None
                                if wrapped is None
                                else {"key_id": wrapped[0], "wrapped_key": wrapped[1]}
                            ),
                        ),
                    )
                    if wrapped is not None:
                        self.st.data_keys.put(data_key, *wrapped)
                    return done, entries

                nothing: Future[None] = Future()
                nothing.set_result(None)
                attempt = CopyAttempt(rs, nothing, self._copy_pool.submit(encode_and_put))
                self._copy_helpers |= {attempt.manifest}
                return attempt
            # The scan (CPU) and the manifest upload run beside the data upload.
            attempt = CopyAttempt(
                rs, self._copy_pool.submit(upload), self._copy_pool.submit(put_manifest)
            )
            self._copy_helpers |= set(attempt.futures())
            return attempt

    def finish_copy(self, attempt: CopyAttempt) -> RemoteSegment:
        """Wait for an attempt's uploads; journal COPY_FINISHED and append its entries to
        the remote-index files. If an upload failed: clean the attempt up and raise."""
        wait(attempt.futures())
        with self.st.lock:
            self._copy_helpers -= set(attempt.futures())
            try:
                attempt.upload.result()
                rs, entries = attempt.manifest.result()
            except BaseException:
                self.st.stats.copy_failures += 1
                self._cleanup_attempt(attempt.segment)
                raise
            rs = self.st.journal.record(rs, CopyState.COPY_FINISHED)
            self.st.index.append(entries)
            self.st.refresh()
            below = self.st.sweep_below
            if rs.leader_epoch is not None and (below is None or rs.base_offset < below):
                self._sweep_older_copies(rs)
            self.st.stats.uploaded_bytes += rs.size
            self.st.stats.uploaded_segments += 1
            return rs

    def copy_segments(
        self, segments: Sequence[SegmentInfo], stop: threading.Event | None = None
    ) -> int:
        """Copy ``segments`` (consecutive, oldest first), up to ``copies_in_flight`` at a
        time, finished in order (see the module docstring); returns how many were
        copied. Stops starting new copies once ``stop`` is set. Raises the first
        failure after abandoning the copies started after the failed one."""
        pending: deque[CopyAttempt] = deque()
        copied = 0
        try:
            for seg in segments:
                while len(pending) >= self.st.config.copies_in_flight:
                    self.finish_copy(pending.popleft())
                    copied += 1
                if stop is not None and stop.is_set():
                    break  # asked after the wait: a deposed leader starts nothing more
                pending.append(self.start_copy(seg))
            while pending:
                self.finish_copy(pending.popleft())
                copied += 1
        except BaseException:
            for attempt in pending:
                self.abandon_copy(attempt)
            raise
        return copied

    def _sweep_older_copies(self, rs: RemoteSegment) -> None:
        """A cluster's leader just finished ``rs``: delete any other complete copy of the
        same segment (replicas' segments are the leader's, so a copy of the same range
        has the same base offset) that a leader of an OLDER epoch finished late, after
        it was deposed. A copy of a newer epoch (this node is the deposed one) or one
        still incomplete (maybe a newer leader's, under way) is left alone: the next
        leader's resync keeps the newest. Only for the segments below the log end this
        node had when it took the lead (:attr:`TierState.sweep_below`): a deposed leader's
        copy above it can only be of records never acknowledged (a zombie's), an orphan
        the resync and ``archive reconcile`` remove; a listing per copy of a long
        archive's steady shipping would cost a request each (and, on stores that filter
        a listing by scanning, time growing with the archive). Best effort (logged)."""
        prefix = naming.segment_object_key(self.st.log_id, rs.base_offset, "", "")
        try:
            others: dict[str, dict[str, str]] = {}
            for o in self.st.storage.list(prefix):
                p = naming.parse_segment_object_key(o.key)
                if p is not None and p[1] != rs.id:
                    others.setdefault(p[1], {})[p[2]] = o.key
            for seg_id, objs in others.items():
                if not set(objs) >= COMMITTED or rs.leader_epoch is None:
                    continue
                head = self.st.storage.get(objs[naming.RLI_SUFFIX], 0, 4096).partition(b"\n")[0]
                epoch = json.loads(head).get("leader_epoch")
                if isinstance(epoch, int) and epoch < rs.leader_epoch:
                    log.warning(
                        "%s: deleting copy %s of segment %d: a deposed leader of epoch "
                        "%d finished it late (this is epoch %d)",
                        self.st.log_id,
                        seg_id,
                        rs.base_offset,
                        epoch,
                        rs.leader_epoch,
                    )
                    self.st.storage.delete(list(objs.values()))
        except (RemoteStorageError, ValueError, AttributeError) as exc:
            log.warning(
                "%s: other copies of segment %d not swept: %s", self.st.log_id, rs.base_offset, exc
            )

    def abandon_copy(self, attempt: CopyAttempt) -> None:
        """Wait for an attempt's uploads and delete what they put (a copy before it in
        the log failed: this one may not be finished ahead of it)."""
        wait(attempt.futures())
        with self.st.lock:
            self._copy_helpers -= set(attempt.futures())
            self._cleanup_attempt(attempt.segment)

    def _cleanup_attempt(self, rs: RemoteSegment) -> None:
        """Delete an attempt's objects and any partial upload it left (a torn multipart
        upload that the store's own abort did not remove: no listing shows it, and S3
        bills it); stays DELETE_STARTED (retried later) if that fails."""
        try:
            rs = self.st.journal.record(rs, CopyState.DELETE_STARTED)
            keys = self.st.keys(rs)
            self.st.storage.discard_partial(keys)
            self.st.storage.delete(keys)
            self.st.journal.record(rs, CopyState.DELETE_FINISHED)
            self.st.journal.forget([rs.id])
        except (RemoteStorageError, OSError) as exc:
            log.warning("cleanup of copy attempt %s of %s deferred: %s", rs.id, self.st.log_id, exc)

    def cleanup_pending(self) -> int:
        """Finish interrupted attempts: COPY_STARTED (crashed copy) and DELETE_STARTED.

        Returns how many attempts were cleaned up. Raises RemoteStorageError if the
        bucket is unreachable (the journal keeps them for the next try).
        """
        with self.st.lock:
            done = 0
            for rs in self.st.journal.open_attempts():
                if rs.state == CopyState.COPY_STARTED:
                    rs = self.st.journal.record(rs, CopyState.DELETE_STARTED)
                if rs.state == CopyState.DELETE_STARTED:
                    # A crashed put leaves a temp file (directory store) or an unfinished
                    # multipart upload (S3) that no listing shows: discard those too.
                    self.st.storage.discard_partial(self.st.keys(rs))
                    self.st.storage.delete(self.st.keys(rs))
                    self.st.journal.record(rs, CopyState.DELETE_FINISHED)
                    self.st.journal.forget([rs.id])
                    done += 1
            if done:
                self.st.journal.compact()
            return done
