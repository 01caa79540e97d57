"""What the jobs of one log's remote tier share: its journal, metadata, index files and
the offsets they imply (:class:`TierState`), and the location file.

:class:`TierState` is the state every job of :class:`~tiered_log.remote.tier.RemoteTier`
reads and changes: the copy journal (:mod:`~tiered_log.remote.metadata`), the remote
metadata (log start, clips), the remote-index files, the copies found damaged, and the
counters. The offsets a reader may ask for all derive from the finished copies here
(:meth:`TierState.served_end` is the one bound on what a copy serves).

Invariant: finished copies tile ``[start_offset, remote_end)``: each starts at the
served end of the one before (truncation clips the last one served, retention moves the
start). Who may write: only the log's jobs, under :attr:`TierState.lock` (copy, delete,
truncate and rebuild); reads take snapshots (the ``finished`` list is replaced, never
changed in place) and may run from any thread.
"""

from __future__ import annotations

import json
import logging
import threading
from bisect import bisect_left
from collections.abc import Callable
from operator import attrgetter
from pathlib import Path

from ..errors import (
    CorruptRecordError,
    RemoteCorruptionError,
    RemoteObjectNotFoundError,
    RemoteStorageError,
)
from ..format import naming
from ..format.remote_index import RemoteLogIndexEntry
from ..local.segment import write_atomic
from .data_keys import DataKeys
from .index_files import RemoteIndexFiles
from .metadata import CopyJournal, RemoteMeta, RemoteSegment
from .snapshot import (
    SPILL_MAX_FACTOR,
    Snapshot,
    Spill,
    decode_snapshot,
    encode_snapshot,
    snapshot_key,
    spill_key,
)
from .storage import RemoteStorage
from .tier_config import TierConfig, TierStats
from .worker import in_worker

log = logging.getLogger(__name__)

LOCATION_FILE = naming.LOCATION_FILE
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
    return {
        k: (str(d[k]) if d.get(k) is not None else None)
        for k in ("log_id", "url", "endpoint_url", "region")
    }


class TierState:
    """The shared state of one log's remote tier; see the module docstring."""

    def __init__(
        self,
        log_dir: Path,
        log_id: str,
        storage: RemoteStorage,
        config: TierConfig,
        meta: RemoteMeta,
    ) -> None:
        self.log_id = naming.validate_log_id(log_id)
        self.storage = in_worker(config, storage)
        """The store, its calls run in the tier's worker processes where it allows
        (:func:`~tiered_log.remote.worker.in_worker`): none reaches the store's client
        in this process."""
        self.config = config
        self.dir = log_dir / naming.REMOTE_DIR
        self.lock = threading.RLock()
        self.stats = TierStats()
        self.journal = CopyJournal(self.dir / naming.COPY_JOURNAL_FILE)
        self.meta = meta
        self.damage: dict[str, str] = {}
        """Finished copies (by id) whose range cannot be read, and why: their manifest and
        data object are damaged. Reads there answer RemoteCorruptionError."""
        self.index = RemoteIndexFiles(
            self.dir / naming.REMOTE_INDEX_DIR,
            rotate_bytes=config.index_rotate_bytes,
            rotate_ms=config.index_rotate_ms,
        )
        self.data_keys = DataKeys(
            self.dir, lambda: {e.object_key for e in self.index.all_entries()}
        )
        """The wrapped data keys of the encrypted copies this node knows (a cache of
        their manifests' keys: a reader unwraps a key without a GET)."""
        self.closing = threading.Event()
        """Set when the log closes: its waits for the shared rate limits end."""
        self.finished: list[RemoteSegment] = []
        self._size_bytes = 0
        self.needs_index_rebuild = False
        """The remote-index files are damaged or out of step with the journal: the next
        tiering round (or the open) rebuilds them from the manifests."""
        self.leader_epoch: int | None = None
        """A cluster's partition: the epoch this node leads, written into its copies
        (None: a single node, or not leading)."""
        self.fence: Callable[[], bool] | None = None
        """A cluster's partition: asked right before a copy is committed (its manifest
        put); False means this node no longer leads ``leader_epoch`` and the copy is
        abandoned (a deposed leader ships nothing more)."""
        self.sweep_below: int | None = None
        """A cluster's leader: its log end when it took the lead. Only a segment below it
        can have a copy a deposed leader of an older epoch finished late (its in-flight
        copies were of segments the new leader's log holds), so only the copies below it
        look for one (a listing each; see ``CopyTask``). None: every copy looks."""
        self.snapshot_end = -1
        """The ``end`` of the partition snapshot last written or read (-1: none known):
        :meth:`snapshot_due` counts the copies finished above it."""
        self.spills: list[Spill] | None = None
        """The spills the partition snapshot last written or read names, in offset order
        (None: not known; the next write reads the bucket's snapshot to learn which to
        delete once its own is in place)."""
        self.rebuild_requests = 0
        """Bucket requests the last rebuild of this view made (reads and listings)."""

    def record_location(self) -> None:
        """Remember the log id and where its remote tier lives (``remote/location.json``),
        so tools opening the directory later (``tiered-log describe``) find the bucket.
        Written only when it changes; no credentials are ever recorded."""
        loc = {
            "log_id": self.log_id,
            "url": self.storage.url,
            "endpoint_url": getattr(self.storage, "endpoint_url", None),
            "region": getattr(self.storage, "region", None),
        }
        if read_location(self.dir.parent) != loc:
            write_atomic(self.dir / LOCATION_FILE, json.dumps(loc, sort_keys=True).encode())

    def refresh(self) -> None:
        """Take the journal's finished copies as the served view (with their total size
        and the damage of the unreadable ones), without a walk over the archive."""
        self.finished, self._size_bytes, unreadable = self.journal.finished_summary()
        for s in unreadable:
            if s.id not in self.damage:
                self.damage[s.id] = (
                    f"remote segment {s.id} at offsets [{s.base_offset}, {s.next_offset}) was "
                    "found with its manifest and its data object damaged; both are kept in "
                    "the bucket as they are"
                )

    def expected_index_last(self) -> int:
        fin = self.finished
        return self.served_end(fin[-1]) - 1 if fin else -1

    def served_end(self, seg: RemoteSegment) -> int:
        """One past the last offset ``seg`` serves: its next offset, or its clip when a
        truncation cut it (the objects keep the records above the clip; nothing reads
        them). Every bound on what a remote segment serves goes through here."""
        return min(seg.next_offset, self.meta.clips.get(seg.id, seg.next_offset))

    @property
    def finished_segments(self) -> list[RemoteSegment]:
        return list(self.finished)

    @property
    def has_data(self) -> bool:
        return self.remote_end > self.start_offset

    @property
    def start_offset(self) -> int:
        """First offset the remote tier serves (log start as moved by retention)."""
        fin = self.finished
        if not fin:
            return self.meta.log_start_offset
        return max(self.meta.log_start_offset, fin[0].base_offset)

    @property
    def remote_end(self) -> int:
        """One past the last offset the remote tier serves (0 if it holds nothing)."""
        fin = self.finished
        if not fin:
            return self.meta.log_start_offset
        return self.served_end(fin[-1])

    @property
    def size_bytes(self) -> int:
        """The bytes of the finished copies (as of the last :meth:`refresh`)."""
        return self._size_bytes

    @property
    def max_timestamp(self) -> int:
        return max((s.max_timestamp for s in self.finished), default=-1)

    def keys(self, seg: RemoteSegment) -> list[str]:
        return [
            naming.segment_object_key(self.log_id, seg.base_offset, seg.id, sfx)
            for sfx in naming.SEGMENT_OBJECT_SUFFIXES
        ]

    def record_end(self, offset: int) -> bool:
        """Record in the bucket's metadata that offsets below ``offset`` were handed out
        (see :attr:`RemoteMeta.end_offset`), if that moves it up; whether it did. Not
        for a cluster's deposed leader (the fence): the bucket's metadata is its
        successor's. RemoteStorageError if the bucket fails."""
        with self.lock:
            if offset <= self.meta.end_offset or (self.fence is not None and not self.fence()):
                return False
            self.meta.end_offset = offset
            self.save_meta()
            return True

    def bucket_meta(self) -> RemoteMeta | None:
        """The bucket's copy of this log's metadata (one GET), or None when it has none.
        RemoteStorageError if the bucket fails; CorruptIndexError if it is damaged."""
        try:
            return RemoteMeta.from_bytes(self.storage.get(naming.meta_object_key(self.log_id)))
        except RemoteObjectNotFoundError:
            return None

    def load_meta_from_bucket(self) -> None:
        """Take the bucket's metadata as this log's (a follower: reads only); kept when
        the bucket has none. RemoteStorageError if the bucket fails."""
        meta = self.bucket_meta()
        if meta is None:
            return
        with self.lock:
            self.meta = meta
            self.meta.save(self.dir / naming.REMOTE_META_FILE)
            self.refresh()

    def record_end_fresh(self, offset: int) -> bool:
        """:meth:`record_end` for a replica whose view of the bucket may be stale (a new
        leader before its first round rebuilt that view): the bucket's metadata is read,
        only its end moved up and written back, the rest left for the rebuild. Fenced
        as :meth:`record_end`. RemoteStorageError if the bucket fails."""
        with self.lock:
            if self.fence is not None and not self.fence():
                return False
            fresh = self.bucket_meta() or RemoteMeta()
            if offset > fresh.end_offset:
                fresh.end_offset = offset
                self.storage.put(naming.meta_object_key(self.log_id), fresh.to_bytes())
            self.meta.end_offset = max(self.meta.end_offset, fresh.end_offset)
            return True

    def release_end(self, offset: int) -> bool:
        """Lower the recorded end to ``offset`` (a clean close: offsets from there on were
        reserved, never handed out), if it is above; whether it did. Fenced as
        :meth:`record_end`. RemoteStorageError if the bucket fails."""
        with self.lock:
            if offset >= self.meta.end_offset or (self.fence is not None and not self.fence()):
                return False
            self.meta.end_offset = offset
            self.save_meta()
            return True

    def resume_offset(self) -> int:
        """Where a log with no local record continues, given this view of the bucket: the
        remote end, or above the end the bucket records (every offset this log's
        partition handed out) when that is higher; the offsets between were acknowledged
        and never reached the bucket: noted lost (a WARNING, describe, metrics), never
        reused. Opening, and a replica that takes the lead with an empty log."""
        resume, end = self.remote_end, self.meta.end_offset
        if end <= resume:
            return resume
        if not any(a <= resume and end <= b for a, b in self.meta.lost):
            log.warning(
                "%s: offsets [%d, %d) were handed out (or reserved to be) but never "
                "reached the bucket before the local disk was lost: they are lost; "
                "the log continues at %d",
                self.log_id,
                resume,
                end,
                end,
            )
            self.note_lost(resume, end)
        return end

    def note_lost(self, first: int, end: int) -> None:
        """Offsets ``[first, end)`` were handed out but are in neither tier (a log rebuilt
        from the bucket after its disk was lost): recorded in the metadata, locally and
        in the bucket (best effort there: logged)."""
        with self.lock:
            self.meta.lost.append([first, end])
            try:
                self.save_meta()
            except RemoteStorageError as exc:
                self.meta.save(self.dir / naming.REMOTE_META_FILE)
                log.warning(
                    "%s: lost offsets not recorded in the bucket: %s", self.log_id, exc.message
                )

    def snapshot_due(self) -> bool:
        """Whether enough copies finished since the last partition snapshot (or none is
        known) that the next one should be written (``snapshot_interval_segments``)."""
        fin = self.finished
        if not fin or self.needs_index_rebuild:
            return False
        if self.snapshot_end < 0:
            return True
        newer = len(fin) - bisect_left(fin, self.snapshot_end, key=attrgetter("base_offset"))
        return newer >= self.config.snapshot_interval_segments

    def write_snapshot(self) -> bool:
        """Put the partition snapshot (:mod:`~tiered_log.remote.snapshot`): every finished
        copy and its remoteLogIndex entries, the older ones in spill objects, so a replica
        taking the lead reads this view in a few requests. Spills no longer named (merged,
        below the log start, or a predecessor's) are deleted once the snapshot is in place
        (best effort: what is left is an orphan for ``archive reconcile``). Not for a
        deposed leader (the fence); whether it was written. RemoteStorageError if the
        bucket fails (the next round tries again)."""
        with self.lock:
            if self.fence is not None and not self.fence():
                return False
            end, fin, start = self.remote_end, list(self.finished), self.start_offset
            if self.spills is None:  # a predecessor's spills may name other copies: not taken
                known, spills = self._bucket_spills(), []
            else:
                known = list(self.spills)
                spills = [p for p in known if p.end > start]
            limit = self.config.snapshot_spill_segments
            cap = SPILL_MAX_FACTOR * limit

            # The copies above the last spill (copies tile: the next starts where one ends).
            since = spills[-1].end if spills else -1
            segs = [s for s in fin if s.base_offset >= since]
            while len(segs) >= cap + limit:  # a first write over a long archive: no merges
                spills.append(self._put_spill(segs[:cap]))
                segs = segs[cap:]
            while len(segs) >= 2 * limit:
                spills.append(self._put_spill(segs[:limit]))
                segs = segs[limit:]
                while (
                    len(spills) >= 2
                    and spills[-2].count <= spills[-1].count
                    and spills[-2].count + spills[-1].count <= cap
                ):
                    newer, older = spills.pop(), spills.pop()
                    known += [older, newer]  # both go once the merged one is named
                    spills.append(
                        self._put_spill([s for s in fin if older.base <= s.base_offset < newer.end])
                    )
            snap = Snapshot(self.leader_epoch, end, segs, self._entries_of(segs), spills=spills)
            self.storage.put(snapshot_key(self.log_id), encode_snapshot(snap))
            self.snapshot_end, self.spills = end, spills
            named = {p.key for p in spills}
            self._delete_spills(sorted({p.key for p in known} - named))
            return True

    def _put_spill(self, segs: list[RemoteSegment]) -> Spill:
        """Put one spill object holding ``segs`` (finished copies in offset order)."""
        base, end = segs[0].base_offset, self.served_end(segs[-1])
        key = spill_key(self.log_id, base, end)
        part = Snapshot(self.leader_epoch, end, segs, self._entries_of(segs))
        self.storage.put(key, encode_snapshot(part))
        return Spill(key, base, end, len(segs))

    def _entries_of(self, segs: list[RemoteSegment]) -> list[RemoteLogIndexEntry]:
        """The remoteLogIndex entries of ``segs`` (finished copies in offset order)."""
        if not segs:
            return []
        keys = {
            naming.segment_object_key(self.log_id, s.base_offset, s.id, naming.LOG_SUFFIX)
            for s in segs
        }
        last = self.served_end(segs[-1])
        out: list[RemoteLogIndexEntry] = []
        for e in self.index.entries_from(segs[0].base_offset):
            if e.first_offset >= last:
                break
            if e.object_key in keys:
                out.append(e)
        return out

    def _bucket_spills(self) -> list[Spill]:
        """The spills the bucket's snapshot names (a leader that did not read it: they
        are deleted once its own snapshot is in place); none when it is missing or does
        not read (its spills are then orphans for ``archive reconcile``)."""
        key = snapshot_key(self.log_id)
        try:
            return decode_snapshot(self.storage.get(key), key).spills
        except (RemoteObjectNotFoundError, RemoteCorruptionError, CorruptRecordError):
            return []

    def _delete_spills(self, keys: list[str]) -> None:
        if not keys or (self.fence is not None and not self.fence()):
            return
        try:
            self.storage.delete(keys)
        except RemoteStorageError as exc:
            log.warning(
                "%s: %d spill object(s) no snapshot names were not deleted (left for "
                "archive reconcile): %s",
                self.log_id,
                len(keys),
                exc.message,
            )

    def drop_snapshot(self) -> None:
        """Delete the partition snapshot before objects it names are deleted out of
        order (a truncation), then the spills it named: readers rebuild from the
        manifests until the next one."""
        known = self.spills if self.spills is not None else self._bucket_spills()
        self.storage.delete([snapshot_key(self.log_id)])
        self.snapshot_end, self.spills = -1, []
        self._delete_spills([p.key for p in known])

    def save_meta(self) -> None:
        self.meta.save(self.dir / naming.REMOTE_META_FILE)
        self.storage.put(naming.meta_object_key(self.log_id), self.meta.to_bytes())
