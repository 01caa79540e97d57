"""Rebuilding one log's remote state: from the manifests (the remote-index files), from
the bucket alone (an empty data directory), and recovering a damaged journal or metadata.

The bucket holds every fact the local files do: each copy's manifest carries its offsets,
timestamps and remoteLogIndex entries, and ``<log>/meta.json`` the log start and clips.
So the local remote-index files, the copy journal and ``meta.json`` can all be made again
from it. A damaged manifest is made again from its data object
(:func:`~tiered_log.remote.manifest.repair_manifest`); a copy whose manifest and data are
both damaged is kept in the bucket and journaled as an unreadable range, so the log
neither shrinks nor hands its offsets out again. Nothing is deleted on another object's
word: only incomplete attempts, copies below the log start, and exact duplicates.

Who may write: the log's open and shipper round, under the state's lock.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from ..errors import (
    CorruptIndexError,
    RemoteCorruptionError,
    RemoteObjectNotFoundError,
    RemoteStorageError,
    TieredLogError,
)
from ..format import naming
from ..format.remote_index import RemoteLogIndexEntry
from .manifest import COMMITTED, clip_entries, decode_manifest, repair_manifest
from .metadata import CopyState, RemoteMeta, RemoteSegment
from .snapshot import read_snapshot, tail_start_after
from .state import TierState
from .storage import ObjectInfo, RemoteStorage

log = logging.getLogger(__name__)


def load_meta(log_dir: Path, storage: RemoteStorage, log_id: str) -> RemoteMeta:
    """The local remote metadata; if it is damaged, the bucket's copy (the same facts,
    written right after it); CorruptIndexError naming the file if both fail."""
    path = log_dir / naming.REMOTE_DIR / naming.REMOTE_META_FILE
    try:
        return RemoteMeta.load(path)
    except CorruptIndexError as exc:
        log.error("%s: %s is damaged (%s); taking the bucket's copy", log_id, path, exc.message)
        try:
            return RemoteMeta.from_bytes(storage.get(naming.meta_object_key(log_id)))
        except (RemoteStorageError, CorruptIndexError) as exc2:
            raise CorruptIndexError(
                f"{path} is damaged ({exc.message}) and the bucket's "
                f"copy cannot be read: {exc2.message}"
            ) from exc2


def _newer(a: RemoteSegment, b: RemoteSegment) -> bool:
    """Whether copy ``a`` was made by a leader of a later epoch than copy ``b`` (both of
    a cluster's partition; copies without an epoch are never newer)."""
    return a.leader_epoch is not None and (
        b.leader_epoch is None or a.leader_epoch > b.leader_epoch
    )


class RecoveryTask:
    """Rebuilds and recoveries of one log's remote state; see the module docstring."""

    def __init__(self, state: TierState) -> None:
        self.st = state

    def _list_copies(self, start_after: str = "") -> dict[tuple[int, str], dict[str, ObjectInfo]]:
        """The log's segment objects in the bucket (those after ``start_after`` only), by
        copy attempt ``(base, id)`` and suffix (one listing; counted in
        ``rebuild_requests`` as S3 pages it: 1,000 keys a request)."""
        groups: dict[tuple[int, str], dict[str, ObjectInfo]] = {}
        n = 0
        for info in self.st.storage.list(
            naming.segment_objects_prefix(self.st.log_id), start_after
        ):
            n += 1
            parsed = naming.parse_segment_object_key(info.key)
            if parsed is not None:
                groups.setdefault((parsed[0], parsed[1]), {})[parsed[2]] = info
        self.st.rebuild_requests += 1 + n // 1000
        return groups

    def _snapshot_view(
        self,
    ) -> tuple[list[tuple[RemoteSegment, list[RemoteLogIndexEntry]]], str] | None:
        """The copies the partition snapshot lists above the log start (with their
        index entries) and the ``start_after`` key of the listing of what came after it;
        None without a usable snapshot (missing, damaged: logged; a full rebuild then)."""
        start = self.st.meta.log_start_offset
        try:
            snap = read_snapshot(self.st.storage, self.st.log_id, start)
        except RemoteCorruptionError as exc:
            self.st.rebuild_requests += 1
            log.warning("%s: %s; rebuilding from every manifest", self.st.log_id, exc.message)
            return None
        if snap is None:
            self.st.rebuild_requests += 1
            return None
        self.st.rebuild_requests += snap.reads
        by_key: dict[str, list[RemoteLogIndexEntry]] = {}
        for e in snap.entries:
            by_key.setdefault(e.object_key, []).append(e)
        segs = [
            (
                s,
                by_key.get(
                    naming.segment_object_key(
                        self.st.log_id, s.base_offset, s.id, naming.LOG_SUFFIX
                    ),
                    [],
                ),
            )
            for s in snap.segments
            if self.st.served_end(s) > start
        ]
        self.st.snapshot_end, self.st.spills = snap.end, snap.spills
        return segs, tail_start_after(self.st.log_id, snap.end)

    def _load_manifest(
        self, base: int, seg_id: str, data_size: int | None = None, *, read_only: bool = False
    ) -> tuple[RemoteSegment, list[RemoteLogIndexEntry]] | str:
        """A copy's checked manifest (see :mod:`~tiered_log.remote.manifest`); a damaged
        one is made again from its data object and put back (not when ``read_only``).
        Returns what is wrong (logged) when that fails too: the data object is damaged
        as well, and both are kept as they are. RemoteStorageError if the bucket fails."""
        key = naming.segment_object_key(self.st.log_id, base, seg_id, naming.RLI_SUFFIX)
        try:
            rs, entries, _, _ = decode_manifest(self.st.storage.get(key), key, data_size)
            return rs, entries
        except RemoteCorruptionError as exc:
            damage = exc.message
        except RemoteObjectNotFoundError:
            damage = f"manifest {key} is missing"
        if read_only:
            log.error("%s: %s (a follower's view: left to the leader)", self.st.log_id, damage)
            return damage
        log.error("%s: %s; making it again from its data object", self.st.log_id, damage)
        try:
            rs, entries = repair_manifest(self.st.storage, key, self.st.config.chunk_bytes)
        except (RemoteCorruptionError, RemoteObjectNotFoundError) as exc:
            log.error("%s: %s (objects kept as they are)", self.st.log_id, exc.message)
            return f"{damage}; {exc.message}"
        log.warning(
            "%s: manifest %s made again from its data object: offsets [%d, %d)",
            self.st.log_id,
            key,
            rs.base_offset,
            rs.next_offset,
        )
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
        key = naming.segment_object_key(self.st.log_id, base, seg_id, naming.RLI_SUFFIX)
        try:
            # A range: the whole object fails its stored digest, its first line may not.
            head = json.loads(
                self.st.storage.get(key, 0, min(4096, self.st.storage.size(key) - 1)).partition(
                    b"\n"
                )[0]
            )
            end = max(end, int(head["next_offset"]))
            first_ts, max_ts = int(head["first_timestamp"]), int(head["max_timestamp"])
        except (TieredLogError, ValueError, KeyError, TypeError, AttributeError):
            pass
        return RemoteSegment(
            seg_id,
            base,
            max(end, base + 1),
            size,
            first_ts,
            max_ts,
            CopyState.COPY_FINISHED,
            unreadable=True,
        )

    def rebuild_index_files(self) -> int:
        """Rewrite the local remote-index files from the ``.rli`` objects of finished copies.

        A damaged manifest is made again from its data object; where that fails its range
        is left out of the index and named in :attr:`damage` (reads there answer
        RemoteCorruptionError), and the rest is indexed. RemoteStorageError if the bucket
        fails (``needs_index_rebuild`` stays set; the shipper's next round tries again)."""
        with self.st.lock:
            entries: list[RemoteLogIndexEntry] = []
            damage: dict[str, str] = {}
            for rs in self.st.finished:
                got = self._load_manifest(rs.base_offset, rs.id)
                if isinstance(got, str) or (got[0].base_offset, got[0].next_offset) != (
                    rs.base_offset,
                    rs.next_offset,
                ):
                    damage[rs.id] = (
                        got
                        if isinstance(got, str)
                        else (
                            f"the manifest of remote segment {rs.id} describes offsets "
                            f"[{got[0].base_offset}, {got[0].next_offset}), its copy "
                            f"[{rs.base_offset}, {rs.next_offset})"
                        )
                    )
                    continue
                entries.extend(clip_entries(got[1], self.st.served_end(rs)))
            self.st.index.rewrite(entries)
            self.st.damage = damage
            self.st.needs_index_rebuild = False
            return len(entries)

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
        path = self.st.journal.path
        damaged = self.st.journal.damaged
        settled = {s.id for s in self.st.journal.segments() if s.state != CopyState.COPY_STARTED}
        try:
            groups = self._list_copies()
            finished = self.st.journal.finished()
            recovered = 0
            for (base, seg_id), objs in sorted(groups.items()):
                if seg_id in settled:
                    continue
                if not set(objs) >= COMMITTED:
                    log.warning(
                        "%s: copy %s-%s in the bucket is incomplete and named by no "
                        "readable journal line; left as it is",
                        self.st.log_id,
                        base,
                        seg_id,
                    )
                    continue
                size = objs[naming.LOG_SUFFIX].size
                got = self._load_manifest(base, seg_id, size)
                if isinstance(got, str):
                    above = [s.base_offset for s in finished if s.base_offset > base]
                    rs = self._unreadable(base, seg_id, size, min(above, default=base + 1))
                else:
                    rs = got[0]
                if any(
                    self.st.served_end(s) > rs.base_offset and s.base_offset < rs.next_offset
                    for s in finished
                ):
                    log.error(
                        "%s: copy %s-%s [%d, %d) in the bucket overlaps the journal's "
                        "copies; left as it is",
                        self.st.log_id,
                        base,
                        seg_id,
                        rs.base_offset,
                        rs.next_offset,
                    )
                    continue
                finished.append(self.st.journal.record(rs, CopyState.COPY_FINISHED))
                recovered += 1
        except RemoteStorageError as exc:
            raise CorruptIndexError(
                f"{path} is damaged ({'; '.join(damaged)}) and the bucket, which holds the "
                f"same facts, cannot be read to recover it: {exc.message}"
            ) from exc
        finished.sort(key=lambda s: s.base_offset)
        for a, b in itertools.pairwise(finished):  # finished copies tile their range
            if b.base_offset != self.st.served_end(a):
                raise CorruptIndexError(
                    f"{path} is damaged ({'; '.join(damaged)}); recovered from the bucket, "
                    f"copies {a.id} [{a.base_offset}, {self.st.served_end(a)}) and {b.id} "
                    f"[{b.base_offset}, {b.next_offset}) "
                    f"{'overlap' if b.base_offset < self.st.served_end(a) else 'leave a gap'}: "
                    "not opened"
                )
        aside = path.with_name(f"{path.name}.damaged-{int(time.time() * 1000)}")
        os.replace(path, aside)
        self.st.journal.compact()
        log.error(
            "%s: copy journal %s was damaged (%s); %d copies recovered from the bucket; "
            "the damaged file is kept as %s",
            self.st.log_id,
            path,
            "; ".join(damaged),
            recovered,
            aside.name,
        )
        self.st.needs_index_rebuild = True

    def resync_from_bucket(self, *, read_only: bool = False) -> int:
        """Forget the local remote state (journal, metadata, index files) and rebuild it
        from the bucket: a cluster's new leader, whose own view is stale (it followed
        while others shipped), or (``read_only``) a follower reset to its leader's remote
        end. Returns the number of segments recovered; RemoteStorageError if the bucket
        fails (the caller retries)."""
        with self.st.lock:
            self.st.journal.clear()
            self.st.meta = RemoteMeta()
            self.st.damage = {}
            return self.rebuild_from_bucket(read_only=read_only)

    def rebuild_from_bucket(
        self, progress: Callable[[int, int], None] | None = None, *, read_only: bool = False
    ) -> int:
        """Rebuild journal, metadata and remote-index files from the bucket alone.

        Takes the partition snapshot (:mod:`~tiered_log.remote.snapshot`) for the copies
        below its end when there is a usable one, then lists only the objects after it;
        otherwise lists the log's objects once. Reads only the small ``.rli`` manifests of
        the copies listed (never segment data, unless a manifest is damaged and must be
        made again); ``rebuild_requests`` counts the requests. Deletes
        incomplete attempts (a data object or a manifest alone), copies that end below
        the log start, and exact duplicates of a copy already taken (same offsets, both
        manifests checked). Never deletes because of what another object claims: a copy
        that overlaps another differently is kept in the bucket, left out and logged; a
        copy whose manifest and data are both damaged is kept and journaled as an
        unreadable range (see :meth:`_unreadable`). Returns the number of segments
        recovered. A copy is complete when both its data object and its manifest are there.

        In a cluster two copies of one segment may both be complete (a deposed leader
        finished one late): the one of the later leader epoch is kept, the other deleted
        (replicas' segments are identical, so both hold the same records).

        ``read_only``: a cluster follower's view. Only the leader of the current epoch
        writes to or deletes from the bucket, and what looks like an incomplete attempt
        may be its copy under way: nothing is deleted or put back, the same copies are
        taken as otherwise.
        """
        with self.st.lock:
            self.st.rebuild_requests = 1
            self.st.snapshot_end, self.st.spills = -1, None
            self.st.meta = self.st.bucket_meta() or RemoteMeta()
            # The partition snapshot, if there is one, stands for every copy below its
            # end: only what came after it is listed and its manifests read.
            seeded = self._snapshot_view()
            segs: list[tuple[RemoteSegment, list[RemoteLogIndexEntry]]] = []
            if seeded is not None:
                segs, after = seeded
                groups = self._list_copies(after)
            else:
                groups = self._list_copies()
            complete = sorted(k for k, objs in groups.items() if set(objs) >= COMMITTED)
            orphans = [
                o.key for k, objs in groups.items() if k not in complete for o in objs.values()
            ]
            damaged: list[tuple[int, str, int, str]] = []  # base, id, size, what
            for n, (base, seg_id) in enumerate(complete):
                size = groups[(base, seg_id)][naming.LOG_SUFFIX].size
                self.st.rebuild_requests += 1
                got = self._load_manifest(base, seg_id, size, read_only=read_only)
                if progress is not None:
                    progress(n + 1, len(complete))
                if isinstance(got, str):
                    damaged.append((base, seg_id, size, got))
                    continue
                rs, ents = got
                prev = segs[-1][0] if segs else None
                if rs.next_offset <= self.st.meta.log_start_offset:
                    orphans.extend(o.key for o in groups[(base, seg_id)].values())  # retention
                elif prev is None or rs.base_offset >= self.st.served_end(prev):
                    segs.append((rs, ents))
                elif _newer(rs, prev) and rs.base_offset == prev.base_offset:
                    # A cluster: a deposed leader's copy of this segment (older epoch) and
                    # its successor's; the newer stays, the older goes.
                    orphans.extend(self.st.keys(prev))
                    segs[-1] = (rs, ents)
                elif (rs.base_offset, rs.next_offset, rs.size) == (
                    prev.base_offset,
                    prev.next_offset,
                    prev.size,
                ) or _newer(prev, rs):
                    orphans.extend(o.key for o in groups[(base, seg_id)].values())  # a duplicate
                else:
                    log.error(
                        "%s: copy %s-%s [%d, %d) overlaps copy %s [%d, %d); both kept in "
                        "the bucket, the first is served",
                        self.st.log_id,
                        base,
                        seg_id,
                        rs.base_offset,
                        rs.next_offset,
                        prev.id,
                        prev.base_offset,
                        prev.next_offset,
                    )
            if orphans and not read_only:
                self.st.storage.delete(orphans)
            self.st.journal.record_all([rs for rs, _ in segs], CopyState.COPY_FINISHED)
            for base, seg_id, size, _what in damaged:
                if base < self.st.meta.log_start_offset:
                    continue
                above = [r.base_offset for r, _ in segs if r.base_offset > base]
                taken = [r for r, _ in segs if r.base_offset <= base < self.st.served_end(r)]
                if taken:
                    log.error(
                        "%s: damaged copy %s-%s lies inside copy %s; kept in the bucket, "
                        "not served",
                        self.st.log_id,
                        base,
                        seg_id,
                        taken[0].id,
                    )
                    continue
                self.st.journal.record(
                    self._unreadable(base, seg_id, size, min(above, default=base + 1)),
                    CopyState.COPY_FINISHED,
                )
            self.st.meta.save(self.st.dir / naming.REMOTE_META_FILE)
            self.st.refresh()
            self.st.damage.update({seg_id: what for _, seg_id, _, what in damaged})
            self.st.index.rewrite(
                [e for rs, ents in segs for e in clip_entries(ents, self.st.served_end(rs))]
            )
            self.st.needs_index_rebuild = False
            return len(segs)
