"""Remote retention and truncation of one log (Kafka's ``RLMExpirationTask`` and the
truncation that leader changes and admins ask for).

Retention moves the log start: whole finished copies below it are journaled
DELETE_STARTED, the new start is saved (locally and in the bucket) so readers stop there
at once, then the objects are deleted. Truncation deletes the copies wholly above the
cut and *clips* the one holding it (the clip is recorded in the remote metadata and the
copy's remote-index entries end below it), or deletes it too when its data is still
local (it is shipped again).

Who may write: the log's shipper round and control calls, under the state's lock; in a
cluster only the partition's leader (a deposed one's retention is refused by the
state's fence, as its copies are).
"""

from __future__ import annotations

from ..errors import RemoteStorageError
from ..format import naming
from .manifest import clip_entries
from .metadata import CopyState, RemoteSegment
from .state import TierState


class RetentionTask:
    """Retention and truncation of one log's remote tier; see the module docstring."""

    def __init__(self, state: TierState) -> None:
        self.st = state

    def delete_before(self, offset: int) -> list[RemoteSegment]:
        """Delete remote segments that end at or before ``offset``; move the log start."""
        with self.st.lock:
            doomed = [s for s in self.st.finished if self.st.served_end(s) <= offset]
            if not doomed:
                return []
            if self.st.fence is not None and not self.st.fence():
                # A cluster's deposed leader: the bucket is its successor's to change.
                raise RemoteStorageError(
                    f"{self.st.log_id}: remote segments below {offset} "
                    f"not deleted: this node no longer leads epoch "
                    f"{self.st.leader_epoch}"
                )
            new_start = max(self.st.meta.log_start_offset, self.st.served_end(doomed[-1]))
            # Record the intent first: readers stop at the new start at once.
            marked = [self.st.journal.record(s, CopyState.DELETE_STARTED) for s in doomed]
            self.st.meta.log_start_offset = new_start
            for s in doomed:
                self.st.meta.clips.pop(s.id, None)
            self.st.refresh()
            self.st.save_meta()
            for s in marked:
                self.st.storage.delete(self.st.keys(s))
                self.st.journal.record(s, CopyState.DELETE_FINISHED)
            self.st.journal.forget([s.id for s in marked])
            self.st.journal.compact()
            self.st.index.drop_files_below(new_start)
            self.st.stats.deleted_segments += len(marked)
            return doomed

    def advance_start(self, offset: int) -> None:
        """Move the log start to ``offset`` (records deleted below it, Kafka's
        DeleteRecords): the copies wholly below it are deleted (:meth:`delete_before`)
        and the metadata's log start, in the bucket too, becomes ``offset`` even inside a
        copy (reads there stop at it). A deposed leader changes nothing
        (RemoteStorageError)."""
        self.delete_before(offset)
        with self.st.lock:
            if self.st.meta.log_start_offset >= offset:
                return
            if self.st.fence is not None and not self.st.fence():
                raise RemoteStorageError(
                    f"{self.st.log_id}: log start not moved to {offset}: this node no "
                    f"longer leads epoch {self.st.leader_epoch}"
                )
            self.st.meta.log_start_offset = offset
            self.st.refresh()
            self.st.save_meta()
            self.st.index.drop_files_below(offset)

    def retention_cutoff(self, local_unshipped_bytes: int, now_ms: int) -> int | None:
        """The offset remote retention would move the log start to, or None."""
        cfg = self.st.config
        total = self.st.size_bytes + local_unshipped_bytes
        cut: int | None = None
        for s in self.st.finished:
            by_time = cfg.retention_ms is not None and s.max_timestamp < now_ms - cfg.retention_ms
            by_size = cfg.retention_bytes is not None and total - s.size >= cfg.retention_bytes
            if not (by_time or by_size):
                break
            cut = self.st.served_end(s)
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
        with self.st.lock:
            doomed: list[RemoteSegment] = []
            clipped: RemoteSegment | None = None
            for s in self.st.finished:
                if self.st.served_end(s) <= offset:
                    continue
                if s.base_offset >= offset or s.base_offset >= local_start:
                    doomed.append(s)
                else:
                    clipped = s
            if self.st.meta.end_offset > offset:
                # A truncation gives the offsets above it out again, on purpose.
                self.st.meta.end_offset = offset
                if not doomed and clipped is None:
                    self.st.save_meta()
            if not doomed and clipped is None:
                return
            self.st.drop_snapshot()  # it names copies about to go: never read it again
            marked = [self.st.journal.record(s, CopyState.DELETE_STARTED) for s in doomed]
            if clipped is not None:
                self.st.meta.clips[clipped.id] = offset
            if self.st.meta.log_start_offset > offset:
                self.st.meta.log_start_offset = offset
            self.st.refresh()
            self.st.save_meta()
            gone = {
                naming.segment_object_key(self.st.log_id, s.base_offset, s.id, naming.LOG_SUFFIX)
                for s in doomed
            }
            self.st.index.rewrite(
                clip_entries(
                    [e for e in self.st.index.all_entries() if e.object_key not in gone], offset
                )
            )
            for s in marked:
                self.st.storage.delete(self.st.keys(s))
                self.st.journal.record(s, CopyState.DELETE_FINISHED)
            self.st.journal.forget([s.id for s in marked])
            self.st.journal.compact()
