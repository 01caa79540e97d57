"""A partition's log start as deleting records moved it (Kafka's DeleteRecords and its
``log-start-offset-checkpoint``): the floor below which no record is served, whatever
the segments still hold.

Retention moves a log's start by whole segments (and the remote tier's start by whole
copies); deleting records moves it to any offset, inside a batch even, as Kafka's
``logStartOffset``: the partition's log start is the higher of the two (see
:func:`~tiered_log.partition.tiering.log_start`), reads below it answer
OffsetOutOfRangeError, and the segments and copies wholly below it are deleted. A read
at the floor inside a batch answers the whole batch, as every read inside a batch does
(consumers skip the records below the offset they asked for).

File: ``log-start-offset-checkpoint`` in the partition's directory, one decimal offset,
written atomically (temporary file, fsync, rename, fsync of the directory) before the
move is acted on; missing means 0. A leader with a remote tier also records it in the
bucket's ``meta.json`` (the remote tier's log start), so a replica rebuilt from the
bucket or a successor reading its view finds it; followers take their leader's log
start from each fetch answer (:meth:`LogStartFloor.advance`).

Thread-safety: :meth:`advance` under the partition's control lock; :attr:`offset` is
read without a lock (an int, replaced whole).
"""

from __future__ import annotations

import logging
from pathlib import Path

from ..bounds import PartitionBounds
from ..errors import OffsetOutOfRangeError
from ..format import naming
from ..local.files import write_atomic
from ..local.log import Log
from ..remote.tier import RemoteTier

log = logging.getLogger(__name__)


class LogStartFloor:
    """The floor of one partition's log start (see the module docstring)."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / naming.LOG_START_FILE
        self.offset = 0
        try:
            text = self.path.read_text().strip()
        except FileNotFoundError:
            return
        except OSError as exc:
            log.warning("%s unreadable (%s): the log start floor is 0", self.path, exc)
            return
        if text.isdigit():
            self.offset = int(text)
        else:
            log.warning("%s holds %r, not an offset: the log start floor is 0", self.path, text)

    def advance(self, offset: int) -> bool:
        """Raise the floor to ``offset`` (persisted first); False when it is there already."""
        if offset <= self.offset:
            return False
        write_atomic(self.path, f"{offset}\n".encode())
        self.offset = offset
        return True

    def delete_below(
        self, offset: int, bounds: PartitionBounds, local: Log, remote: RemoteTier | None
    ) -> None:
        """A leader's (or single node's) DeleteRecords: move the log start up to
        ``offset`` (a lower start is left as it is). The floor is persisted first, then the
        local segments wholly below it are deleted and, with a remote tier, the copies
        wholly below it and the bucket's log start moved. OffsetOutOfRangeError above the
        high watermark; RemoteStorageError when the bucket fails or this node no longer
        leads (the floor is kept: retried, the call finishes the job). Under the
        partition's control lock."""
        if offset > bounds.high_watermark:
            raise OffsetOutOfRangeError(
                f"cannot delete records below {offset}: the log's high watermark is "
                f"{bounds.high_watermark}",
                log_start=bounds.log_start_offset,
                next_offset=bounds.next_offset,
            )
        if offset > bounds.log_start_offset:
            self.advance(offset)
            local.delete_segments_before(offset)
        if remote is not None and remote.meta.log_start_offset < offset:
            remote.advance_start(offset)

    def follow(self, leader_start: int, local: Log) -> None:
        """Take a log start learnt elsewhere (a follower's leader's, from a fetch answer;
        a new leader's from the bucket): the floor rises to it, at most to the local log
        end, and the local segments wholly below go. Never touches the bucket. Under the
        partition's control lock."""
        floor = min(leader_start, local.next_offset)
        self.advance(floor)
        local.delete_segments_before(floor)


__all__ = ["LogStartFloor"]
