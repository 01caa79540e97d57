"""The records of a Kafka v2 batch: zigzag varints, the record types, and records to and
from bytes.

Each record (laid out in :mod:`tiered_log.format.kafka`) is a varint length and then its
body: attributes int8 (unused, 0), timestampDelta varlong, offsetDelta varint, key
(varint length, -1 for null, then the bytes), value (likewise), a varint header count and
each header as a varint key length and UTF-8 key (never null), then a varint value length
(-1 for null) and the value bytes. A key, value or header value of any negative length
reads as null, as Kafka's broker and clients read it (a negative header count or header
key length is an error, as there). Every varint is zigzag-encoded (as protobuf's
``sint64``): 0, -1, 1, -2, ... are 0, 1, 2, 3, ...

This is the one record codec of the project: the log's batches
(:mod:`tiered_log.format.batch_encode`, :mod:`tiered_log.format.batch_decode`) and the
Kafka-side helpers (:mod:`.batch`) both go through it. The readers here walk one
*records section* (the bytes after a batch's 61-byte header, decompressed) in a single
Python loop each, the one-byte varints (every length below 64, every small delta) read
inline; they differ in what they build, so that each path pays only for what it uses:

- :func:`decode_section`: :class:`Record` tuples, from a record index on, within a
  record and a byte limit (the read path);
- :func:`section_columns`: the same fields appended to column lists, values as slices
  of a buffer given (zero-copy views for the columnar reader);
- :func:`check_section`: no object at all, only the framing checked and the largest
  value and timestamp found (what a produce path verifies);
- :func:`skip_records`: record lengths only (to jump to a record).

Nothing here checks a CRC: that is the batch's. The decoders check the record framing
(each record's length matches what its fields take, no trailing bytes when a whole
section is read) and raise :class:`~tiered_log.errors.CorruptRecordError` otherwise.

Pure functions over immutable values: safe from any thread.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from ...errors import CorruptRecordError, InvalidArgumentError

Header = tuple[str, bytes | None]
"""A record header: its key (a string, never null) and its value (bytes or null)."""

Headers = tuple[Header, ...]
"""A record's headers, in order (names may repeat)."""

Value = bytes | bytearray | memoryview
"""What the encoder takes as a key, value or header value."""

MAX_HEADERS = (1 << 16) - 1
"""The most headers one record may have (Kafka sets no limit; this log does)."""


# ---- varints ---------------------------------------------------------------------------------


def put_varint(out: bytearray, n: int) -> None:
    """Append the zigzag varint of the signed ``n`` (varint or varlong) to ``out``."""
    v = (n << 1) ^ (n >> 63)
    while v > 0x7F:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def varint_bytes(n: int) -> bytes:
    """The zigzag varint of the signed ``n`` as bytes."""
    out = bytearray()
    put_varint(out, n)
    return bytes(out)


def varint_size(n: int) -> int:
    """Bytes the zigzag varint of ``n`` takes."""
    v = (n << 1) ^ (n >> 63)
    size = 1
    while v > 0x7F:
        v >>= 7
        size += 1
    return size


class _VarintCache(dict[int, bytes]):
    """``cache[n]`` is the zigzag varint of ``n`` as bytes; a C-level lookup once ``n``
    was seen (so ``map(cache.__getitem__, ns)`` encodes a column without a Python call
    per item). Only ``|n| < 2**16`` is kept, so the cache stays small. Concurrent fills
    from two threads write the same bytes: safe."""

    def __missing__(self, n: int) -> bytes:
        b = varint_bytes(n)
        if -(1 << 16) < n < 1 << 16:
            self[n] = b
        return b


VARINT = _VarintCache()
"""Zigzag varints by value: ``VARINT[n]`` (see :class:`_VarintCache`)."""


def read_varint(data: bytes | bytearray, pos: int) -> tuple[int, int]:
    """The signed value of the zigzag varint at ``data[pos]`` and the position after it.

    Raises IndexError past the end of ``data``, CorruptRecordError for more than 10 bytes.
    """
    b = data[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    v = b & 0x7F
    shift = 7
    pos += 1
    while True:
        b = data[pos]
        pos += 1
        v |= (b & 0x7F) << shift
        if b < 0x80:
            return (v >> 1) ^ -(v & 1), pos
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint longer than 10 bytes")


_rv = read_varint


# ---- the record types ------------------------------------------------------------------------


class _RecordFields(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Headers
    checksum: int
    size: int


class Record(_RecordFields):
    """One record as read from a batch. Immutable; safe to share between threads.

    ``offset`` and ``timestamp`` (ms) are absolute (under LogAppendTime every record's
    timestamp is the batch's maxTimestamp, as Kafka's readers report it). ``key`` and
    ``value`` are None for null (a tombstone's value) and ``b""`` for empty; ``headers``
    are ``(name, value)`` pairs, a value None for null. ``checksum`` is the CRC-32C of
    the batch the record was read from (verified when read). ``size`` is the record's
    bytes in its batch, its varint length prefix included (what ``max_bytes`` limits
    count); a record built by hand gets the size it would have as the first record of a
    batch (offset and timestamp deltas 0).

    A NamedTuple: the read path builds millions of them (with ``tuple.__new__``, past
    this constructor) and a tuple is several times cheaper to create than an object.
    """

    __slots__ = ()

    def __new__(
        cls,
        offset: int,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Headers = (),
        checksum: int = 0,
        size: int | None = None,
    ) -> Record:
        if size is None:
            size = record_size(key, value, headers)
        return tuple.__new__(cls, (offset, timestamp, key, value, headers, checksum, size))


@dataclass(frozen=True, slots=True)
class ProducerRecord:
    """A record to append or encode: the offset is assigned by the log, the timestamp
    (ms) is the encoder's clock if None. ``value`` or ``key`` None is null (a None value
    is a tombstone); ``b""`` is empty, a distinct value. Immutable."""

    value: bytes | None
    key: bytes | None = None
    headers: Headers = field(default=())
    timestamp: int | None = None


NewRecord = ProducerRecord
"""The name :mod:`tiered_log.format.kafka` has used for :class:`ProducerRecord`."""


# ---- records -> bytes ------------------------------------------------------------------------


def _bytes_field(b: Value | None, what: str) -> bytes:
    """The varint length and bytes of a key or value (``\\x01``, length -1, for null)."""
    if b is None:
        return b"\x01"
    if type(b) is not bytes:
        if not isinstance(b, bytearray | memoryview):
            raise InvalidArgumentError(
                f"record {what} must be bytes or None, not {type(b).__name__}"
            )
        b = bytes(b)
    return VARINT[len(b)] + b


def encode_headers(headers: Iterable[tuple[str, Value | None]]) -> bytes:
    """A record's headers as they follow its value: a varint count, then per header the
    varint length and UTF-8 bytes of its name and the varint length (-1 null) and bytes
    of its value. Raises InvalidArgumentError for anything else than ``(str, bytes |
    None)`` pairs or more than :data:`MAX_HEADERS` of them."""
    try:
        items = list(headers)
    except TypeError as exc:
        raise InvalidArgumentError("headers must be a sequence of (name, value) pairs") from exc
    if len(items) > MAX_HEADERS:
        raise InvalidArgumentError(f"a record may have at most {MAX_HEADERS} headers")
    parts = [VARINT[len(items)]]
    for item in items:
        if not isinstance(item, tuple | list) or len(item) != 2:
            raise InvalidArgumentError(f"a header must be a (name, value) pair, not {item!r:.80}")
        name, value = item
        if not isinstance(name, str):
            raise InvalidArgumentError(f"header name must be str, not {type(name).__name__}")
        try:
            nb = name.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidArgumentError(f"header name {name!r:.80} is not valid UTF-8 text") from exc
        parts.append(VARINT[len(nb)])
        parts.append(nb)
        if value is not None and not isinstance(value, bytes | bytearray | memoryview):
            raise InvalidArgumentError(
                f"header {name!r:.80} value must be bytes or None, not {type(value).__name__}"
            )
        parts.append(_bytes_field(value, "header value"))
    return b"".join(parts)


def record_tail(key: Value | None, value: Value | None, headers: Iterable[Header]) -> bytes:
    """A record's bytes after its offsetDelta: key, value and headers, validated
    (InvalidArgumentError)."""
    return (
        _bytes_field(key, "key")
        + _bytes_field(value, "value")
        + (encode_headers(headers) if headers else b"\x00")
    )


def record_size(
    key: bytes | None,
    value: bytes | None,
    headers: Headers = (),
    timestamp_delta: int = 0,
    offset_delta: int = 0,
) -> int:
    """Bytes of a record in a batch, its length prefix included."""
    n = 1 + varint_size(timestamp_delta) + varint_size(offset_delta)
    n += 1 if key is None else varint_size(len(key)) + len(key)
    n += 1 if value is None else varint_size(len(value)) + len(value)
    n += varint_size(len(headers))
    for name, hv in headers:
        nb = len(name.encode("utf-8"))
        n += varint_size(nb) + nb + (1 if hv is None else varint_size(len(hv)) + len(hv))
    return varint_size(n) + n


def encode_records(records: Sequence[ProducerRecord], base_timestamp: int, now: int) -> bytes:
    """The records section (uncompressed) for ``records`` at offset deltas 0, 1, ...
    with timestamp deltas from ``base_timestamp`` (``now`` for a record without one).
    Raises InvalidArgumentError for a key, value or header of the wrong type."""
    parts: list[bytes] = []
    for delta, r in enumerate(records):
        ts = now if r.timestamp is None else r.timestamp
        body = (
            b"\x00"
            + VARINT[ts - base_timestamp]
            + VARINT[delta]
            + record_tail(r.key, r.value, r.headers)
        )
        parts.append(VARINT[len(body)])
        parts.append(body)
    return b"".join(parts)


# ---- bytes -> records ------------------------------------------------------------------------

_new = tuple.__new__


def _truncated(n: int, i: int, count: int) -> CorruptRecordError:
    return CorruptRecordError(f"records section of {n} bytes ends inside record {i} of {count}")


def _bad_length(length: int, start: int, end: int) -> CorruptRecordError:
    return CorruptRecordError(
        f"record length {length} at byte {start} of a records section ending at {end} is impossible"
    )


def _misfit(i: int, length: int, took: int) -> CorruptRecordError:
    return CorruptRecordError(f"record {i} is {length} bytes long but its fields take {took}")


def _attributes(i: int, attrs: int) -> CorruptRecordError:
    return CorruptRecordError(f"record {i} has attributes 0x{attrs:02x} (unused by Kafka: 0)")


def _left_over(left: int, count: int) -> CorruptRecordError:
    return CorruptRecordError(f"{left} bytes left in the records section after its {count} records")


def skip_records(data: bytes, pos: int, end: int, k: int) -> int:
    """The position ``k`` records after ``pos`` (a record's start), by their lengths
    alone. Raises CorruptRecordError if they do not fit before ``end``."""
    try:
        for _ in range(k):
            b = data[pos]
            if b < 0x80:
                pos += 1 + (b >> 1)
            else:
                length, pos = _rv(data, pos)
                if length < 0:
                    raise _bad_length(length, pos, end)
                pos += length
    except IndexError:
        raise CorruptRecordError("records run past their section") from None
    if pos > end:
        raise CorruptRecordError("records run past their section")
    return pos


def record_sizes(data: bytes, pos: int, end: int, k: int) -> list[int]:
    """The sizes of the ``k`` records from ``pos`` (a record's start), by their lengths
    alone. Raises CorruptRecordError if they do not fit before ``end``."""
    out: list[int] = []
    add = out.append
    start = pos
    try:
        for _ in range(k):
            b = data[pos]
            if b < 0x80:
                s = 1 + ((b >> 1) ^ -(b & 1))
            elif data[pos + 1] < 0x80:
                b = (b & 0x7F) | data[pos + 1] << 7
                s = 2 + ((b >> 1) ^ -(b & 1))
            else:
                length, p = _rv(data, pos)
                s = p - pos + length
            if s < 7:
                raise _bad_length(s, pos, end)
            add(s)
            pos += s
    except IndexError:
        raise CorruptRecordError("records run past their section") from None
    if pos > end:
        raise CorruptRecordError(
            f"records run past their section ({pos - start} bytes where {end - start} are left)"
        )
    return out


def _decode_headers(data: bytes, pos: int, end: int) -> tuple[Headers, int]:
    """The headers array at ``pos`` (its varint count first) and the position after it."""
    count, pos = _rv(data, pos)
    if count < 0:
        raise CorruptRecordError(f"negative header count {count}")
    headers: list[Header] = []
    for _ in range(count):
        klen, pos = _rv(data, pos)
        if klen < 0:
            raise CorruptRecordError(f"header key length {klen}: a header key is never null")
        if pos + klen > end:
            raise CorruptRecordError("header key runs past its record")
        try:
            hkey = data[pos : pos + klen].decode()
        except UnicodeDecodeError as exc:
            raise CorruptRecordError(f"header key is not UTF-8: {exc}") from None
        pos += klen
        vlen, pos = _rv(data, pos)
        hvalue: bytes | None
        if vlen >= 0:
            if pos + vlen > end:
                raise CorruptRecordError("header value runs past its record")
            hvalue = data[pos : pos + vlen]
            pos += vlen
        else:  # -1, or any negative length: null, as Kafka reads it
            hvalue = None
        headers.append((hkey, hvalue))
    return tuple(headers), pos


class Decoded(NamedTuple):
    """What :func:`decode_section` returns."""

    records: list[Record]
    used: int
    """Bytes (record sizes) of ``records``."""
    pos: int
    """The position after the last record decoded."""


def decode_section(
    data: bytes,
    pos: int,
    end: int,
    count: int,
    base_offset: int,
    base_timestamp: int,
    log_append_time: int | None = None,
    checksum: int = 0,
    *,
    limit: int | None = None,
    max_bytes: int | None = None,
    first_free: bool = True,
) -> Decoded:
    """Decode records of the records section ``data[pos:end]`` holding ``count`` records,
    from the one at ``pos`` (a record's start, the first unless the caller skipped some
    with :func:`skip_records`).

    Offsets are ``base_offset`` + each offsetDelta; timestamps ``base_timestamp`` + each
    timestampDelta, or ``log_append_time`` for all when given (LogAppendTime). Stops
    after ``limit`` records (default ``count``) or before the first record whose size
    would take the total past ``max_bytes`` (the first record is decoded whatever its size
    if ``first_free``). The caller checks that a section read whole ends where its last
    record does (:func:`check_section_end`). Raises CorruptRecordError when a record's fields do not fill
    its length exactly, a header key is not UTF-8, or the section ends too soon or has bytes left.
    """
    start0 = pos
    n = count if limit is None else min(limit, count)
    room = (1 << 62) if max_bytes is None else max_bytes
    out: list[Record] = []
    append = out.append
    used = 0
    i = 0
    try:
        while i < n:
            start = pos
            b = data[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                b = (b & 0x7F) | data[pos + 1] << 7
                length = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                length, pos = _rv(data, pos)
            rend = pos + length
            size = rend - start
            if used + size > room and (i or not first_free):
                break
            if length < 6 or rend > end:  # attributes and 5 one-byte varints at least
                raise _bad_length(length, start, end)
            # attributes (unused), then timestampDelta
            b = data[pos + 1]
            if b < 0x80:
                ts_delta = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                ts_delta, pos = _rv(data, pos + 1)
            b = data[pos]
            if b < 0x80:
                off_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                b = (b & 0x7F) | data[pos + 1] << 7
                off_delta = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                off_delta, pos = _rv(data, pos)
            # key
            b = data[pos]
            key: bytes | None
            if b == 1:
                key = None
                pos += 1
            elif b < 0x80 and not b & 1:
                pos += 1
                key = data[pos : pos + (b >> 1)]
                pos += b >> 1
            elif b & 0x81 == 0x80 and data[pos + 1] < 0x80:  # two bytes, not negative
                b = ((b & 0x7F) | data[pos + 1] << 7) >> 1
                pos += 2
                key = data[pos : pos + b]
                pos += b
            else:
                klen, pos = _rv(data, pos)
                key = None if klen < 0 else data[pos : pos + klen]
                pos += max(klen, 0)
            # value
            b = data[pos]
            value: bytes | None
            if b == 1:
                value = None
                pos += 1
            elif b < 0x80 and not b & 1:
                pos += 1
                value = data[pos : pos + (b >> 1)]
                pos += b >> 1
            elif b & 0x81 == 0x80 and data[pos + 1] < 0x80:  # two bytes, not negative
                b = ((b & 0x7F) | data[pos + 1] << 7) >> 1
                pos += 2
                value = data[pos : pos + b]
                pos += b
            else:
                vlen, pos = _rv(data, pos)
                value = None if vlen < 0 else data[pos : pos + vlen]
                pos += max(vlen, 0)
            # headers
            if data[pos] == 0:
                headers: Headers = ()
                pos += 1
            else:
                headers, pos = _decode_headers(data, pos, rend)
            if pos != rend:
                raise _misfit(i, length, length + pos - rend)
            append(
                _new(
                    Record,
                    (
                        base_offset + off_delta,
                        base_timestamp + ts_delta if log_append_time is None else log_append_time,
                        key,
                        value,
                        headers,
                        checksum,
                        size,
                    ),
                )
            )
            used += size
            i += 1
    except IndexError:
        raise _truncated(end - start0, i, count) from None
    return Decoded(out, used, pos)


def check_section_end(pos: int, end: int, count: int) -> None:
    """Raise CorruptRecordError unless a section's last record ended at its ``end``."""
    if pos != end:
        raise _left_over(end - pos, count)


def decode_records(
    data: bytes,
    count: int,
    base_offset: int,
    base_timestamp: int,
    log_append_time: int | None = None,
    checksum: int = 0,
) -> list[Record]:
    """The ``count`` records of the records section ``data`` (uncompressed), which they
    must fill exactly (see :func:`decode_section`)."""
    got = decode_section(
        data, 0, len(data), count, base_offset, base_timestamp, log_append_time, checksum
    )
    if len(got.records) != count:
        raise _truncated(len(data), len(got.records), count)
    check_section_end(got.pos, len(data), count)
    return got.records


def section_columns(
    data: bytes,
    pos: int,
    end: int,
    count: int,
    base_offset: int,
    base_timestamp: int,
    log_append_time: int | None,
    values_from: bytes | memoryview,
    offsets: list[int],
    timestamps: list[int],
    keys: list[bytes | None],
    values: list[bytes | memoryview | None],
    headers: list[Headers],
) -> None:
    """Append the fields of every record of the section ``data[pos:end]`` (which they
    must fill exactly) to the column lists; values are slices of ``values_from`` (the
    same bytes as ``data``: a memoryview of them gives zero-copy views), cut with
    C-level ``map`` calls after the walk. Raises CorruptRecordError as
    :func:`decode_section` does."""
    add_off = offsets.append
    add_ts = timestamps.append
    add_key = keys.append
    add_hdr = headers.append
    starts: list[int] = []
    ends: list[int] = []
    add_start = starts.append
    add_end = ends.append
    nulls: list[int] = []  # indexes (in this section) of null values
    start0 = pos
    i = 0
    try:
        while i < count:
            start = pos
            b = data[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                b = (b & 0x7F) | data[pos + 1] << 7
                length = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                length, pos = _rv(data, pos)
            rend = pos + length
            if length < 6 or rend > end:
                raise _bad_length(length, start, end)
            b = data[pos + 1]
            if b < 0x80:
                ts_delta = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                ts_delta, pos = _rv(data, pos + 1)
            b = data[pos]
            if b < 0x80:
                add_off(base_offset + ((b >> 1) ^ -(b & 1)))
                pos += 1
            elif data[pos + 1] < 0x80:
                b = (b & 0x7F) | data[pos + 1] << 7
                add_off(base_offset + ((b >> 1) ^ -(b & 1)))
                pos += 2
            else:
                off_delta, pos = _rv(data, pos)
                add_off(base_offset + off_delta)
            add_ts(base_timestamp + ts_delta if log_append_time is None else log_append_time)
            b = data[pos]
            if b == 1:
                add_key(None)
                pos += 1
            elif b < 0x80 and not b & 1:
                pos += 1
                add_key(data[pos : pos + (b >> 1)])
                pos += b >> 1
            else:
                klen, pos = _rv(data, pos)
                add_key(None if klen < 0 else data[pos : pos + klen])
                pos += max(klen, 0)
            b = data[pos]
            if b < 0x80 and not b & 1:
                pos += 1
                add_start(pos)
                pos += b >> 1
            elif b & 0x81 == 0x80 and data[pos + 1] < 0x80:  # two bytes, not negative
                b = ((b & 0x7F) | data[pos + 1] << 7) >> 1
                pos += 2
                add_start(pos)
                pos += b
            elif b == 1:
                nulls.append(i)
                add_start(pos)
                pos += 1
            else:
                vlen, pos = _rv(data, pos)
                if vlen < 0:
                    nulls.append(i)
                add_start(pos)
                pos += max(vlen, 0)
            add_end(pos)
            if data[pos] == 0:
                add_hdr(())
                pos += 1
            else:
                hs, pos = _decode_headers(data, pos, rend)
                add_hdr(hs)
            if pos != rend:
                raise _misfit(i, length, length + pos - rend)
            i += 1
    except IndexError:
        raise _truncated(end - start0, i, count) from None
    check_section_end(pos, end, count)
    cut = values_from.__getitem__
    got: list[bytes | memoryview | None] = list(map(cut, map(slice, starts, ends)))
    for k in nulls:
        got[k] = None
    values.extend(got)


def check_record_attributes(data: bytes | bytearray, pos: int, end: int, count: int) -> None:
    """Walk the ``count`` records of ``data[pos:end]`` by their lengths alone and refuse
    a record whose attributes byte (unused by Kafka, written 0) has its top bit set:
    aiokafka's C reader (:mod:`.native`) reads that byte as a varint, so it would read
    such a record's fields shifted where Kafka's clients read them as laid out. Raises
    CorruptRecordError for that, or for records that run past ``end``."""
    i = 0
    try:
        while i < count:
            b = data[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                b = (b & 0x7F) | data[pos + 1] << 7
                length = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                length, pos = _rv(data, pos)
            if length < 6 or pos + length > end:
                raise _bad_length(length, pos, end)
            if data[pos] & 0x80:
                raise _attributes(i, data[pos])
            pos += length
            i += 1
    except IndexError:
        raise _truncated(end, i, count) from None


class SectionFacts(NamedTuple):
    """What :func:`check_section` finds in a records section."""

    max_value: int
    """The longest value's bytes (-1: every value null)."""
    max_timestamp_delta: int
    """The largest timestampDelta."""
    max_timestamp_index: int
    """The index of the first record holding it."""


def check_section(data: bytes, pos: int, end: int, count: int) -> SectionFacts:
    """Check the framing of every record of the section ``data[pos:end]`` without
    building anything: lengths, attributes (top bit clear: see
    :func:`check_record_attributes`), offset deltas 0, 1, ... in order, key and value
    lengths, header keys in UTF-8, no byte left over. Raises CorruptRecordError naming the first
    fault."""
    start0 = pos
    max_value = -1
    max_ts = -(1 << 63)
    max_at = 0
    i = 0
    try:
        while i < count:
            start = pos
            b = data[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                b = (b & 0x7F) | data[pos + 1] << 7
                length = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                length, pos = _rv(data, pos)
            rend = pos + length
            if length < 6 or rend > end:
                raise _bad_length(length, start, end)
            if data[pos] & 0x80:
                raise _attributes(i, data[pos])
            b = data[pos + 1]
            if b < 0x80:
                ts_delta = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                ts_delta, pos = _rv(data, pos + 1)
            if ts_delta > max_ts:
                max_ts = ts_delta
                max_at = i
            b = data[pos]
            if b < 0x80:
                off_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                b = (b & 0x7F) | data[pos + 1] << 7
                off_delta = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                off_delta, pos = _rv(data, pos)
            if off_delta != i:
                raise CorruptRecordError(f"record {i} has offsetDelta {off_delta}, not {i}")
            b = data[pos]
            if b < 0x80 and not b & 1:
                pos += 1 + (b >> 1)
            elif b == 1:
                pos += 1
            elif b & 0x81 == 0x80 and data[pos + 1] < 0x80:  # two bytes, not negative
                pos += 2 + (((b & 0x7F) | data[pos + 1] << 7) >> 1)
            else:
                klen, pos = _rv(data, pos)
                pos += max(klen, 0)
            b = data[pos]
            if b < 0x80 and not b & 1:
                pos += 1 + (b >> 1)
                if b >> 1 > max_value:
                    max_value = b >> 1
            elif b == 1:
                pos += 1
            elif b & 0x81 == 0x80 and data[pos + 1] < 0x80:  # two bytes, not negative
                vlen = ((b & 0x7F) | data[pos + 1] << 7) >> 1
                pos += 2 + vlen
                if vlen > max_value:
                    max_value = vlen
            else:
                vlen, pos = _rv(data, pos)
                pos += max(vlen, 0)
                if vlen > max_value:
                    max_value = vlen
            if data[pos] == 0:
                pos += 1
            else:
                _, pos = _decode_headers(data, pos, rend)
            if pos != rend:
                raise _misfit(i, length, length + pos - rend)
            i += 1
    except IndexError:
        raise _truncated(end - start0, i, count) from None
    check_section_end(pos, end, count)
    return SectionFacts(max_value, max_ts, max_at)


__all__ = [
    "MAX_HEADERS",
    "VARINT",
    "Decoded",
    "Header",
    "Headers",
    "NewRecord",
    "ProducerRecord",
    "Record",
    "SectionFacts",
    "Value",
    "check_record_attributes",
    "check_section",
    "check_section_end",
    "decode_records",
    "decode_section",
    "encode_headers",
    "encode_records",
    "put_varint",
    "read_varint",
    "record_size",
    "record_sizes",
    "section_columns",
    "skip_records",
    "varint_bytes",
    "varint_size",
]
