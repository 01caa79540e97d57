"""The records of a Kafka v2 batch: zigzag varints, and records to and from bytes.

Each record (laid out in :mod:`tiered_log.format.kafka`) is a varint length and then its
body: attributes int8 (unused, 0), timestampDelta varlong, offsetDelta varint, key
(varint length, -1 for null, then the bytes), value (likewise), a varint header count and
each header as a varint key length and UTF-8 key (never null), then a varint value length
(-1 for null) and the value bytes. Every varint is zigzag-encoded (as protobuf's
``sint64``): 0, -1, 1, -2, ... are 0, 1, 2, 3, ...

Nothing here checks a CRC: that is the batch's (:mod:`.batch`). The decoder checks the
record framing (each record's length matches what its fields take, no trailing bytes)
and raises :class:`~tiered_log.errors.CorruptRecordError` otherwise.

Pure functions over immutable values: safe from any thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from ...errors import CorruptRecordError

Header = tuple[str, bytes | None]
"""A record header: its key (a string, never null) and its value (bytes or null)."""

Value = bytes | bytearray | memoryview
"""What the encoder takes as a key, value or header value."""


class Record(NamedTuple):
    """A decoded record: its absolute offset and timestamp (ms), key, value, headers.

    Under LogAppendTime every record's timestamp is the batch's maxTimestamp, as Kafka's
    readers report it. ``key`` and ``value`` are None for null and ``b""`` for empty.
    """

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


class NewRecord(NamedTuple):
    """A record to encode: value, key, headers and timestamp (ms since the epoch).

    ``timestamp=None`` takes the encoder's ``now``.
    """

    value: Value | None
    key: Value | None = None
    headers: Sequence[tuple[str, Value | None]] = ()
    timestamp: int | None = None


# ---- varints ---------------------------------------------------------------------------------


def zigzag(n: int) -> int:
    """The zigzag code of a signed 64-bit ``n`` (0, -1, 1, -2 -> 0, 1, 2, 3)."""
    return (n << 1) ^ (n >> 63)


def put_varint(out: bytearray, n: int) -> None:
    """Append the zigzag varint of the signed ``n`` (varint or varlong) to ``out``."""
    v = (n << 1) ^ (n >> 63)
    while v > 0x7F:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def varint_size(n: int) -> int:
    """Bytes the zigzag varint of ``n`` takes."""
    v = (n << 1) ^ (n >> 63)
    size = 1
    while v > 0x7F:
        v >>= 7
        size += 1
    return size


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
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


# ---- records -> bytes ------------------------------------------------------------------------


def _put_bytes(out: bytearray, b: Value | None) -> None:
    if b is None:
        out.append(1)  # zigzag(-1)
    else:
        put_varint(out, len(b))
        out += b


def encode_records(records: Sequence[NewRecord], base_timestamp: int, now: int) -> bytearray:
    """The records section (uncompressed) for ``records`` at offset deltas 0, 1, ...
    with timestamp deltas from ``base_timestamp`` (``now`` for a record without one)."""
    out = bytearray()
    body = bytearray()
    for delta, r in enumerate(records):
        body.clear()
        body.append(0)  # attributes
        ts = now if r.timestamp is None else r.timestamp
        put_varint(body, ts - base_timestamp)
        put_varint(body, delta)
        _put_bytes(body, r.key)
        _put_bytes(body, r.value)
        put_varint(body, len(r.headers))
        for hkey, hvalue in r.headers:
            k = hkey.encode()
            put_varint(body, len(k))
            body += k
            _put_bytes(body, hvalue)
        put_varint(out, len(body))
        out += body
    return out


# ---- bytes -> records ------------------------------------------------------------------------

_new = tuple.__new__


def decode_records(
    data: bytes,
    count: int,
    base_offset: int,
    base_timestamp: int,
    log_append_time: int | None = None,
) -> list[Record]:
    """The ``count`` records of an uncompressed records section ``data``.

    Offsets are ``base_offset`` + each offsetDelta; timestamps ``base_timestamp`` + each
    timestampDelta, or ``log_append_time`` for all when it is given (LogAppendTime).
    Raises :class:`~tiered_log.errors.CorruptRecordError` when a record's fields do not
    fill its length exactly, a length is negative (other than -1 for null), a header key
    is not UTF-8, or bytes are left after the last record or missing before it.
    """
    out: list[Record] = []
    append = out.append
    pos = 0
    n = len(data)
    try:
        for _ in range(count):
            # length
            b = data[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                length, pos = read_varint(data, pos)
            end = pos + length
            if length < 6 or end > n:  # attributes + 5 one-byte varints at least
                raise CorruptRecordError(
                    f"record length {length} at byte {pos} of the records section "
                    f"({n} bytes) is impossible"
                )
            pos += 1  # attributes: unused
            # timestampDelta
            b = data[pos]
            if b < 0x80:
                ts_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                ts_delta, pos = read_varint(data, pos)
            # offsetDelta
            b = data[pos]
            if b < 0x80:
                off_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                off_delta, pos = read_varint(data, pos)
            # key
            b = data[pos]
            if b < 0x80:
                klen = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                klen, pos = read_varint(data, pos)
            if klen >= 0:
                key: bytes | None = data[pos : pos + klen]
                pos += klen
            elif klen == -1:
                key = None
            else:
                raise CorruptRecordError(f"negative key length {klen}")
            # value
            b = data[pos]
            if b < 0x80:
                vlen = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                vlen, pos = read_varint(data, pos)
            if vlen >= 0:
                value: bytes | None = data[pos : pos + vlen]
                pos += vlen
            elif vlen == -1:
                value = None
            else:
                raise CorruptRecordError(f"negative value length {vlen}")
            # headers
            b = data[pos]
            if b == 0:
                headers: tuple[Header, ...] = ()
                pos += 1
            else:
                hcount, pos = read_varint(data, pos)
                headers, pos = _decode_headers(data, pos, hcount, end)
            if pos != end:
                raise CorruptRecordError(
                    f"record at offset delta {off_delta} is {length} bytes long but its "
                    f"fields take {length + pos - end}"
                )
            append(
                _new(
                    Record,
                    (
                        base_offset + off_delta,
                        base_timestamp + ts_delta if log_append_time is None else log_append_time,
                        key,
                        value,
                        headers,
                    ),
                )
            )
    except IndexError:
        raise CorruptRecordError(
            f"records section of {n} bytes ends inside record {len(out)} of {count}"
        ) from None
    if pos != n:
        raise CorruptRecordError(
            f"{n - pos} bytes left in the records section after its {count} records"
        )
    return out


def _decode_headers(data: bytes, pos: int, count: int, end: int) -> tuple[tuple[Header, ...], int]:
    if count < 0:
        raise CorruptRecordError(f"negative header count {count}")
    headers: list[Header] = []
    for _ in range(count):
        klen, pos = read_varint(data, pos)
        if klen < 0:
            raise CorruptRecordError(f"header key length {klen}: a header key is never null")
        if pos + klen > end:
            raise CorruptRecordError("header key runs past its record")
        try:
            hkey = data[pos : pos + klen].decode()
        except UnicodeDecodeError as exc:
            raise CorruptRecordError(f"header key is not UTF-8: {exc}") from None
        pos += klen
        vlen, pos = read_varint(data, pos)
        hvalue: bytes | None
        if vlen >= 0:
            hvalue = data[pos : pos + vlen]
            pos += vlen
        elif vlen == -1:
            hvalue = None
        else:
            raise CorruptRecordError(f"negative header value length {vlen}")
        headers.append((hkey, hvalue))
    return tuple(headers), pos


__all__ = [
    "Header",
    "NewRecord",
    "Record",
    "Value",
    "decode_records",
    "encode_records",
    "put_varint",
    "read_varint",
    "varint_size",
    "zigzag",
]
