"""Verifying and decoding record batches: one checked walk, and what reads through it.

The layout is drawn in :mod:`tiered_log.format.batch`. :func:`_parse` verifies one batch
(its xxh3 checksum against the base offset it carries, magic, count, that its lengths add
up) and reads its columns; every reader here goes through it, so a damaged record is
never returned:

- :func:`decode_records`: records from an offset within limits (the read path);
- :func:`decode_columns`: every record as columns without building a record or copying a
  value (the Spark source's Arrow batches);
- :func:`receive_batches`: a client's batches checked whole before they are appended;
- :func:`batch_table` / :func:`scan_batches`: the batches of a store that verify and
  follow in sequence (recovery's torn-tail cut point, index rebuilds, chunking a segment
  to ship, the verify and dump tools);
- :func:`check_batches`: a fetched page's batches checked by their checksums alone, no
  column read and no record built (what a follower, a rebuild or a columnar reader needs
  before it passes the bytes on).

Everything here is pure and stateless: safe from any thread.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator
from itertools import accumulate, repeat
from typing import NamedTuple, cast

from ..errors import CorruptRecordError, InvalidArgumentError, RecordTooLargeError
from .batch import (
    ATTRIBUTES,
    ATTRIBUTES_AT,
    CHECKED_FROM,
    HEADER,
    HEADER_SIZE,
    KNOWN_ATTRIBUTES,
    MAGIC,
    RECORD_OVERHEAD,
    BatchInfo,
    Headers,
    Record,
    batch_info,
    decode_headers,
    h64,
    read_column,
)
from .batch_encode import EncodedBatch

_new = tuple.__new__


class _Incomplete(Exception):
    """The buffer ends inside a batch (not an error by itself: read more, or a torn tail)."""


class _Parsed(NamedTuple):
    """A verified batch's columns (see :func:`_parse`)."""

    base: int
    n: int  # records
    checksum: int
    end: int
    timestamps: array[int]
    klens: array[int] | None  # None: no record has a key
    vlens: array[int]
    hlens: array[int] | None  # None: no record has headers
    data: int  # position of the first key (or value)


def _parse(buf: bytes | bytearray | memoryview, pos: int, end: int) -> _Parsed:
    """Verify the batch at ``pos`` (checksum, magic, lengths) and read its columns.

    Raises ``_Incomplete`` when it runs past ``end``; CorruptRecordError when damaged.
    """
    if pos + HEADER_SIZE > end:
        raise _Incomplete
    base, size, cs, magic, _attrs, n = HEADER.unpack_from(buf, pos)
    if size < HEADER_SIZE + RECORD_OVERHEAD:
        raise CorruptRecordError(f"batch at byte {pos} has an impossible size {size}")
    bend = pos + size
    if bend > end:
        raise _Incomplete
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    if h64(mv[pos + CHECKED_FROM : bend], base) != cs:
        raise CorruptRecordError(f"checksum mismatch for the batch at offset {base}")
    if magic != MAGIC or n < 1 or HEADER_SIZE + RECORD_OVERHEAD * n > size:
        raise CorruptRecordError(f"batch at offset {base} has a bad header")
    p = pos + HEADER_SIZE
    ts = read_column(mv, p, "q", n)
    kcol = read_column(mv, p + 8 * n, "i", n)
    vl = read_column(mv, p + 12 * n, "I", n)
    hcol = read_column(mv, p + 16 * n, "I", n)
    p += RECORD_OVERHEAD * n
    keys_len = 0
    kl: array[int] | None = None
    if kcol.count(-1) != n:
        if min(kcol) < -1:
            raise CorruptRecordError(f"batch at offset {base} has a bad key length")
        keys_len = sum(k for k in kcol if k > 0)
        kl = kcol
    hl: array[int] | None = hcol if hcol.count(0) != n else None
    if p + keys_len + sum(vl) + sum(hcol) != bend:
        raise CorruptRecordError(f"batch at offset {base}: its lengths do not add up")
    return _Parsed(base, n, cs, bend, ts, kl, vl, hl, p)


def _fields(
    buf: bytes | memoryview,
    b: _Parsed,
    lo: int,
    hi: int,
) -> tuple[Iterable[bytes | None], Iterator[bytes | memoryview], Iterable[Headers]]:
    """Keys, values and headers of records ``lo .. hi-1`` (indexes within the parsed batch
    ``b`` of ``buf``). Values are slices of ``buf`` (``bytes`` of a ``bytes`` buffer,
    zero-copy views of a memoryview); keys are ``bytes``. Raises CorruptRecordError on a
    malformed header block."""
    m = hi - lo
    p = b.data
    keys: Iterable[bytes | None]
    if b.klens is None:
        keys = repeat(None, m)
    else:
        kpos = list(accumulate((k if k > 0 else 0 for k in b.klens), initial=p))
        p = kpos[-1]
        keys = [
            bytes(buf[kpos[i] : kpos[i + 1]]) if b.klens[i] >= 0 else None for i in range(lo, hi)
        ]
    vpos = list(accumulate(b.vlens, initial=p))
    cut = cast("Callable[[slice], bytes | memoryview]", buf.__getitem__)
    values = map(cut, map(slice, vpos[lo:hi], vpos[lo + 1 : hi + 1]))
    headers: Iterable[Headers]
    if b.hlens is None:
        headers = repeat((), m)
    else:
        hpos = list(accumulate(b.hlens, initial=vpos[-1]))
        headers = [
            decode_headers(buf, hpos[i], hpos[i + 1]) if b.hlens[i] else () for i in range(lo, hi)
        ]
    return keys, values, headers


def _records(buf: bytes, b: _Parsed, lo: int, hi: int) -> list[Record]:
    """Records ``lo .. hi-1`` (indexes within the batch) of a parsed batch of ``buf``."""
    m = hi - lo
    keys, values, headers = _fields(buf, b, lo, hi)
    return list(
        map(
            _new,
            repeat(Record, m),
            zip(
                range(b.base + lo, b.base + hi),
                b.timestamps[lo:hi],
                keys,
                values,
                headers,
                repeat(b.checksum, m),
                strict=True,
            ),
        )
    )


def _check_header_blocks(buf: bytes | bytearray | memoryview, b: _Parsed) -> None:
    """Raise CorruptRecordError if a header block of the parsed batch ``b`` is malformed
    (the lengths :func:`_parse` checks cannot tell)."""
    if b.hlens is None:
        return
    hpos = list(accumulate(b.hlens, initial=b.end - sum(b.hlens)))
    mv = memoryview(buf)
    for i, h in enumerate(b.hlens):
        if h:
            decode_headers(mv, hpos[i], hpos[i + 1])


def _record_ends(b: _Parsed) -> list[int]:
    """Cumulative record sizes of a parsed batch (``[0, s0, s0+s1, ...]``)."""
    if b.klens is None and b.hlens is None:
        return list(accumulate((v + RECORD_OVERHEAD for v in b.vlens), initial=0))
    kl = b.klens if b.klens is not None else repeat(-1, b.n)
    hl = b.hlens if b.hlens is not None else repeat(0, b.n)
    return list(
        accumulate(
            (
                RECORD_OVERHEAD + (k if k > 0 else 0) + v + h
                for k, v, h in zip(kl, b.vlens, hl, strict=True)
            ),
            initial=0,
        )
    )


def decode_records(
    buf: bytes | memoryview,
    pos: int = 0,
    end: int | None = None,
    *,
    start_offset: int | None = None,
    max_records: int | None = None,
    max_bytes: int | None = None,
    at_least_one: bool = True,
) -> tuple[list[Record], int, int]:
    """Decode verified records from the batches of ``buf[pos:end]``.

    Skips records below ``start_offset`` (whole batches without verifying them, as long as
    they end before it); stops at ``max_records``, at ``max_bytes`` of record sizes
    (returning at least one record if ``at_least_one``), or at the first incomplete batch.
    Returns the records, the position after the last batch it took every wanted record
    of (so a caller that goes on from there with ``start_offset`` = the next offset
    misses nothing), and the bytes (record sizes) of the returned records. Raises
    CorruptRecordError on a damaged batch: a corrupt record is never returned.
    """
    end = len(buf) if end is None else end
    data = buf if isinstance(buf, bytes) else bytes(buf)
    out: list[Record] = []
    used = 0
    limit_n = max_records if max_records is not None else 1 << 62
    limit_b = max_bytes if max_bytes is not None else 1 << 62
    unpack = HEADER.unpack_from
    while len(out) < limit_n and pos + HEADER_SIZE <= end:
        base, size, _cs, _m, _a, n = unpack(data, pos)
        if start_offset is not None and base + n <= start_offset and size >= HEADER_SIZE:
            if pos + size > end:
                break
            pos += size
            continue
        try:
            b = _parse(data, pos, end)
        except _Incomplete:
            break
        lo = start_offset - base if start_offset is not None and start_offset > base else 0
        hi = min(n, lo + limit_n - len(out))
        if max_bytes is not None:
            ends = _record_ends(b)
            room = limit_b - used
            cut = bisect_right(ends, ends[lo] + room) - 1
            if at_least_one and not out and cut <= lo:
                cut = lo + 1
            hi = min(hi, cut)
            taken = ends[hi] - ends[lo]
        else:
            taken = 0
        if hi > lo:
            out.extend(_records(data, b, lo, hi))
            used += taken
        if hi < n:
            break
        pos = b.end
        if max_bytes is not None and used >= limit_b:
            break
    return out, pos, used


class FrameColumns(NamedTuple):
    """The verified records of a buffer as columns (what :func:`decode_columns` returns).

    ``values[i]`` is a zero-copy ``memoryview`` into the decoded buffer; ``values`` join
    with ``b"".join``. ``end`` is the position after the last complete batch.
    """

    offsets: list[int]
    timestamps: list[int]
    keys: list[bytes | None]
    values: list[bytes | memoryview]
    headers: list[Headers]
    end: int


def decode_columns(buf: bytes | memoryview) -> FrameColumns:
    """Every record of the complete batches of ``buf``, checksums verified, as columns,
    without building a :class:`Record` or copying a value: for consumers that build
    columnar batches (the Spark source's Arrow batches). Stops at the first incomplete
    batch (see ``end``); raises CorruptRecordError on a damaged one.
    """
    mv = memoryview(buf)
    end = len(mv)
    offsets: list[int] = []
    timestamps: list[int] = []
    keys: list[bytes | None] = []
    values: list[bytes | memoryview] = []
    headers: list[Headers] = []
    pos = 0
    while True:
        try:
            b = _parse(mv, pos, end)
        except _Incomplete:
            break
        keys_i, values_i, headers_i = _fields(mv, b, 0, b.n)
        offsets.extend(range(b.base, b.base + b.n))
        timestamps.extend(b.timestamps)
        keys.extend(keys_i)
        values.extend(values_i)
        headers.extend(headers_i)
        pos = b.end
    return FrameColumns(offsets, timestamps, keys, values, headers, pos)


def receive_batches(
    buf: bytes | bytearray | memoryview,
    append_threshold: int,
    *,
    max_records: int | None = None,
    in_place: bool = False,
) -> EncodedBatch:
    """A client's batches (the binary produce request), checked whole, ready to append.

    Every batch is verified before anything is returned: its checksum (against the base
    offset it carries), its lengths, its values (not empty, at most ``append_threshold``
    bytes), its timestamps (below 2**62; a negative one means "the appending log's clock"),
    its headers and its attributes (no bit outside :data:`KNOWN_ATTRIBUTES`, none
    today). The batches' offsets are not checked against each other: the log
    assigns new ones (:meth:`EncodedBatch.rebased`). ``buf`` is copied once, unless
    ``in_place`` and it is a ``bytearray``: then it becomes the returned batch's ``data``
    as it is (the service's produce body, read into a buffer of its own; the caller hands
    it over and must not touch it again, as the rebase rewrites it in place).

    Raises CorruptRecordError naming the first bad batch (index, byte position, offset),
    also when ``buf`` ends inside a batch or a batch has unknown attribute bits;
    RecordTooLargeError for a value over ``append_threshold``; InvalidArgumentError for
    an empty ``buf``, more than ``max_records`` records, an empty value or a timestamp
    past the 2**62 ms range.
    """
    data = buf if in_place and isinstance(buf, bytearray) else bytearray(buf)
    end = len(data)
    if end == 0:
        raise InvalidArgumentError("the body holds no record batches")
    limit = max_records if max_records is not None else 1 << 62
    infos: list[BatchInfo] = []
    total = 0
    pos = 0
    i = 0
    while pos < end:
        where = f"batch {i} (at byte {pos}"
        try:
            b = _parse(data, pos, end)
        except _Incomplete:
            raise CorruptRecordError(f"{where}): the body ends inside it") from None
        except CorruptRecordError as exc:
            raise CorruptRecordError(f"{where}): {exc}") from None
        where += f", offset {b.base})"
        (attributes,) = ATTRIBUTES.unpack_from(data, pos + ATTRIBUTES_AT)
        if attributes & ~KNOWN_ATTRIBUTES:
            raise CorruptRecordError(
                f"{where}: attributes 0x{attributes:04x} has bits the format does not define "
                "(attributes must be 0)"
            )
        total += b.n
        if total > limit:
            raise InvalidArgumentError(f"more than {limit} records in one request")
        if min(b.vlens) == 0:
            raise InvalidArgumentError(f"{where}: a record value must not be empty")
        if max(b.vlens) > append_threshold:
            raise RecordTooLargeError(
                f"{where}: a value of {max(b.vlens)} bytes exceeds the append threshold of "
                f"{append_threshold} bytes"
            )
        if max(b.timestamps) >= 1 << 62:
            raise InvalidArgumentError(f"{where}: timestamp {max(b.timestamps)} is out of range")
        try:
            _check_header_blocks(data, b)
        except CorruptRecordError as exc:
            raise CorruptRecordError(f"{where}: {exc}") from None
        infos.append(batch_info(b.base, pos, b.end - pos, b.timestamps))
        pos = b.end
        i += 1
    return EncodedBatch(infos[0].base_offset, data, infos, total)


def batch_table(buf: bytes | memoryview, expect_offset: int) -> tuple[list[BatchInfo], int]:
    """Verify the batches of ``buf`` from byte 0, which must hold offsets
    ``expect_offset``, +1, ...: ``(batches, end)``, ``end`` being the position after the
    last verified one. Stops (without raising) at the first batch that is incomplete,
    damaged or breaks the offset sequence: for recovery (the torn-tail cut point), index
    rebuilds, cutting a segment into chunks to ship, and the verify/dump tools."""
    mv = memoryview(buf)
    end = len(mv)
    out: list[BatchInfo] = []
    pos = 0
    expect = expect_offset
    while True:
        try:
            b = _parse(mv, pos, end)
        except (_Incomplete, CorruptRecordError):
            break
        if b.base != expect:
            break
        try:  # header blocks must decode too
            _check_header_blocks(mv, b)
        except CorruptRecordError:
            break
        out.append(batch_info(b.base, pos, b.end - pos, b.timestamps))
        expect += b.n
        pos = b.end
    return out, pos


def check_batches(buf: bytes | bytearray | memoryview, first_offset: int) -> tuple[int, int]:
    """Check a binary fetch's page without decoding it: ``(batches, next_offset)``.

    Per batch one xxh3 pass over its bytes as stored (against the base offset it
    carries) and a look at its header (magic, count, a size that holds the columns);
    the batches must follow one another in offset order, the first holding
    ``first_offset`` (a page's first batch may begin below it), and the page must end
    where its last batch does. No column is read and no record built, so the cost is
    the checksum pass alone. An empty ``buf`` is ``(0, first_offset)``.
    CorruptRecordError names the first batch that fails.
    """
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    end = len(mv)
    unpack = HEADER.unpack_from
    pos = 0
    n = 0
    nxt = first_offset
    while pos < end:
        if pos + HEADER_SIZE > end:
            raise CorruptRecordError(f"the page ends inside the header of batch {n} (byte {pos})")
        base, size, cs, magic, _attrs, count = unpack(mv, pos)
        bend = pos + size
        if (
            magic != MAGIC
            or count < 1
            or size < HEADER_SIZE + RECORD_OVERHEAD * count
            or bend > end
        ):
            raise CorruptRecordError(
                f"batch {n} (byte {pos}, offset {base}) has a bad header or runs past the page"
            )
        if h64(mv[pos + CHECKED_FROM : bend], base) != cs:
            raise CorruptRecordError(f"checksum mismatch for the batch at offset {base}")
        if (base != nxt) if n else not base <= first_offset < base + count:
            raise CorruptRecordError(
                f"batch {n} holds offsets [{base}, {base + count}), "
                f"expected one {'at' if n else 'holding'} {nxt}"
            )
        nxt = base + count
        pos = bend
        n += 1
    return n, nxt


def scan_batches(buf: bytes | memoryview, expect_offset: int) -> Iterator[BatchInfo]:
    """The verified batches of ``buf`` (see :func:`batch_table`), one at a time."""
    yield from batch_table(buf, expect_offset)[0]
