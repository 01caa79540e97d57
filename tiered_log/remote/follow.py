"""Following another writer's log in the bucket: a read-only mount's view of one log.

A read-only mount (``read_only_remote``) serves logs that another cluster ships. Its
view of each log (the copy journal, metadata and remote-index files of a
:class:`~tiered_log.remote.tier.RemoteTier`, all local and all derived) is built from the
bucket and kept up with it by :meth:`BucketFollower.follow`, one step per poll:

1. the bucket's ``meta.json`` (one GET): a log start moved up by the owner's retention
   drops the copies below it from the view (local files only); a change that cannot be
   followed step by step (a truncation's clips or its recorded end below the view's
   remote end, a log start moved down, damage) rebuilds the whole view from the bucket
   (:meth:`RecoveryTask.resync_from_bucket
   <tiered_log.remote.recovery.RecoveryTask.resync_from_bucket>` with ``read_only``:
   the partition snapshot, then the manifests after it), as the mount's open does;
2. the copies whose base offset is at or above the view's remote end (one listing that
   starts at the view's few newest copies, which must still be there: one the owner
   deleted and made again rebuilds the view): each complete copy (both objects there)
   that starts exactly at the remote end has its manifest read and checked and is added
   to the journal and the index; a copy further on waits for the one below it (an
   owner copying several segments at once may finish them out of order), a copy still
   under way (one object of the two) for its other object.

Invariant: the view's finished copies tile ``[log start, remote end)`` as the owner's do
(:mod:`~tiered_log.remote.state`), and the view only takes copies the owner committed:
it never reads an object the owner may still be writing. Nothing is ever written to or
deleted from the bucket: every step reads (the store itself refuses writes,
:class:`~tiered_log.remote.read_only.ReadOnlyStorage`).

Thread-safety: a step runs under the tier state's lock (one at a time per log); readers
go on meanwhile and see the new copies once their index entries and journal records are
in (entries first, then the finished list).
"""

from __future__ import annotations

import logging

from ..errors import RemoteCorruptionError, RemoteObjectNotFoundError
from ..format import naming
from ..format.remote_index import RemoteLogIndexEntry
from .manifest import COMMITTED, clip_entries, decode_manifest
from .metadata import CopyState, RemoteMeta, RemoteSegment
from .snapshot import tail_start_after
from .tier import RemoteTier

log = logging.getLogger(__name__)

RECHECKED = 4
"""The newest copies of the view each step checks are still in the bucket: an owner that
crashed between a copy's objects and its journal record deletes that attempt when it
starts again and copies the segment anew (under another id), and it copies at most a few
segments at once, so a copy it replaced is among the last ones the view took."""


class BucketFollower:
    """Keeps ``tier``'s view of its log up with the bucket (see the module docstring)."""

    def __init__(self, tier: RemoteTier) -> None:
        self.tier = tier

    def follow(self) -> bool:
        """One step; whether the view changed. RemoteStorageError if the bucket fails
        (the view stays as it was: the next poll tries again)."""
        st = self.tier
        with st.lock:
            bucket = st.bucket_meta() or RemoteMeta()
            mine = st.meta
            if (
                bucket.clips != mine.clips
                or bucket.log_start_offset < mine.log_start_offset
                or 0 < bucket.end_offset < st.remote_end  # truncated at a segment's edge
            ):
                before = (st.start_offset, st.remote_end, len(st.finished))
                st.resync_from_bucket(read_only=True)
                return (st.start_offset, st.remote_end, len(st.finished)) != before
            changed = self._retention(bucket)
            if bucket != mine:
                st.meta = bucket
                st.meta.save(st.dir / naming.REMOTE_META_FILE)
            taken = self._take_new()
            if taken is None:  # damaged or replaced copies: the full rebuild sorts them out
                st.resync_from_bucket(read_only=True)
                return True
            return changed or taken > 0

    def _retention(self, bucket: RemoteMeta) -> bool:
        """Drop the copies the owner's retention removed (they end at or below the
        bucket's log start) from the view; whether any went. Local files only."""
        st = self.tier
        start = bucket.log_start_offset
        gone = [s for s in st.finished if st.served_end(s) <= start]
        if not gone:
            return False
        st.journal.record_all(gone, CopyState.DELETE_STARTED)
        st.journal.record_all(gone, CopyState.DELETE_FINISHED)
        st.journal.forget([s.id for s in gone])
        st.meta.log_start_offset = start
        st.refresh()
        st.journal.compact()
        st.index.drop_files_below(start)
        return True

    def _take_new(self) -> int | None:
        """Add the complete copies that continue the view from its remote end; how many
        (None: a new copy is damaged, or one of the view's newest copies is gone)."""
        st = self.tier
        end = st.remote_end
        recent = st.finished[-RECHECKED:]
        groups: dict[tuple[int, str], dict[str, int]] = {}
        for info in st.storage.list(
            naming.segment_objects_prefix(st.log_id),
            tail_start_after(st.log_id, recent[0].base_offset if recent else end),
        ):
            parsed = naming.parse_segment_object_key(info.key)
            if parsed is not None:
                groups.setdefault((parsed[0], parsed[1]), {})[parsed[2]] = info.size
        if any(not set(groups.get((s.base_offset, s.id), ())) >= COMMITTED for s in recent):
            # The owner deleted a copy the view serves (an attempt it had not journaled
            # before it crashed, cleaned up and made again): take its view anew.
            return None
        taken: list[tuple[RemoteSegment, list[RemoteLogIndexEntry]]] = []
        for (base, seg_id), objs in sorted(groups.items()):
            if base < end or not set(objs) >= COMMITTED:
                continue  # another copy of a range taken, or a copy under way
            if base > end:
                break  # the copy below it is not committed yet
            key = naming.segment_object_key(st.log_id, base, seg_id, naming.RLI_SUFFIX)
            try:
                rs, entries, _, _ = decode_manifest(
                    st.storage.get(key), key, objs[naming.LOG_SUFFIX]
                )
            except RemoteObjectNotFoundError:
                continue  # deleted since the listing (an owner cleaning a doomed copy)
            except RemoteCorruptionError as exc:
                log.error("%s: %s (a read-only mount: left as it is)", st.log_id, exc.message)
                return None
            if rs.base_offset != end or rs.next_offset <= end:
                continue
            taken.append((rs, entries))
            end = rs.next_offset
        if not taken:
            return 0
        for rs, entries in taken:
            st.index.append(clip_entries(entries, st.served_end(rs)))
        st.journal.record_all([rs for rs, _ in taken], CopyState.COPY_FINISHED)
        st.refresh()
        return len(taken)


__all__ = ["BucketFollower"]
