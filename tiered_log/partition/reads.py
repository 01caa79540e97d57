"""Reads of a partition log: which tier serves an offset, and the one batch read.

:class:`TierReads` resolves a read between the tiers of a
:class:`~tiered_log.partition.log.TieredLog` (drawn in its module docstring): at or
above the local start from the local log, below it from the remote tier, the bounds
looked at again when retention or a truncation moves them under the read; a replica
that has just become leader answers reads below its local start with a retriable
PartitionNotReadyError until it has read the bucket. The record reads
(:meth:`TierReads.read_range`), the batch reads in both result forms (bytes, or ranges
of files for ``sendfile``) and the timestamp lookup are here; the partition log
delegates to them.

Thread-safety: reads take no lock and never wait for the shipper (as
:class:`~tiered_log.local.log.Log`'s); the remote tier is looked up on every read, so
one attached or dropped by a reconfiguration is seen by the next read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from ..errors import (
    CorruptRangeError,
    DataLossError,
    InvalidArgumentError,
    InvalidOffsetError,
    OffsetOutOfRangeError,
    PartitionNotReadyError,
)
from ..format.records import FetchData, Record
from ..local.batch_read import walk_batches as walk_local_batches
from ..local.log import Log
from ..local.ranges import BytesPage, FetchRanges, Page, RangesPage
from ..remote.tier import RemoteTier
from .log_start import LogStartFloor
from .tiering import Tiering, log_start

R = TypeVar("R")


class TierReads:
    """The reads of one partition log (see the module docstring). ``remote()`` answers
    the log's remote tier now (None without one); ``check_open`` raises once the log is
    closed; ``floor``: where deleting records moved the log start."""

    def __init__(
        self,
        log_id: str,
        local: Log,
        remote: Callable[[], RemoteTier | None],
        tiering: Tiering,
        check_open: Callable[[], None],
        floor: LogStartFloor | None = None,
    ) -> None:
        self.log_id = log_id
        self._local = local
        self._remote = remote
        self._tiering = tiering
        self._check_open = check_open
        self._floor = floor

    def log_start(self) -> int:
        """The partition's log start (either tier)."""
        return log_start(
            self._local, self._remote(), self._floor.offset if self._floor is not None else 0
        )

    def check_remote_view(self, offset: int | None = None) -> None:
        """PartitionNotReadyError (retriable) while this replica leads but has not yet
        rebuilt its view of the bucket (:meth:`lead`: others shipped, and retention moved
        the log start, while it followed): for a read at ``offset`` below its local
        start, or (``offset`` None) a question about the whole log (its bounds as the API
        reports them, a timestamp lookup). Until then its own view would answer a log
        start above the true one and 416 for archived offsets. Offsets at or above the
        local start are always served. Any thread, no lock."""
        if not self._tiering.remote_view_pending:
            return
        local_start = self._local.log_start_offset
        if offset is None or offset < local_start:
            raise PartitionNotReadyError(
                f"{self.log_id}: this replica has just become leader and is reading the "
                f"bucket for its archived offsets (below {local_start}): retry shortly"
            )

    def read(self, offset: int) -> Record:
        recs = self.read_range(offset, max_records=1)
        if not recs:
            raise OffsetOutOfRangeError(
                f"offset {offset} is not in the log [{self.log_start()}, {self._local.next_offset})",
                log_start=self.log_start(),
                next_offset=self._local.next_offset,
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
        if offset >= self._local.log_start_offset or self._remote() is None:
            return self._local.read_range(offset, max_records, max_bytes)
        return self._archive_of(offset).read_range(offset, max_records, max_bytes)

    def _at_cap(self, offset: int, upto: int) -> bool:
        """Whether a read capped at ``upto`` answers empty at ``offset``: at or past the
        cap and in the log's bounds (outside them the read's own error is due)."""
        if not isinstance(upto, int) or isinstance(upto, bool):
            raise InvalidArgumentError(f"upto must be an integer offset, got {upto!r}")
        return upto <= offset and self.log_start() <= offset <= self._local.next_offset

    def _check_read(self, offset: int, max_records: int, max_bytes: int) -> None:
        """The argument checks every read makes, then that the log is open, that
        ``offset`` is not below where deleting records moved the log start, and (an
        archived offset) that this replica's view of the bucket is ready
        (:meth:`check_remote_view`)."""
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise InvalidOffsetError(f"offset must be a non-negative integer, got {offset!r}")
        if max_records < 1 or max_bytes < 1:
            raise InvalidArgumentError("max_records and max_bytes must be at least 1")
        self._check_open()
        if self._floor is not None and offset < self._floor.offset:
            start, nxt = self.log_start(), self._local.next_offset
            raise OffsetOutOfRangeError(
                f"offset {offset} is not in the log [{start}, {nxt}): records below "
                f"{self._floor.offset} were deleted",
                log_start=start,
                next_offset=nxt,
            )
        self.check_remote_view(offset)

    def _archive_of(self, offset: int) -> RemoteTier:
        """The remote tier, for an ``offset`` below the local start (checked by
        :meth:`_check_read`): OffsetOutOfRangeError below the log start, DataLossError if
        no remote tier holds it."""
        start, nxt = self.log_start(), self._local.next_offset
        if offset < start:
            raise OffsetOutOfRangeError(
                f"offset {offset} is not in the log [{start}, {nxt})",
                log_start=start,
                next_offset=nxt,
            )
        r = self._remote()
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
        for _ in range(3):  # the bounds may move under the read: look again
            start, nxt = self.log_start(), self._local.next_offset
            if offset < start or offset > nxt:
                break
            if offset == nxt or (upto is not None and self._at_cap(offset, upto)):
                return page(offset).result(offset)
            try:
                if offset >= self._local.log_start_offset or self._remote() is None:
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
                    self.log_start() <= offset < self._local.log_start_offset
                    and (r := self._remote()) is not None
                    and offset >= r.remote_end
                ):
                    raise  # truly missing from both tiers
        start, nxt = self.log_start(), self._local.next_offset
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
        r = self._remote()
        start = self.log_start()
        if r is not None and r.has_data and r.start_offset < self._local.log_start_offset:
            found = r.offset_for_timestamp(timestamp)
            if found is not None:  # below the start (deleted): the first one left, as Kafka
                return max(found, start)
        found = self._local.offset_for_timestamp(timestamp)
        return found if found is None else max(found, start)
