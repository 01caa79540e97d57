"""Record framing: the bytes of one record in a segment's store file.

The same bytes go unchanged over the binary HTTP API and into the bucket, so a store
file is *self-describing*: indexes can always be rebuilt by scanning it. All integers
are little-endian. One frame::

    offset   0   u64   offset        absolute offset of the record
             8   u32   body_length   bytes of the body that follows the 20-byte header
            12   u64   checksum      see below
    body    20   i64   timestamp     milliseconds since the epoch
            28   i32   key_length    -1 = no key
            32   u32   value_length  > 0
            36   u16   header_count
            38   ...   key bytes, value bytes, then header_count headers, each:
                       u16 name_length, name (UTF-8), i32 value_length (-1 = null), value

``checksum = xxh3_64(value, seed=xxh3_64(meta, seed=offset))`` where ``meta`` is the
body without the value (the 18 fixed bytes, the key, the encoded headers). Hashing the
value on its own avoids copying it; seeding with the offset binds a frame to its place
in the log, so a frame copied to the wrong offset fails its check too.

Everything here is pure and stateless: safe from any thread.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import xxhash

from ..errors import CorruptRecordError, InvalidArgumentError, RecordTooLargeError

HEADER = struct.Struct("<QIQ")
"""offset u64, body_length u32, checksum u64."""
BODY_FIXED = struct.Struct("<qiIH")
"""timestamp i64, key_length i32, value_length u32, header_count u16."""
_FRAME_FIXED = struct.Struct("<QIQqiIH")
"""Header and fixed body fields in one unpack (38 bytes), for the read loop."""
HEADER_SIZE = HEADER.size  # 20
BODY_FIXED_SIZE = BODY_FIXED.size  # 18
FRAME_OVERHEAD = HEADER_SIZE + BODY_FIXED_SIZE  # 38
_HNAME = struct.Struct("<H")
_HVAL = struct.Struct("<i")

MAX_KEY_BYTES = (1 << 31) - 1
MAX_HEADERS = (1 << 16) - 1
MAX_BODY_BYTES = (1 << 32) - 1

Headers = tuple[tuple[str, bytes | None], ...]

_h64 = xxhash.xxh3_64_intdigest


class Record(NamedTuple):
    """One record as read from the log. Immutable; safe to share between threads.

    A NamedTuple rather than a frozen dataclass: the read path builds millions of them and
    a tuple is several times cheaper to create.
    """

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes
    headers: Headers = ()
    checksum: int = 0

    @property
    def size(self) -> int:
        """Bytes this record takes in a store file (its whole frame)."""
        return FRAME_OVERHEAD + len(self.value) + (len(self.key) if self.key else 0) + len(
            encode_headers(self.headers)
        )


@dataclass(frozen=True, slots=True)
class ProducerRecord:
    """A record to append: the offset is assigned by the log, the timestamp too if None."""

    value: bytes
    key: bytes | None = None
    headers: Headers = field(default=())
    timestamp: int | None = None


def encode_headers(headers: Iterable[tuple[str, bytes | None]]) -> bytes:
    """Encode headers as ``u16 name_len, name, i32 value_len (-1 null), value`` each."""
    parts: list[bytes] = []
    try:
        items = list(headers)
    except TypeError as exc:
        raise InvalidArgumentError("headers must be a sequence of (name, value) pairs") from exc
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
        if len(nb) > 0xFFFF:
            raise InvalidArgumentError("header name longer than 65535 bytes")
        parts.append(_HNAME.pack(len(nb)))
        parts.append(nb)
        if value is None:
            parts.append(_HVAL.pack(-1))
        else:
            if not isinstance(value, bytes | bytearray | memoryview):
                raise InvalidArgumentError(
                    f"header {name!r} value must be bytes or None, not {type(value).__name__}"
                )
            parts.append(_HVAL.pack(len(value)))
            parts.append(bytes(value))
    return b"".join(parts)


def decode_headers(buf: bytes | memoryview, pos: int, count: int, end: int) -> Headers:
    """Decode ``count`` headers from ``buf[pos:end]``; CorruptRecordError if they overrun."""
    out: list[tuple[str, bytes | None]] = []
    try:
        for _ in range(count):
            (nlen,) = _HNAME.unpack_from(buf, pos)
            pos += 2
            name = bytes(buf[pos : pos + nlen]).decode("utf-8")
            pos += nlen
            (vlen,) = _HVAL.unpack_from(buf, pos)
            pos += 4
            if vlen < 0:
                out.append((name, None))
            else:
                out.append((name, bytes(buf[pos : pos + vlen])))
                pos += vlen
    except (struct.error, UnicodeDecodeError) as exc:
        raise CorruptRecordError(f"malformed record headers: {exc}") from exc
    if pos != end:
        raise CorruptRecordError("record headers do not fill the record body")
    return tuple(out)


def checksum_of(offset: int, meta: bytes, value: bytes | memoryview) -> int:
    """The frame checksum: ``xxh3_64(value, seed=xxh3_64(meta, seed=offset))``."""
    return _h64(value, _h64(meta, offset & 0xFFFFFFFFFFFFFFFF))


@dataclass(slots=True)
class EncodedBatch:
    """Frames of consecutive records ready to write, plus what the indexes need.

    ``sizes[i]`` and ``timestamps[i]`` belong to offset ``base_offset + i``.
    """

    base_offset: int
    data: bytes
    sizes: list[int]
    timestamps: list[int]

    @property
    def count(self) -> int:
        return len(self.sizes)

    @property
    def next_offset(self) -> int:
        return self.base_offset + len(self.sizes)


def validate_value(value: object, append_threshold: int) -> None:
    """Raise the library's error for a value no log accepts (type, empty, too large)."""
    if not isinstance(value, bytes | bytearray | memoryview):
        raise InvalidArgumentError(f"record value must be bytes, not {type(value).__name__}")
    n = len(value)
    if n == 0:
        raise InvalidArgumentError("record value must not be empty")
    if n > append_threshold:
        raise RecordTooLargeError(
            f"record value of {n} bytes exceeds the append threshold of {append_threshold} bytes"
        )


def encode_batch(
    base_offset: int,
    records: Sequence[ProducerRecord | bytes],
    now_ms: int,
    append_threshold: int,
) -> EncodedBatch:
    """Encode ``records`` as frames with offsets ``base_offset, base_offset+1, ...``.

    A bare ``bytes`` item is a value with no key, no headers and timestamp ``now_ms``, as
    is a record whose ``timestamp`` is None. ``now_ms`` is not validated: a client may
    pass ``-1`` ("the server's clock", see :func:`frames_to_producer_records`).
    Validates every record first; raises before producing anything on bad input.
    """
    parts: list[bytes] = []
    sizes: list[int] = []
    timestamps: list[int] = []
    append = parts.append
    hpack = HEADER.pack
    bpack = BODY_FIXED.pack
    h64 = _h64
    off = base_offset
    for rec in records:
        if isinstance(rec, bytes):
            value = rec
            n = len(value)
            if n == 0 or n > append_threshold:
                validate_value(value, append_threshold)
            fixed = bpack(now_ms, -1, n, 0)
            cs = h64(value, h64(fixed, off))
            append(hpack(off, BODY_FIXED_SIZE + n, cs))
            append(fixed)
            append(value)
            sizes.append(FRAME_OVERHEAD + n)
            timestamps.append(now_ms)
        else:
            if not isinstance(rec, ProducerRecord):
                raise InvalidArgumentError(
                    f"records must be ProducerRecord or bytes, not {type(rec).__name__}"
                )
            value = rec.value
            validate_value(value, append_threshold)
            value = bytes(value)
            key = rec.key
            if key is not None:
                if not isinstance(key, bytes | bytearray | memoryview):
                    raise InvalidArgumentError(f"record key must be bytes, not {type(key).__name__}")
                key = bytes(key)
            ts = rec.timestamp
            if ts is None:
                ts = now_ms
            elif not isinstance(ts, int) or isinstance(ts, bool) or ts < 0 or ts >= 1 << 62:
                raise InvalidArgumentError(f"record timestamp must be a non-negative int (ms), got {ts!r}")
            hdrs = encode_headers(rec.headers) if rec.headers else b""
            nh = len(rec.headers) if rec.headers else 0
            if nh > MAX_HEADERS:
                raise InvalidArgumentError("a record may have at most 65535 headers")
            klen = -1 if key is None else len(key)
            fixed = bpack(ts, klen, len(value), nh)
            meta = fixed + (key or b"") + hdrs if (key or hdrs) else fixed
            cs = h64(value, h64(meta, off))
            body_len = len(meta) + len(value)
            if body_len > MAX_BODY_BYTES:
                raise InvalidArgumentError("record body exceeds 4 GiB")
            append(hpack(off, body_len, cs))
            append(fixed)
            if key:
                append(key)
            append(value)
            if hdrs:
                append(hdrs)
            sizes.append(HEADER_SIZE + body_len)
            timestamps.append(ts)
        off += 1
    return EncodedBatch(base_offset, b"".join(parts), sizes, timestamps)


class FrameInfo(NamedTuple):
    """Where one verified frame lies in a buffer: for index rebuilds, recovery and cutting
    chunks to ship (a NamedTuple: the scans build one per record)."""

    offset: int
    position: int
    size: int
    timestamp: int


def _decode_at(buf: bytes | memoryview, pos: int, end: int) -> tuple[Record, int]:
    """Decode and verify the frame at ``pos``; return it and the next position.

    Raises CorruptRecordError on any framing or checksum failure, and
    ``_Incomplete`` when the frame runs past ``end``.
    """
    if pos + HEADER_SIZE > end:
        raise _Incomplete
    off, blen, cs = HEADER.unpack_from(buf, pos)
    fend = pos + HEADER_SIZE + blen
    if blen < BODY_FIXED_SIZE:
        raise CorruptRecordError(f"frame at byte {pos} has an impossible body length {blen}")
    if fend > end:
        raise _Incomplete
    b = pos + HEADER_SIZE
    ts, klen, vlen, nh = BODY_FIXED.unpack_from(buf, b)
    k0 = b + BODY_FIXED_SIZE
    k1 = k0 + (klen if klen > 0 else 0)
    v1 = k1 + vlen
    if klen < -1 or v1 > fend:
        raise CorruptRecordError(f"frame at byte {pos} (offset {off}) has bad lengths")
    if klen < 0 and nh == 0:
        if v1 != fend:
            raise CorruptRecordError(f"frame at byte {pos} (offset {off}) has bad lengths")
        value = bytes(buf[k1:v1])
        if _h64(value, _h64(buf[b:k0], off)) != cs:
            raise CorruptRecordError(f"checksum mismatch for the record at offset {off}")
        return Record(off, ts, None, value, (), cs), fend
    key = bytes(buf[k0:k1]) if klen >= 0 else None
    value = bytes(buf[k1:v1])
    meta = bytes(buf[b:k1]) + bytes(buf[v1:fend])
    if _h64(value, _h64(meta, off)) != cs:
        raise CorruptRecordError(f"checksum mismatch for the record at offset {off}")
    headers = decode_headers(buf, v1, nh, fend) if nh else ()
    if not nh and v1 != fend:
        raise CorruptRecordError(f"frame at byte {pos} (offset {off}) has trailing bytes")
    return Record(off, ts, key, value, headers, cs), fend


class _Incomplete(Exception):
    """The buffer ends inside a frame (not an error by itself: read more, or a torn tail)."""


def decode_frames(
    buf: bytes | memoryview,
    pos: int = 0,
    end: int | None = None,
    *,
    start_offset: int | None = None,
    max_records: int | None = None,
    max_bytes: int | None = None,
) -> tuple[list[Record], int, int]:
    """Decode verified records from ``buf[pos:end]``.

    Skips records below ``start_offset``; stops at ``max_records``, at ``max_bytes`` of
    frames (always returning at least one record), or at the first incomplete frame.
    Returns the records, the position after the last consumed frame and the bytes of the
    returned frames. Raises
    CorruptRecordError on a bad frame; a corrupt record is never returned.
    """
    end = len(buf) if end is None else end
    out: list[Record] = []
    used = 0
    limit_n = max_records if max_records is not None else 1 << 62
    limit_b = max_bytes if max_bytes is not None else 1 << 62
    if start_offset is not None:
        # Skip without decoding bodies until the wanted offset.
        while pos + HEADER_SIZE <= end:
            off, blen, _ = HEADER.unpack_from(buf, pos)
            if off >= start_offset or pos + HEADER_SIZE + blen > end:
                break
            pos += HEADER_SIZE + blen
    unpack = _FRAME_FIXED.unpack_from
    h64 = _h64
    new = tuple.__new__
    rec_t = Record
    n = 0
    while pos + FRAME_OVERHEAD <= end and n < limit_n:
        off, blen, cs, ts, klen, vlen, nh = unpack(buf, pos)
        fend = pos + HEADER_SIZE + blen
        if fend > end:
            break
        size = fend - pos
        if n and used + size > limit_b:
            break
        if klen == -1 and nh == 0 and blen == BODY_FIXED_SIZE + vlen:
            # Fast path: no key, no headers.
            value = buf[pos + FRAME_OVERHEAD : fend]
            if not isinstance(value, bytes):
                value = bytes(value)
            if h64(value, h64(buf[pos + HEADER_SIZE : pos + FRAME_OVERHEAD], off)) != cs:
                raise CorruptRecordError(f"checksum mismatch for the record at offset {off}")
            rec = new(rec_t, (off, ts, None, value, (), cs))
        else:
            try:
                rec, _ = _decode_at(buf, pos, end)
            except _Incomplete:
                break
        out.append(rec)
        used += size
        pos = fend
        n += 1
    return out, pos, used


class FrameColumns(NamedTuple):
    """The verified frames of a buffer as columns (what :func:`decode_columns` returns).

    ``values[i]`` is a zero-copy ``memoryview`` into the decoded buffer for a frame with
    no key and no headers (the common one), else ``bytes``; either joins with
    ``b"".join``. ``end`` is the position after the last complete frame.
    """

    offsets: list[int]
    timestamps: list[int]
    keys: list[bytes | None]
    values: list[bytes | memoryview]
    headers: list[Headers]
    end: int


def decode_columns(buf: bytes | memoryview) -> FrameColumns:
    """Every complete frame of ``buf``, checksums verified, as columns, without building a
    :class:`Record` or copying a value: for consumers that build columnar batches (the
    Spark source's Arrow batches). Stops at the first incomplete frame (see ``end``);
    raises CorruptRecordError on a bad one, like :func:`decode_frames`.
    """
    mv = memoryview(buf)
    end = len(mv)
    offsets: list[int] = []
    timestamps: list[int] = []
    keys: list[bytes | None] = []
    values: list[bytes | memoryview] = []
    headers: list[Headers] = []
    add_o, add_t, add_k, add_v, add_h = (offsets.append, timestamps.append, keys.append,
                                         values.append, headers.append)
    unpack = _FRAME_FIXED.unpack_from
    h64 = _h64
    pos = 0
    while pos + FRAME_OVERHEAD <= end:
        off, blen, cs, ts, klen, vlen, nh = unpack(mv, pos)
        fend = pos + HEADER_SIZE + blen
        if fend > end:
            break
        if klen == -1 and nh == 0 and blen == BODY_FIXED_SIZE + vlen:
            value = mv[pos + FRAME_OVERHEAD : fend]
            if h64(value, h64(mv[pos + HEADER_SIZE : pos + FRAME_OVERHEAD], off)) != cs:
                raise CorruptRecordError(f"checksum mismatch for the record at offset {off}")
            add_o(off)
            add_t(ts)
            add_k(None)
            add_v(value)
            add_h(())
        else:
            try:
                rec, _ = _decode_at(mv, pos, end)
            except _Incomplete:
                break
            add_o(off)
            add_t(rec.timestamp)
            add_k(rec.key)
            add_v(rec.value)
            add_h(rec.headers)
        pos = fend
    return FrameColumns(offsets, timestamps, keys, values, headers, pos)


def frames_to_producer_records(
    buf: bytes | memoryview,
    append_threshold: int,
    *,
    max_records: int | None = None,
) -> list[ProducerRecord | bytes]:
    """The records to append from a body of frames (the binary produce request).

    Every frame is checked whole before anything is returned: its lengths, its checksum
    (against the offset the frame carries, as :func:`encode_batch` computed it), its
    value (not empty, at most ``append_threshold`` bytes) and its timestamp. Apart from
    the checksum the frames' offsets are ignored: the log assigns new ones. A negative
    timestamp means "the appending log's clock" (``timestamp=None``).

    No :class:`Record` is built: each value and key is sliced (copied once) from ``buf``
    into what is returned (a ``buf`` that is not ``bytes`` is copied first). A frame with
    no key, no headers and a negative timestamp comes back as its bare value (``bytes``,
    the cheapest item for :func:`encode_batch`), any other as a :class:`ProducerRecord`.

    Raises CorruptRecordError naming the first bad frame (index, byte position, offset),
    also when ``buf`` ends inside a frame; RecordTooLargeError for a value over
    ``append_threshold``; InvalidArgumentError for an empty ``buf``, more than
    ``max_records`` frames, an empty value or a timestamp past the 2**62 ms range.
    """
    data = bytes(buf) if not isinstance(buf, bytes) else buf  # slices of bytes: one copy
    end = len(data)
    if end == 0:
        raise InvalidArgumentError("the body holds no record frames")
    limit = max_records if max_records is not None else 1 << 62
    out: list[ProducerRecord | bytes] = []
    append = out.append
    unpack = _FRAME_FIXED.unpack_from
    h64 = _h64
    hsize, fsize, overhead = HEADER_SIZE, BODY_FIXED_SIZE, FRAME_OVERHEAD
    pos = 0
    i = 0

    def where(off: int | None = None) -> str:
        return f"frame {i} (at byte {pos}" + ("" if off is None else f", offset {off}") + ")"

    while pos < end:
        if i >= limit:
            raise InvalidArgumentError(f"more than {limit} record frames in one batch")
        if pos + overhead > end:
            raise CorruptRecordError(f"{where()}: the body ends inside it")
        off, blen, cs, ts, klen, vlen, nh = unpack(data, pos)
        b = pos + hsize
        fend = b + blen
        if fend > end:
            raise CorruptRecordError(f"{where(off)}: the body ends inside it")
        if klen == -1 and nh == 0 and blen == fsize + vlen:
            # The common frame: no key, no headers; meta is the fixed body fields.
            v0 = pos + overhead
            value = data[v0:fend]
            if h64(value, h64(data[b:v0], off)) != cs:
                raise CorruptRecordError(f"{where(off)}: checksum mismatch")
            if 0 < vlen <= append_threshold and ts < 0:
                append(value)
                pos = fend
                i += 1
                continue
            key: bytes | None = None
            headers: Headers = ()
        else:
            k0 = b + fsize
            k1 = k0 + (klen if klen > 0 else 0)
            v1 = k1 + vlen
            if blen < fsize or klen < -1 or v1 > fend or (nh == 0 and v1 != fend):
                raise CorruptRecordError(f"{where(off)}: its lengths do not add up")
            value = data[k1:v1]
            if h64(value, h64(data[b:k1] + data[v1:fend], off)) != cs:
                raise CorruptRecordError(f"{where(off)}: checksum mismatch")
            try:
                headers = decode_headers(data, v1, nh, fend) if nh else ()
            except CorruptRecordError as exc:
                raise CorruptRecordError(f"{where(off)}: {exc}") from None
            key = data[k0:k1] if klen >= 0 else None
        if vlen > append_threshold:
            raise RecordTooLargeError(
                f"{where(off)}: a value of {vlen} bytes exceeds the append threshold of "
                f"{append_threshold} bytes"
            )
        if vlen == 0:
            raise InvalidArgumentError(f"{where(off)}: the record value must not be empty")
        if ts >= 1 << 62:
            raise InvalidArgumentError(f"{where(off)}: timestamp {ts} is out of range")
        append(ProducerRecord(value, key, headers, ts if ts >= 0 else None))
        pos = fend
        i += 1
    return out


def scan_frames(buf: bytes | memoryview, expect_offset: int) -> Iterator[FrameInfo]:
    """The verified frames of ``buf`` from byte 0, holding offsets ``expect_offset``, +1,
    ..., in order: for recovery, index rebuilds and the verify/dump tools.

    Stops silently at the first frame that is incomplete, fails its checksum, or breaks
    the offset sequence (the checks of :func:`frame_table`, which does the work); the
    caller compares the last position reached with the buffer's end to find a torn or
    damaged tail.
    """
    positions, timestamps, end = frame_table(buf, expect_offset)
    new, info_t = tuple.__new__, FrameInfo
    ends = [*positions[1:], end] if positions else []
    for i, (pos, nxt, ts) in enumerate(zip(positions, ends, timestamps, strict=True)):
        yield new(info_t, (expect_offset + i, pos, nxt - pos, ts))


def frame_table(buf: bytes | memoryview, expect_offset: int) -> tuple[list[int], list[int], int]:
    """Verify the frames of ``buf`` from byte 0, which must hold offsets ``expect_offset``,
    +1, ...: ``(positions, timestamps, end)`` of the verified frames, where ``end`` is the
    position after the last one. Stops (without raising) at the first frame that is
    incomplete, fails its checksum or breaks the offset sequence. One tight loop that
    returns lists: for cutting a segment into chunks to ship, and under
    :func:`scan_frames`."""
    mv = memoryview(buf)
    end = len(mv)
    positions: list[int] = []
    timestamps: list[int] = []
    add_p, add_t = positions.append, timestamps.append
    unpack = _FRAME_FIXED.unpack_from
    h64 = _h64
    pos = 0
    expect = expect_offset
    while pos + FRAME_OVERHEAD <= end:
        off, blen, cs, ts, klen, vlen, nh = unpack(mv, pos)
        nxt = pos + HEADER_SIZE + blen
        if off != expect or nxt > end:
            break
        if klen == -1 and nh == 0 and blen == BODY_FIXED_SIZE + vlen:
            if h64(mv[pos + FRAME_OVERHEAD : nxt], h64(mv[pos + HEADER_SIZE : pos + FRAME_OVERHEAD],
                                                        off)) != cs:
                break
        else:
            try:
                _decode_at(mv, pos, end)
            except (_Incomplete, CorruptRecordError, struct.error):
                break
        add_p(pos)
        add_t(ts)
        expect += 1
        pos = nxt
    return positions, timestamps, pos


def frame_header(buf: bytes | memoryview, pos: int = 0) -> tuple[int, int, int]:
    """``(offset, frame_size, checksum)`` of the frame at ``pos`` without verifying it."""
    off, blen, cs = HEADER.unpack_from(buf, pos)
    return off, HEADER_SIZE + blen, cs


__all__ = [
    "FRAME_OVERHEAD",
    "HEADER_SIZE",
    "EncodedBatch",
    "FrameColumns",
    "FrameInfo",
    "Headers",
    "ProducerRecord",
    "Record",
    "checksum_of",
    "decode_columns",
    "decode_frames",
    "encode_batch",
    "encode_headers",
    "frame_header",
    "frame_table",
    "frames_to_producer_records",
    "scan_frames",
    "validate_value",
]
