"""A consumer's reads of a partition log: decoded (JSON form) or as raw batches (binary
form), the ``read`` steps a front end hands to :meth:`Broker.fetch
<tiered_log.broker.Broker.fetch>`.

Both go through the partition's log: :func:`fetch_frames` is
:meth:`TieredLog.read_batch_ranges <tiered_log.partition.log.TieredLog.read_batch_ranges>` (the
stored batches of either tier, verified, not decoded: disk format == bucket format ==
wire format; answered as the places they lie, which the response sends from the files
with ``sendfile``: :mod:`tiered_log.service.zerocopy`) with the bounds the answer
reports; :func:`fetch_records` is
:meth:`TieredLog.read_range <tiered_log.partition.log.TieredLog.read_range>`, which decodes and
so verifies every record it returns.

Damage: nothing damaged is served on either path. A page stops before a damaged batch
(200 with the batches before it; its ``next_offset`` is the damaged batch's); a fetch
that starts in one raises :class:`~tiered_log.errors.CorruptRangeError` (HTTP 410
``corrupt_record``, not retriable). Records after the damage are served as before.

Both functions block on disk and the bucket: the broker runs them on its read executor
(an archived chunk not fetched yet parks the request instead). They take no lock (as
the log's reads).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import CorruptIndexError, CorruptRecordError
from ..format.records import Record
from ..local.ranges import FetchRanges
from .topics import PartitionBounds, PartitionLog, partition_bounds


@dataclass(frozen=True, slots=True)
class FrameBatch:
    """A page of a binary fetch: where the log's batches lie (a
    :class:`~tiered_log.local.ranges.FetchRanges`, which holds their files open until
    sent) and the partition's bounds after reading (the answer's headers report them)."""

    fetched: FetchRanges
    bounds: PartitionBounds


def fetch_frames(
    plog: PartitionLog, offset: int, max_records: int, max_bytes: int, upto: int | None = None
) -> FrameBatch:
    """Batches from the one holding ``offset`` on, as places in files (see
    :meth:`TieredLog.read_batch_ranges <tiered_log.partition.log.TieredLog.read_batch_ranges>`): at least
    one batch if there is a record at ``offset``, then whole batches while fewer than
    ``max_records`` records and ``max_bytes`` bytes were taken; empty at exactly the next
    offset. OffsetOutOfRangeError outside the log. ``upto``: nothing at or past it (a
    cluster's consumers read below the high watermark)."""
    fetched = plog.read_batch_ranges(offset, max_records, max_bytes, upto=upto)
    return FrameBatch(fetched, partition_bounds(plog))


def fetch_records(
    plog: PartitionLog, offset: int, max_records: int, max_bytes: int, upto: int | None = None
) -> tuple[list[Record], PartitionBounds]:
    """Decoded records from ``offset`` on (any tier) and the bounds after reading.

    When a local read meets a damaged batch, the records before it are returned (the
    batch read's verified walk finds where it is, and those records are read again); a
    read starting in it raises CorruptRangeError."""
    try:
        recs = plog.read_range(offset, max_records, max_bytes, upto=upto)
    except (CorruptRecordError, CorruptIndexError) as exc:
        # CorruptRangeError at offset
        fetched = plog.read_batches(offset, max_records, max_bytes, upto=upto)
        if fetched.next_offset <= offset:
            raise exc from None
        recs = plog.read_range(offset, fetched.next_offset - offset, max_bytes, upto=upto)
    return recs, partition_bounds(plog)


__all__ = ["FrameBatch", "fetch_frames", "fetch_records"]
