"""The record batch: its byte layout, its constants and the types of its records.

A store file is a sequence of *batches*, each holding one or more records with consecutive
offsets (as Kafka's RecordBatch v2). The same bytes go unchanged over the binary HTTP API
and into the bucket, so a store file is *self-describing*: indexes can always be rebuilt by
scanning it. All integers are little-endian. One batch of ``n`` records::

    0   u64  base_offset      offset of its first record (record i has base_offset + i)
    8   u32  size             bytes of the whole batch, this header included
   12   u64  checksum         xxh3_64(batch[20:size], seed=base_offset)
   20   u16  magic            0x5442 ("TB")
   22   u16  attributes       0: no attribute bit is defined (receive_batches refuses
                              a batch with any bit set)
   24   u32  count            n >= 1
   28   i64[n]  timestamps    milliseconds since the epoch
        i32[n]  key lengths   -1 = no key
        u32[n]  value lengths > 0
        u32[n]  header bytes  length of each record's header block (0 = no headers)
        then the keys, then the values, then the header blocks, each concatenated in
        record order; a header block is, per header: u16 name_length, name (UTF-8),
        i32 value_length (-1 = null), value.

One checksum covers a whole batch (seeding it with the base offset binds the batch to its
place in the log, so a batch copied to the wrong offset fails its check too): verifying
a page of records is one xxh3 call, and the columns decode with a few C-level calls
instead of a Python loop over records. Columns rather than per-record headers make the
values of a batch contiguous. A record's *size* (what ``max_bytes`` limits count) is
``20 + key + value + header bytes``, its share of the columns and data.

Encoding is in :mod:`tiered_log.format.batch_encode` (:func:`encode_batch` cuts its input
into batches of at most :data:`MAX_BATCH_BYTES`, a larger single record getting a batch
of its own, so a chunk shipped to the bucket or a page read never has to hold much more
than that); verifying and decoding in :mod:`tiered_log.format.batch_decode`;
:mod:`tiered_log.format.records` gathers the public names of all three. This module
holds what both sides share: the header struct and offsets into it, the record types,
the header-block codec, the column helpers, and the reads of a batch's header fields
that do not verify it.

Everything here is pure and stateless: safe from any thread.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

import xxhash

from ..errors import CorruptRecordError, InvalidArgumentError

HEADER = struct.Struct("<QIQHHI")
"""base_offset u64, size u32, checksum u64, magic u16, attributes u16, count u32."""
HEADER_SIZE = HEADER.size  # 28
CHECKSUM_AT = 12
"""Where the checksum lies in the header."""
CHECKED_FROM = 20
"""The checksum covers a batch from this byte on (everything after the checksum)."""
MAGIC = 0x5442
KNOWN_ATTRIBUTES = 0
"""The attribute bits the format defines (none): a batch with another bit set is from a
format this code does not know, and is refused where batches come in."""
ATTRIBUTES_AT = 22
ATTRIBUTES = struct.Struct("<H")
"""The attributes field (u16 at :data:`ATTRIBUTES_AT`)."""
RECORD_OVERHEAD = 20
"""Column bytes per record: timestamp 8, key length 4, value length 4, header bytes 4."""
MAX_BATCH_BYTES = 1 << 20
""":func:`~tiered_log.format.batch_encode.encode_batch` starts a new batch before one
would pass this size."""
U64 = struct.Struct("<Q")
"""A u64 (the base offset at byte 0, the checksum at :data:`CHECKSUM_AT`)."""
_TIMESTAMP = struct.Struct("<q")
_HNAME = struct.Struct("<H")
_HVAL = struct.Struct("<i")

MAX_KEY_BYTES = (1 << 31) - 1
MAX_HEADERS = (1 << 16) - 1
MAX_BODY_BYTES = (1 << 32) - 1 - HEADER_SIZE - RECORD_OVERHEAD
"""The largest key + value + headers one record may have (a batch's size is a u32)."""

Headers = tuple[tuple[str, bytes | None], ...]

h64 = xxhash.xxh3_64_intdigest
"""The batch checksum: ``h64(batch[CHECKED_FROM:size], base_offset)``."""
_BIG_ENDIAN_HOST = sys.byteorder == "big"


class Record(NamedTuple):
    """One record as read from the log. Immutable; safe to share between threads.

    ``checksum`` is that of the batch the record was stored in (verified when read).
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
        """Bytes this record takes in a batch (its columns, key, value and headers)."""
        return (
            RECORD_OVERHEAD
            + len(self.value)
            + (len(self.key) if self.key else 0)
            + len(encode_headers(self.headers))
        )


@dataclass(frozen=True, slots=True)
class ProducerRecord:
    """A record to append: the offset is assigned by the log, the timestamp too if None."""

    value: bytes
    key: bytes | None = None
    headers: Headers = field(default=())
    timestamp: int | None = None


class BatchInfo(NamedTuple):
    """One batch of a buffer: where it lies and what the indexes and chunks need."""

    base_offset: int
    record_count: int
    position: int
    size: int
    first_timestamp: int
    max_timestamp: int
    max_timestamp_offset: int
    """The offset of the (first) record holding ``max_timestamp``."""

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.record_count


def batch_info(base: int, position: int, size: int, timestamps: array[int]) -> BatchInfo:
    """The :class:`BatchInfo` of a batch whose timestamp column is ``timestamps``."""
    mx = max(timestamps)
    return BatchInfo(
        base, len(timestamps), position, size, timestamps[0], mx, base + timestamps.index(mx)
    )


def encode_headers(headers: Iterable[tuple[str, bytes | None]]) -> bytes:
    """Encode headers as ``u16 name_len, name, i32 value_len (-1 null), value`` each."""
    parts: list[bytes] = []
    try:
        items = list(headers)
    except TypeError as exc:
        raise InvalidArgumentError("headers must be a sequence of (name, value) pairs") from exc
    if len(items) > MAX_HEADERS:
        raise InvalidArgumentError("a record may have at most 65535 headers")
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


def decode_headers(buf: bytes | memoryview, pos: int, end: int) -> Headers:
    """Decode the header block ``buf[pos:end]``; CorruptRecordError if it is malformed."""
    out: list[tuple[str, bytes | None]] = []
    try:
        while pos < end:
            (nlen,) = _HNAME.unpack_from(buf, pos)
            pos += 2
            if pos + nlen > end:
                raise CorruptRecordError("a header name overruns its record")
            name = bytes(buf[pos : pos + nlen]).decode("utf-8")
            pos += nlen
            (vlen,) = _HVAL.unpack_from(buf, pos)
            pos += 4
            if vlen < -1 or pos + max(vlen, 0) > end:
                raise CorruptRecordError("a header value overruns its record")
            if vlen < 0:
                out.append((name, None))
            else:
                out.append((name, bytes(buf[pos : pos + vlen])))
                pos += vlen
    except (struct.error, UnicodeDecodeError) as exc:
        raise CorruptRecordError(f"malformed record headers: {exc}") from exc
    if pos != end:
        raise CorruptRecordError("record headers overrun their record")
    return tuple(out)


def read_column(mv: memoryview, pos: int, typecode: str, n: int) -> array[int]:
    """The ``n`` little-endian integers of type ``typecode`` at ``mv[pos:]`` as an array."""
    col = array(typecode)
    col.frombytes(mv[pos : pos + col.itemsize * n])
    if _BIG_ENDIAN_HOST:
        col.byteswap()
    return col


def le_bytes(col: array[int]) -> bytes:
    """An array's integers as little-endian bytes (the format's byte order)."""
    if _BIG_ENDIAN_HOST:
        col = array(col.typecode, col)
        col.byteswap()
    return col.tobytes()


def batch_timestamps(buf: bytes | memoryview, pos: int, count: int) -> array[int]:
    """The timestamp column (``count`` records) of the batch at ``pos``, unverified."""
    return read_column(memoryview(buf), pos + HEADER_SIZE, "q", count)


def first_timestamp(buf: bytes | memoryview, pos: int = 0) -> int:
    """The timestamp of the first record of the batch at ``pos``, without verifying it."""
    return int(_TIMESTAMP.unpack_from(buf, pos + HEADER_SIZE)[0])


@dataclass(frozen=True, slots=True)
class FetchData:
    """What a batch read of either tier returns (as Kafka's ``FetchDataInfo``): stored
    batches, unchanged and verified, holding the records from ``first_offset`` (the
    offset asked for) up to ``next_offset``. The first batch may begin below
    ``first_offset`` (a reader skips those records); ``data`` is empty when the read was
    at the log's end. Immutable (``data`` may be a view of a buffer nobody writes)."""

    data: bytes | memoryview
    first_offset: int
    next_offset: int

    @property
    def count(self) -> int:
        """Records from ``first_offset`` the batches hold."""
        return self.next_offset - self.first_offset


def batch_header(buf: bytes | memoryview, pos: int = 0) -> tuple[int, int, int]:
    """``(base_offset, size, count)`` of the batch at ``pos`` without verifying it."""
    base, size, _cs, _m, _a, n = HEADER.unpack_from(buf, pos)
    return base, size, n
