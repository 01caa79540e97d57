"""Verifying and decoding record batches: one checked walk, and what reads through it.

The layout and which check guards which bytes are in :mod:`tiered_log.format.batch`.
:func:`_parse` verifies one batch's framing and CRC-32C (one ``struct`` unpack and one
``crc32c`` call, no loop over records); every reader here goes through it, so a damaged
record is never returned:

- :func:`decode_records`: records from an offset within limits (the read path);
- :func:`decode_columns`: every record as columns without building a record or copying a
  value (the Spark source's Arrow batches);
- :func:`receive_batches`: a client's batches checked whole (their records parsed too)
  before they are appended;
- :func:`batch_table` / :func:`scan_batches`: the batches of a store that verify and
  follow in sequence (recovery's torn-tail cut point, index rebuilds, chunking a segment
  to ship, the verify and dump tools);
- :func:`check_batches`: a fetched page's batches checked by framing and CRC alone, no
  record read (what a follower, a rebuild or a columnar reader needs before it passes
  the bytes on).

Compressed batches are decompressed by the readers that read records
(:func:`decode_records`, :func:`decode_columns`, :func:`receive_batches`); the walks over
stored bytes do not need to. A batch of the format before Kafka v2 raises
:class:`~tiered_log.format.batch.LegacyFormatError` wherever a batch is verified.

Everything here is pure and stateless: safe from any thread.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator
from itertools import accumulate
from typing import NamedTuple, overload

from crc32c import crc32c

from ..errors import CorruptRecordError, InvalidArgumentError, RecordTooLargeError
from .batch import (
    ATTRIBUTES_AT,
    CONTROL_BIT,
    CRC_AT,
    DELETE_HORIZON_BIT,
    HEADER,
    HEADER_SIZE,
    KNOWN_ATTRIBUTES,
    LEGACY_HINT,
    LOG_OVERHEAD,
    MAGIC,
    MIN_BATCH_LENGTH,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    BatchInfo,
    Headers,
    LegacyFormatError,
    Record,
    is_legacy_batch,
)
from .batch_encode import EncodedBatch
from .kafka import native
from .kafka.compression import decompress
from .kafka.layout import COMPRESSION_MASK, MAGIC_AT, MAX_TIMESTAMP_AT
from .kafka.records import (
    SectionFacts,
    check_record_attributes,
    check_section,
    check_section_end,
    decode_section,
    record_sizes,
    section_columns,
    skip_records,
)

_unpack = HEADER.unpack_from
_MAX_TS = 1 << 62


class _Incomplete(Exception):
    """The buffer ends inside a batch (not an error by itself: read more, or a torn tail)."""


class _Parsed(NamedTuple):
    """A verified batch's header (see :func:`_parse`)."""

    base: int
    n: int  # records
    crc: int
    attributes: int
    base_timestamp: int
    max_timestamp: int
    pos: int
    end: int


def _parse(buf: bytes | bytearray | memoryview, pos: int, end: int) -> _Parsed:
    """Verify the framing and CRC-32C of the batch at ``pos`` (not its records).

    Raises ``_Incomplete`` when it runs past ``end``; CorruptRecordError when damaged
    (LegacyFormatError for a batch of the format before Kafka v2).
    """
    if end - pos < HEADER_SIZE:
        if (end - pos > MAGIC_AT and buf[pos + MAGIC_AT] != MAGIC) or is_legacy_batch(buf, pos):
            _bad_magic(buf, pos, end)
        raise _Incomplete
    if buf[pos + 21] == 0x54 and buf[pos + 20] == 0x42:  # b"BT": never a v2 attributes byte
        raise LegacyFormatError(f"batch at byte {pos}: {LEGACY_HINT}")
    f = _unpack(buf, pos)
    base, length, magic, crc, attrs, lod, count = f[0], f[1], f[3], f[4], f[5], f[6], f[12]
    if magic != MAGIC:
        _bad_magic(buf, pos, end)
    if length < MIN_BATCH_LENGTH:
        raise CorruptRecordError(f"batch at byte {pos} has an impossible batchLength {length}")
    bend = pos + LOG_OVERHEAD + length
    if bend > end:
        raise _Incomplete
    if crc32c(memoryview(buf)[pos + ATTRIBUTES_AT : bend]) != crc:
        raise CorruptRecordError(f"CRC-32C mismatch for the batch at offset {base} (byte {pos})")
    if count < 1 or count != lod + 1:
        raise CorruptRecordError(
            f"batch at offset {base} has records count {count} and lastOffsetDelta {lod}"
        )
    if attrs & COMPRESSION_MASK > 4:
        raise CorruptRecordError(
            f"batch at offset {base} has an unknown compression codec {attrs & COMPRESSION_MASK}"
        )
    return _Parsed(base, count, crc, attrs, f[7], f[8], pos, bend)


def _bad_magic(buf: bytes | bytearray | memoryview, pos: int, end: int) -> None:
    if is_legacy_batch(buf, pos):
        raise LegacyFormatError(f"batch at byte {pos}: {LEGACY_HINT}")
    raise CorruptRecordError(
        f"batch at byte {pos} has magic {buf[pos + MAGIC_AT]}, not 2 (not a Kafka v2 record batch)"
    )


@overload
def _section(data: bytes, b: _Parsed) -> tuple[bytes, int, int]: ...
@overload
def _section(data: bytearray, b: _Parsed) -> tuple[bytes | bytearray, int, int]: ...
def _section(data: bytes | bytearray, b: _Parsed) -> tuple[bytes | bytearray, int, int]:
    """The records section of the parsed batch ``b`` of ``data``: ``(bytes, start,
    end)``, the batch's own bytes when not compressed, else the decompressed copy."""
    codec = b.attributes & COMPRESSION_MASK
    if not codec:
        return data, b.pos + HEADER_SIZE, b.end
    section = decompress(codec, memoryview(data)[b.pos + HEADER_SIZE : b.end])
    return section, 0, len(section)


def _check_natively(
    data: bytes | bytearray, b: _Parsed, section: bytes | bytearray, spos: int, send: int
) -> SectionFacts:
    """:func:`~.kafka.records.check_section` of the CreateTime batch ``b`` of ``data``
    (its records ``section[spos:send]``) by the C reader (:mod:`.kafka.native`), after
    a walk over the record lengths refuses what that reader would read otherwise than
    Kafka (:func:`~.kafka.records.check_record_attributes`); for a batch refused, the
    Python check names the fault (the error is the first one's only if that check finds
    none)."""
    batch = memoryview(data)[b.pos : b.end]
    try:
        check_record_attributes(section, spos, send, b.n)
        return native.check(
            native.plain_batch(batch, None if section is data else section),
            b.n,
            b.base,
            b.base_timestamp,
        )
    except CorruptRecordError:
        _check_section_of(section, spos, send, b.n)
        raise


def _check_section_of(section: bytes | bytearray, spos: int, send: int, n: int) -> SectionFacts:
    """:func:`~.kafka.records.check_section` of ``section[spos:send]``, which it reads
    as bytes (fast item access): a bytearray's range is copied, bytes are read as they
    are."""
    if isinstance(section, bytes):
        return check_section(section, spos, send, n)
    with memoryview(section) as view:
        return check_section(bytes(view[spos:send]), 0, send - spos, n)


def _lat(b: _Parsed) -> int | None:
    """The LogAppendTime of a parsed batch (every record's timestamp), or None."""
    return b.max_timestamp if b.attributes & TIMESTAMP_TYPE_BIT else None


def _follows(base: int, n: int, nxt: int | None, at: int) -> int:
    """The end of a batch ``[base, base + n)`` read at byte ``at`` right after one that
    ended at ``nxt`` (None: the first one read); CorruptRecordError if it does not
    begin there. A batch's base offset lies outside its CRC-32C: only this sequence
    finds it damaged."""
    if nxt is not None and base != nxt:
        raise CorruptRecordError(
            f"the batch at byte {at} holds offsets [{base}, {base + n}), expected one at {nxt}"
        )
    return base + n


def decode_records(
    buf: bytes | bytearray | memoryview,
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
    misses nothing), and the bytes (record sizes) of the returned records. Compressed
    batches are decompressed. Raises CorruptRecordError on a damaged batch: a corrupt
    record is never returned. With ``start_offset``, the batches read must also follow
    one another (each one's base offset the end of the one before): a batch's base
    offset lies outside its CRC-32C, so a damaged one is found only so (a caller checks
    that the first record is ``start_offset``).
    """
    end = len(buf) if end is None else end
    shift = 0
    if isinstance(buf, bytes):
        data = buf
    else:  # one copy of the window (item access on bytes is what the walk is fast on)
        data = bytes(memoryview(buf)[pos:end])
        shift, pos, end = pos, 0, end - pos
    out: list[Record] = []
    used = 0
    nxt: int | None = None  # where the next batch read must begin (with start_offset)
    limit_n = max_records if max_records is not None else 1 << 62
    limit_b = max_bytes if max_bytes is not None else 1 << 62
    while len(out) < limit_n and pos + HEADER_SIZE <= end:
        if start_offset is not None and nxt is None:  # skipping up to start_offset
            f = _unpack(data, pos)
            size = f[1] + LOG_OVERHEAD
            if f[0] + f[6] + 1 <= start_offset and size >= HEADER_SIZE and f[3] == MAGIC:
                if pos + size > end:
                    break
                pos += size
                continue
        try:
            b = _parse(data, pos, end)
        except _Incomplete:
            break
        section, spos, send = _section(data, b)
        if nxt is not None:
            _follows(b.base, b.n, nxt, pos + shift)
        lo = start_offset - b.base if start_offset is not None and start_offset > b.base else 0
        if lo >= b.n:  # the batch ends before start_offset (only a damaged header gets here)
            pos = b.end
            continue
        if start_offset is not None:
            nxt = b.base + b.n
        p = skip_records(section, spos, send, lo) if lo else spos
        want = min(b.n - lo, limit_n - len(out))
        first_free = at_least_one and not out
        if native.ENABLED and want >= _NATIVE_MIN and lo <= 4 * want:
            recs, took_bytes = _native_records(
                data, b, section, p, send, lo, want, limit_b - used, first_free
            )
        else:
            got = decode_section(
                section,
                p,
                send,
                b.n,
                b.base,
                b.base_timestamp,
                _lat(b),
                b.crc,
                limit=want,
                max_bytes=limit_b - used,
                first_free=first_free,
            )
            if not lo and len(got.records) == b.n:
                check_section_end(got.pos, send, b.n)
            recs, took_bytes = got.records, got.used
        took = lo + len(recs)
        out.extend(recs)
        used += took_bytes
        if took < b.n:
            break
        pos = b.end
        if used >= limit_b:
            break
    return out, pos + shift, used


_NATIVE_MIN = 8
"""The fewest records worth handing to the C reader (:mod:`.kafka.native`), which
decodes from a batch's first record: used when at least this many are wanted and no
more than four times as many precede them in the batch."""


def _native_records(
    data: bytes,
    b: _Parsed,
    section: bytes,
    p: int,
    send: int,
    lo: int,
    want: int,
    room: int,
    first_free: bool,
) -> tuple[list[Record], int]:
    """Records ``lo`` .. of the parsed batch ``b`` (record ``lo`` at ``section[p]``), at
    most ``want`` of them and ``room`` bytes of them (the first free if
    ``first_free``), read by the C reader: ``(records, their bytes)``."""
    sizes = record_sizes(section, p, send, want)
    if not lo and want == b.n and p + sum(sizes) != send:
        check_section_end(p + sum(sizes), send, b.n)
    ends = list(accumulate(sizes))
    if ends[-1] > room:
        take = bisect_right(ends, room)
        if not take and first_free:
            take = 1
        sizes = sizes[:take]
        if not sizes:
            return [], 0
    batch = memoryview(data)[b.pos : b.end]
    plain = native.plain_batch(batch, None if section is data else section)
    return native.records(plain, lo, sizes, b.crc), sum(sizes)


class FrameColumns(NamedTuple):
    """The verified records of a buffer as columns (what :func:`decode_columns` returns).

    ``values[i]`` is None for a null value, else a zero-copy ``memoryview`` into the
    decoded buffer (or into a compressed batch's decompressed records), or ``bytes``
    when the C reader (:mod:`.kafka.native`) read them; non-null values join with
    ``b"".join``. ``end`` is the position after the last complete batch.
    """

    offsets: list[int]
    timestamps: list[int]
    keys: list[bytes | None]
    values: list[bytes | memoryview | None]
    headers: list[Headers]
    end: int


def decode_columns(buf: bytes | bytearray | memoryview) -> FrameColumns:
    """Every record of the complete batches of ``buf``, CRCs verified, as columns,
    without building a :class:`Record` or copying a value: for consumers that build
    columnar batches (the Spark source's Arrow batches). Stops at the first incomplete
    batch (see ``end``); raises CorruptRecordError on a damaged one, or on batches that
    do not follow one another in offset order.
    """
    mv = memoryview(buf)
    data = buf if isinstance(buf, bytes) else bytes(mv)
    end = len(data)
    offsets: list[int] = []
    timestamps: list[int] = []
    keys: list[bytes | None] = []
    values: list[bytes | memoryview | None] = []
    headers: list[Headers] = []
    pos = 0
    nxt: int | None = None
    while True:
        try:
            b = _parse(data, pos, end)
        except _Incomplete:
            break
        nxt = _follows(b.base, b.n, nxt, pos)
        section, spos, send = _section(data, b)
        if native.ENABLED:
            batch = mv[b.pos : b.end]
            plain = native.plain_batch(batch, None if section is data else section)
            native.columns(plain, b.n, offsets, timestamps, keys, values, headers)
            pos = b.end
            continue
        section_columns(
            section,
            spos,
            send,
            b.n,
            b.base,
            b.base_timestamp,
            _lat(b),
            mv if section is data else memoryview(section),
            offsets,
            timestamps,
            keys,
            values,
            headers,
        )
        pos = b.end
    return FrameColumns(offsets, timestamps, keys, values, headers, pos)


def receive_batches(
    buf: bytes | bytearray | memoryview,
    append_threshold: int,
    *,
    max_records: int | None = None,
    in_place: bool = False,
) -> EncodedBatch:
    """A client's batches (the binary produce request, a Kafka Produce, a follower's
    copy of its leader's batches), checked whole, ready to append.

    Every batch is verified before anything is returned: magic 2, framing, CRC-32C, its
    records (decompressed if the batch is compressed) parsed with offset deltas 0, 1,
    ..., values at most ``append_threshold`` bytes, timestamps below 2**62, and its
    attributes: a codec and the timestamp type only (no transactional, control or
    delete-horizon batch). Batches are kept as sent (compressed ones stay compressed;
    producer id, epoch and base sequence kept), except that a CreateTime batch whose
    maxTimestamp is not its records' largest timestamp gets the right one written (the
    CRC recomputed), as Kafka's broker does. The batches' offsets are not checked
    against each other: the log assigns new ones (:meth:`EncodedBatch.rebased`).
    ``buf`` is copied once, unless ``in_place`` and it is a ``bytearray``: then it
    becomes the returned batch's ``data`` as it is (the service's produce body, read
    into a buffer of its own; the caller hands it over and must not touch it again, as
    the rebase rewrites it in place).

    Raises CorruptRecordError naming the first bad batch (index, byte position, offset),
    also when ``buf`` ends inside a batch or a batch has unknown attribute bits
    (LegacyFormatError for the format before Kafka v2); RecordTooLargeError for a value
    over ``append_threshold``; InvalidArgumentError for an empty ``buf``, more than
    ``max_records`` records, a timestamp past the 2**62 ms range, or a transactional or
    control batch.
    """
    data = buf if in_place and isinstance(buf, bytearray) else bytearray(buf)
    end = len(data)
    if end == 0:
        raise InvalidArgumentError("the body holds no record batches")
    limit = max_records if max_records is not None else 1 << 62
    # The walk reads a frozen copy (fast item access; edits go to data), which the C
    # reader of the records does not need.
    frozen: bytes | bytearray = data if native.ENABLED else bytes(data)
    infos: list[BatchInfo] = []
    total = 0
    pos = 0
    i = 0
    while pos < end:
        where = f"batch {i} (at byte {pos}"
        try:
            b = _parse(frozen, pos, end)
        except _Incomplete:
            raise CorruptRecordError(f"{where}): the body ends inside it") from None
        except LegacyFormatError as exc:
            raise LegacyFormatError(f"{where}): {exc}") from None
        except CorruptRecordError as exc:
            raise CorruptRecordError(f"{where}): {exc}") from None
        where += f", offset {b.base})"
        attrs = b.attributes
        if attrs & (TRANSACTIONAL_BIT | CONTROL_BIT):
            raise InvalidArgumentError(
                f"{where}: a transactional or control batch (attributes 0x{attrs:04x}): "
                "transactions are not supported"
            )
        if attrs & ~KNOWN_ATTRIBUTES:
            raise CorruptRecordError(
                f"{where}: attributes 0x{attrs:04x} has bits this log does not take "
                f"(delete horizon 0x{DELETE_HORIZON_BIT:02x} or undefined ones)"
            )
        total += b.n
        if total > limit:
            raise InvalidArgumentError(f"more than {limit} records in one request")
        try:
            section, spos, send = _section(frozen, b)
            if native.ENABLED and not attrs & TIMESTAMP_TYPE_BIT:
                facts = _check_natively(frozen, b, section, spos, send)
            else:
                facts = _check_section_of(section, spos, send, b.n)
        except CorruptRecordError as exc:
            raise CorruptRecordError(f"{where}: {exc}") from None
        if facts.max_value > append_threshold:
            raise RecordTooLargeError(
                f"{where}: a value of {facts.max_value} bytes exceeds the append threshold "
                f"of {append_threshold} bytes"
            )
        top = b.base_timestamp + facts.max_timestamp_delta
        mx = b.max_timestamp
        if top >= _MAX_TS or mx >= _MAX_TS:
            raise InvalidArgumentError(f"{where}: timestamp {max(top, mx)} is out of range")
        if attrs & TIMESTAMP_TYPE_BIT:
            mx_off = b.base
        else:
            mx_off = b.base + facts.max_timestamp_index
            if mx != top:  # as Kafka's broker: the header says what the records hold
                mx = top
                data[pos + MAX_TIMESTAMP_AT : pos + MAX_TIMESTAMP_AT + 8] = top.to_bytes(
                    8, "big", signed=True
                )
                data[pos + CRC_AT : pos + CRC_AT + 4] = crc32c(
                    memoryview(data)[pos + ATTRIBUTES_AT : b.end]
                ).to_bytes(4, "big")
        infos.append(BatchInfo(b.base, b.n, pos, b.end - pos, b.base_timestamp, mx, mx_off))
        pos = b.end
        i += 1
    return EncodedBatch(infos[0].base_offset, data, infos, total)


def batch_table(
    buf: bytes | bytearray | memoryview, expect_offset: int
) -> tuple[list[BatchInfo], int]:
    """Verify the batches of ``buf`` from byte 0 (framing and CRC-32C, no record read),
    which must hold offsets ``expect_offset``, +1, ...: ``(batches, end)``, ``end``
    being the position after the last verified one. Stops (without raising) at the
    first batch that is incomplete, damaged or breaks the offset sequence: for recovery
    (the torn-tail cut point), index rebuilds, cutting a segment into chunks to ship,
    and the verify/dump tools. ``max_timestamp_offset`` is each batch's last offset (its
    records are not read). A first batch of the format before Kafka v2 raises
    LegacyFormatError (the data is not damaged, and cutting it would lose it)."""
    end = len(buf)
    out: list[BatchInfo] = []
    pos = 0
    expect = expect_offset
    while True:
        try:
            b = _parse(buf, pos, end)
        except _Incomplete:
            break
        except LegacyFormatError:
            if pos == 0:
                raise
            break
        except CorruptRecordError:
            break
        if b.base != expect:
            break
        out.append(
            BatchInfo(
                b.base, b.n, pos, b.end - pos, b.base_timestamp, b.max_timestamp, b.base + b.n - 1
            )
        )
        expect += b.n
        pos = b.end
    return out, pos


def check_batches(buf: bytes | bytearray | memoryview, first_offset: int) -> tuple[int, int]:
    """Check a binary fetch's page without decoding it: ``(batches, next_offset)``.

    Per batch its framing (magic 2, batchLength within the page, records count =
    lastOffsetDelta + 1 >= 1) and one ``crc32c`` call over its bytes as stored; the
    batches must follow one another in offset order, the first holding
    ``first_offset`` (a page's first batch may begin below it), and the page must end
    where its last batch does. No record is read (compressed batches are not
    decompressed), so the cost is the CRC pass alone. An empty ``buf`` is ``(0,
    first_offset)``. CorruptRecordError names the first batch that fails
    (LegacyFormatError for the format before Kafka v2).
    """
    end = len(buf)
    pos = 0
    n = 0
    nxt = first_offset
    while pos < end:
        try:
            b = _parse(buf, pos, end)
        except _Incomplete:
            raise CorruptRecordError(
                f"batch {n} (byte {pos}) runs past the end of the page ({end} bytes)"
            ) from None
        base, count = b.base, b.n
        if not n and not base <= first_offset < base + count:
            raise CorruptRecordError(
                f"batch 0 holds offsets [{base}, {base + count}), expected one holding {nxt}"
            )
        nxt = _follows(base, count, nxt if n else None, pos)
        pos = b.end
        n += 1
    return n, nxt


def scan_batches(buf: bytes | bytearray | memoryview, expect_offset: int) -> Iterator[BatchInfo]:
    """The verified batches of ``buf`` (see :func:`batch_table`), one at a time."""
    yield from batch_table(buf, expect_offset)[0]


__all__ = [
    "FrameColumns",
    "batch_table",
    "check_batches",
    "decode_columns",
    "decode_records",
    "receive_batches",
    "scan_batches",
]
