"""Reading a local log's stored batches as they are: the local half of a batch read
(:meth:`Log.read_batches <tiered_log.local.log.Log.read_batches>`; the remote half is
:meth:`RemoteReader.read_batches <tiered_log.remote.reader.RemoteReader.read_batches>`,
and both return one :class:`~tiered_log.format.batch.FetchData`).

It never decodes or re-encodes: it finds the batch holding the first wanted offset
through the segment's index (:meth:`~tiered_log.local.segment.Segment.position_of`),
reads from there with about one ``pread`` per segment and walks the Kafka batch
headers to honour ``max_records``/``max_bytes``, checking each batch's framing and
CRC-32C (:func:`~tiered_log.format.records.check_batches`: one C call per batch, no
decode) and that its base offset follows the one before (the CRC does not cover it). As
in Kafka, a page is made of whole batches: its first batch may begin before the asked
offset and its last may run past ``max_records``.

One walk, two result forms (:mod:`tiered_log.local.ranges`): the page it fills decides
whether the checked bytes are returned (:class:`~tiered_log.local.ranges.BytesPage`, a
``FetchData``) or where they lie (:class:`~tiered_log.local.ranges.RangesPage`, a
``FetchRanges`` of the segment files' ranges, checked through mappings of the page
cache rather than read into memory).

Damage: nothing damaged is served. A page stops before a batch that fails its check
(the batches before it are returned; the page's ``next_offset`` is the damaged batch's);
a read that starts in a damaged batch raises :class:`~tiered_log.errors.CorruptRangeError`
(HTTP 410 ``corrupt_record``), and the first time a damaged place is met it is logged as
an ERROR naming the segment file. Records after the damage are served as before.

Blocks on disk; takes no lock and may race appends (it sees a consistent prefix: a
segment's ``size`` grows only after a write completes) and truncations (it may stop
early, or return records the truncation then removes). Safe from any thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TypeVar

from ..errors import CorruptIndexError, CorruptRangeError, CorruptRecordError, OffsetOutOfRangeError
from ..format.records import HEADER_SIZE, FetchData, batch_header, check_batches
from .ranges import BytesPage, Page, Reader
from .segment import Segment

log = logging.getLogger(__name__)

R = TypeVar("R")
_reported: set[tuple[str, int]] = set()
_reported_lock = threading.Lock()

_READ_SLACK = 64 << 10
"""Bytes read beyond the estimate of what a page needs (one read is the aim)."""


def read_batches(
    segment_for: Callable[[int], Segment],
    offset: int,
    max_records: int,
    max_bytes: int,
    end: int | None = None,
) -> FetchData:
    """Batches from the one holding ``offset`` on: at least one batch, then whole batches
    while fewer than ``max_records`` records from ``offset`` and fewer than ``max_bytes``
    bytes were taken. ``segment_for`` is the log's lookup (OffsetOutOfRangeError outside
    its segments): an ``offset`` it does not find raises that error, which the caller
    (who knows the log's bounds) answers; a segment deleted after the first was read ends
    the page.

    ``end`` (a replicated log's high watermark, for consumers): no batch holding a record
    at or past it is taken, not even the first (batches are whole: one straddling ``end``
    ends the page before it, possibly empty). The walk stops there; nothing past it is
    read for the page's sake."""
    return walk_batches(segment_for, offset, max_records, max_bytes, end, BytesPage(offset))


def walk_batches(
    segment_for: Callable[[int], Segment],
    offset: int,
    max_records: int,
    max_bytes: int,
    end: int | None,
    page: Page[R],
) -> R:
    """:func:`read_batches` into ``page``, which decides the result's form (see the
    module docstring); the same walk, limits and errors."""
    cur = offset
    try:
        while cur - offset < max_records and page.size < max_bytes and (end is None or cur < end):
            first = not page.size
            try:
                seg = segment_for(cur)
            except OffsetOutOfRangeError:
                if first:
                    raise
                break
            fd = seg.read_fd()
            read = page.reader(fd, seg.cut_guard)  # before size and index: see the page
            size = seg.size  # complete batches only: size grows after a write completes
            try:
                pos, base = _position_of(seg, cur)
            except CorruptRangeError:
                if first:
                    raise
                break  # serve what came before the damage
            if pos >= size:
                break
            buf, taken, nxt = _take_batches(
                seg,
                read,
                pos,
                size,
                base,
                offset + max_records - base,
                max_bytes - page.size,
                first,
                end,
            )
            if taken == 0:
                break
            page.add(fd, pos, buf, 0, taken)
            cur = nxt
            if pos + taken < size:
                break  # a limit was reached inside this segment
    except BaseException:
        page.close()
        raise
    return page.result(cur)


def _damaged(seg: Segment, pos: int, offset: int, what: str) -> CorruptRangeError:
    """The error for reading ``offset`` from ``seg``, damaged at byte ``pos`` (``what``
    says how), logged as an ERROR the first time this place is met (the client's message
    names the segment file, not the server's paths)."""
    key = (str(seg.store_path), pos)
    with _reported_lock:
        first = key not in _reported
        if first:
            if len(_reported) >= 4096:
                _reported.clear()
            _reported.add(key)
    if first:
        log.error(
            "damaged local data in %s (reading offset %d): %s; fetches of the "
            "damaged records answer 410 corrupt_record",
            seg.store_path,
            offset,
            what,
        )
    return CorruptRangeError(
        f"offset {offset}: {what}; its records cannot be served (the stored data is damaged)"
    )


def _position_of(seg: Segment, offset: int) -> tuple[int, int]:
    """:meth:`Segment.position_of`; a sealed segment whose batch headers do not lead to
    ``offset`` (one that does not follow, or they run past the end) gets its index
    rebuilt (as its reads do), and if its store is what is damaged, CorruptRangeError."""
    try:
        pos, base = seg.position_of(offset)
        if not seg.sealed or pos < seg.size or offset >= seg.next_offset:
            return pos, base
    except CorruptIndexError:
        if not seg.sealed:
            raise
    try:
        seg.rebuild_index()
    except CorruptRecordError as exc:
        raise _damaged(seg, -1, offset, str(exc)) from None
    return seg.position_of(offset)


def _intact(buf: bytes | memoryview, at: int, size: int, base: int) -> bool:
    """Whether the batch at ``buf[at:at+size]`` (base offset ``base``) verifies: its
    framing (magic, a batchLength that makes it ``size`` bytes) and its CRC-32C, which
    covers the bytes from its attributes to its end (the base offset, which it does not
    cover, the walk checks against the offset sequence)."""
    try:
        check_batches(memoryview(buf)[at : at + size], base)
    except CorruptRecordError:
        return False
    return True


def _take_batches(
    seg: Segment,
    read: Reader,
    pos: int,
    end: int,
    base: int,
    records: int,
    budget: int,
    first: bool,
    upto: int | None = None,
) -> tuple[bytes | memoryview, int, int]:
    """Read whole batches of ``seg`` from byte ``pos`` (the batch at offset ``base``)
    until they hold ``records`` records from ``base`` or take ``budget`` bytes (the first
    batch always, when ``first``), and never one holding an offset at or past ``upto``
    (not even the first: then nothing is taken). ``read(position, length)`` reads the
    segment's store. Returns the bytes read, how many of them are batches taken, and the
    offset after the last one taken.

    Reads about what the page needs: a first guess from the segment's mean record size
    (plus slack), grown when it falls short, never past ``budget`` (except for a first
    batch larger than it, read whole). Every batch taken is checked (framing and CRC-32C,
    not decoded): the walk stops before one that fails, and a failing first
    batch (read twice, in case a truncation was rewriting it) is CorruptRangeError.
    """
    count = seg.next_offset - seg.base_offset
    avg = seg.size // count if count > 0 else HEADER_SIZE
    guess = min(
        end - pos, max(budget, HEADER_SIZE) + _READ_SLACK, avg * (records + 1) + _READ_SLACK
    )
    if upto is not None:  # no need to read past the batches below ``upto``
        records = min(records, upto - base)
    checked = 0  # bytes from ``pos`` already verified (a re-read holds the same batches)
    while True:
        buf = read(pos, guess)
        walked, nxt, short, capped = 0, base, False, False
        while nxt - base < records and walked < budget:
            if walked + HEADER_SIZE > len(buf):
                short = True
                break
            off, size, n = batch_header(buf, walked)
            if off != nxt or size < HEADER_SIZE or n < 1:
                if walked == 0 and first:
                    raise CorruptRecordError(
                        f"expected offset {base} at byte {pos} of {seg.store_path.name}"
                    )
                break  # a racing truncation rewrote the tail: stop here
            if upto is not None and off + n > upto:
                capped = True  # this batch reaches the cap: the page ends before it
                break
            if (walked or not first) and walked + size > budget:
                break
            if walked + size > len(buf):
                short = True
                break
            if walked >= checked and not _intact(buf, walked, size, off):
                if walked == 0 and first:
                    return _first_batch_again(seg, read, pos, end, base)
                break  # serve the batches before it; a read from it gets the error
            walked += size
            checked = max(checked, walked)
            nxt = off + n
        grown = min(end - pos, max(budget, HEADER_SIZE) + _READ_SLACK, guess * 4)
        if short and len(buf) == guess and grown > guess:
            guess = grown  # the read fell short of what the limits allow: read more
            continue
        if walked == 0 and first and not capped:
            if len(buf) < HEADER_SIZE:
                raise CorruptRecordError(f"truncated batch at byte {pos} of {seg.store_path.name}")
            # The first batch is larger than the budget: take it whole on its own.
            return _first_batch_again(seg, read, pos, end, base)
        return buf, walked, nxt


def _first_batch_again(
    seg: Segment, read: Reader, pos: int, end: int, base: int
) -> tuple[bytes | memoryview, int, int]:
    """The first batch of a page on its own (read again, whole): the batch at byte ``pos``
    holding offset ``base``, verified; CorruptRangeError if it does not verify."""
    off, size, n = batch_header(seg.read_bytes(pos, HEADER_SIZE))
    whole = read(pos, size) if size >= HEADER_SIZE and pos + size <= end else b""
    where = f"the stored batch at byte {pos} of segment {seg.store_path.name}"
    if off != base or len(whole) != size:
        raise _damaged(seg, pos, base, f"{where} has a damaged header")
    if not _intact(whole, 0, size, off):
        raise _damaged(seg, pos, base, f"{where} fails its CRC-32C check")
    return whole, size, off + n


__all__ = ["read_batches", "walk_batches"]
