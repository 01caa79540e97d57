"""Record batches: the bytes of records in a segment's store file.

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

:func:`encode_batch` cuts its input into batches of at most :data:`MAX_BATCH_BYTES`
(a larger single record gets a batch of its own), so a chunk shipped to the bucket or a
page read never has to hold much more than that.

Everything here is pure and stateless: safe from any thread.
"""

from __future__ import annotations

import struct
import sys
from array import array
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import accumulate, repeat
from typing import NamedTuple, cast

import xxhash

from ..errors import CorruptRecordError, InvalidArgumentError, RecordTooLargeError

HEADER = struct.Struct("<QIQHHI")
"""base_offset u64, size u32, checksum u64, magic u16, attributes u16, count u32."""
HEADER_SIZE = HEADER.size  # 28
CHECKED_FROM = 20
"""The checksum covers a batch from this byte on (everything after the checksum)."""
MAGIC = 0x5442
KNOWN_ATTRIBUTES = 0
"""The attribute bits the format defines (none): a batch with another bit set is from a
format this code does not know, and is refused where batches come in."""
_ATTRIBUTES_AT = 22
_ATTRIBUTES = struct.Struct("<H")
RECORD_OVERHEAD = 20
"""Column bytes per record: timestamp 8, key length 4, value length 4, header bytes 4."""
MAX_BATCH_BYTES = 1 << 20
""":func:`encode_batch` starts a new batch before one would pass this size."""
_BASE = struct.Struct("<Q")
_TIMESTAMP = struct.Struct("<q")
_CHECKSUM_AT = 12
_HNAME = struct.Struct("<H")
_HVAL = struct.Struct("<i")

MAX_KEY_BYTES = (1 << 31) - 1
MAX_HEADERS = (1 << 16) - 1
MAX_BODY_BYTES = (1 << 32) - 1 - HEADER_SIZE - RECORD_OVERHEAD
"""The largest key + value + headers one record may have (a batch's size is a u32)."""

Headers = tuple[tuple[str, bytes | None], ...]

_h64 = xxhash.xxh3_64_intdigest
_BIG_ENDIAN_HOST = sys.byteorder == "big"
_new = tuple.__new__


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
        return RECORD_OVERHEAD + len(self.value) + (len(self.key) if self.key else 0) + len(
            encode_headers(self.headers)
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


def _info(base: int, position: int, size: int, timestamps: array[int]) -> BatchInfo:
    """The :class:`BatchInfo` of a batch whose timestamp column is ``timestamps``."""
    mx = max(timestamps)
    return BatchInfo(base, len(timestamps), position, size, timestamps[0], mx,
                     base + timestamps.index(mx))


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


# ---- encoding ------------------------------------------------------------------------


@dataclass(slots=True)
class EncodedBatch:
    """Batches of consecutive records ready to write, plus what the indexes need.

    ``batches`` describe the batches of ``data`` (positions relative to its start).
    Built by :func:`encode_batch`, or by :func:`receive_batches` from a client's bytes and
    then moved to the log's next offset with :meth:`rebased`. Not thread-safe to mutate.
    """

    base_offset: int
    data: bytes | bytearray
    batches: list[BatchInfo]
    count: int

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.count

    @property
    def payload_bytes(self) -> int:
        """Bytes of keys, values and header blocks (the batches minus their framing)."""
        return len(self.data) - HEADER_SIZE * len(self.batches) - RECORD_OVERHEAD * self.count

    def rebased(self, base_offset: int, now_ms: int) -> EncodedBatch:
        """These batches moved to ``base_offset`` (the batches need not have been
        consecutive), timestamps below 0 set to ``now_ms``: offsets and checksums rewritten
        in place (the bytes must be verified already, as :func:`receive_batches` does).
        A ``bytearray`` ``data`` is rewritten in place (no copy of a large body): do not
        use this batch afterwards, only the one returned.
        """
        data = self.data if isinstance(self.data, bytearray) else bytearray(self.data)
        mv = memoryview(data)
        out: list[BatchInfo] = []
        off = base_offset
        for b in self.batches:
            p, n = b.position, b.record_count
            _BASE.pack_into(data, p, off)
            ts = _column(mv, p + HEADER_SIZE, "q", n)
            if min(ts) < 0:
                ts = array("q", [now_ms if t < 0 else t for t in ts])
                mv[p + HEADER_SIZE : p + HEADER_SIZE + 8 * n] = _le_bytes(ts)
            _BASE.pack_into(data, p + _CHECKSUM_AT, _h64(mv[p + CHECKED_FROM : p + b.size], off))
            out.append(_info(off, p, b.size, ts))
            off += n
        mv.release()
        return EncodedBatch(base_offset, data, out, self.count)


def _batch_counts(record_sizes: Iterable[int], limit: int) -> list[int]:
    """Record counts of consecutive batches of records of these sizes, each batch at most
    ``limit`` bytes (or one record)."""
    ends = list(accumulate(record_sizes))
    counts: list[int] = []
    i, n, used = 0, len(ends), 0
    while i < n:
        j = max(bisect_right(ends, used + limit - HEADER_SIZE, i), i + 1)
        counts.append(j - i)
        used = ends[j - 1]
        i = j
    return counts


def _assemble(parts: list[bytes | bytearray | memoryview], off: int,
              timestamps: array[int], klens: array[int], vlens: array[int],
              hlens: array[int], payload: Sequence[bytes | memoryview], at: int,
              ) -> BatchInfo:
    """Append one batch's pieces to ``parts`` (its header last patched by the caller via
    :func:`_seal_batches`); return its info with ``position`` = ``at``."""
    body = [_le_bytes(timestamps), _le_bytes(klens), _le_bytes(vlens), _le_bytes(hlens), *payload]
    size = HEADER_SIZE + sum(map(len, body))
    parts.append(HEADER.pack(off, size, 0, MAGIC, 0, len(timestamps)))
    parts.extend(body)
    return _info(off, at, size, timestamps)


def _seal_batches(parts: list[bytes | bytearray | memoryview], infos: list[BatchInfo]) -> bytearray:
    """Join ``parts`` and write every batch's checksum into it."""
    data = bytearray().join(parts)
    mv = memoryview(data)
    for b in infos:
        p = b.position
        _BASE.pack_into(data, p + _CHECKSUM_AT,
                        _h64(mv[p + CHECKED_FROM : p + b.size], b.base_offset))
    mv.release()
    return data


def encode_batch(
    base_offset: int,
    records: Sequence[ProducerRecord | bytes],
    now_ms: int,
    append_threshold: int,
    *,
    max_batch_bytes: int = MAX_BATCH_BYTES,
) -> EncodedBatch:
    """Encode ``records`` as batches with offsets ``base_offset, base_offset+1, ...``.

    A bare ``bytes`` item is a value with no key, no headers and timestamp ``now_ms``, as
    is a record whose ``timestamp`` is None. ``now_ms`` is not validated: a client may
    pass ``-1`` ("the appending log's clock", see :meth:`EncodedBatch.rebased`).
    Validates every record first; raises before producing anything on bad input.
    """
    n = len(records)
    if n and all(type(r) is bytes for r in records):
        values = cast("Sequence[bytes]", records)
        lens = list(map(len, values))
        if min(lens) > 0 and max(lens) <= min(append_threshold, MAX_BODY_BYTES):
            # Bare values: every column is built in C.
            return _encode_columns(base_offset, array("q", [now_ms]) * n, array("i", [-1]) * n,
                                   array("I", lens), array("I", bytes(4 * n)), None, values, None,
                                   max_batch_bytes)
    ts_col, keys, values, hdrs = _producer_columns(records, now_ms, append_threshold)
    return _encode_columns(base_offset, ts_col, array("i", [-1 if k is None else len(k) for k in keys]),
                           array("I", map(len, values)), array("I", map(len, hdrs)), keys, values,
                           hdrs, max_batch_bytes)


def _producer_columns(records: Sequence[ProducerRecord | bytes], now_ms: int,
                      append_threshold: int,
                      ) -> tuple[array[int], list[bytes | None], list[bytes], list[bytes]]:
    """Validate records and split them into timestamps, keys, values and header blocks."""
    ts_col = array("q")
    keys: list[bytes | None] = []
    values: list[bytes] = []
    hdrs: list[bytes] = []
    for rec in records:
        if isinstance(rec, bytes):
            validate_value(rec, append_threshold)
            ts_col.append(now_ms)
            keys.append(None)
            values.append(rec)
            hdrs.append(b"")
            continue
        if not isinstance(rec, ProducerRecord):
            raise InvalidArgumentError(
                f"records must be ProducerRecord or bytes, not {type(rec).__name__}"
            )
        validate_value(rec.value, append_threshold)
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
        h = encode_headers(rec.headers) if rec.headers else b""
        if (len(key) if key else 0) + len(rec.value) + len(h) > MAX_BODY_BYTES:
            raise InvalidArgumentError("a record's key, value and headers exceed 4 GiB")
        ts_col.append(ts)
        keys.append(key)
        values.append(bytes(rec.value))
        hdrs.append(h)
    return ts_col, keys, values, hdrs


def _encode_columns(base_offset: int, ts_col: array[int], kl: array[int], vl: array[int],
                    hl: array[int], keys: Sequence[bytes | None] | None, values: Sequence[bytes],
                    hdrs: Sequence[bytes] | None, max_batch_bytes: int) -> EncodedBatch:
    """Batches of validated columns; ``keys``/``hdrs`` None when no record has any."""
    if keys is None and hdrs is None:
        sizes: Iterable[int] = (RECORD_OVERHEAD + v for v in vl)
    else:
        sizes = (RECORD_OVERHEAD + (k if k > 0 else 0) + v + h
                 for k, v, h in zip(kl, vl, hl, strict=True))
    parts: list[bytes | bytearray | memoryview] = []
    infos: list[BatchInfo] = []
    at, i = 0, 0
    for cnt in _batch_counts(sizes, max_batch_bytes):
        j = i + cnt
        payload: Sequence[bytes | memoryview] = values[i:j]
        if keys is not None and hdrs is not None:
            payload = [k for k in keys[i:j] if k is not None] + list(values[i:j]) + list(hdrs[i:j])
        info = _assemble(parts, base_offset + i, ts_col[i:j], kl[i:j], vl[i:j], hl[i:j],
                         payload, at)
        infos.append(info)
        at += info.size
        i = j
    return EncodedBatch(base_offset, _seal_batches(parts, infos), infos, len(values))


# ---- decoding ------------------------------------------------------------------------


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


def _column(mv: memoryview, pos: int, typecode: str, n: int) -> array[int]:
    """The ``n`` little-endian integers of type ``typecode`` at ``mv[pos:]`` as an array."""
    col = array(typecode)
    col.frombytes(mv[pos : pos + col.itemsize * n])
    if _BIG_ENDIAN_HOST:
        col.byteswap()
    return col


def _le_bytes(col: array[int]) -> bytes:
    """An array's integers as little-endian bytes (the format's byte order)."""
    if _BIG_ENDIAN_HOST:
        col = array(col.typecode, col)
        col.byteswap()
    return col.tobytes()


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
    if _h64(mv[pos + CHECKED_FROM : bend], base) != cs:
        raise CorruptRecordError(f"checksum mismatch for the batch at offset {base}")
    if magic != MAGIC or n < 1 or HEADER_SIZE + RECORD_OVERHEAD * n > size:
        raise CorruptRecordError(f"batch at offset {base} has a bad header")
    p = pos + HEADER_SIZE
    ts = _column(mv, p, "q", n)
    kcol = _column(mv, p + 8 * n, "i", n)
    vl = _column(mv, p + 12 * n, "I", n)
    hcol = _column(mv, p + 16 * n, "I", n)
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


def _fields(buf: bytes | memoryview, b: _Parsed, lo: int, hi: int,
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
        keys = [bytes(buf[kpos[i] : kpos[i + 1]]) if b.klens[i] >= 0 else None
                for i in range(lo, hi)]
    vpos = list(accumulate(b.vlens, initial=p))
    cut = cast("Callable[[slice], bytes | memoryview]", buf.__getitem__)
    values = map(cut, map(slice, vpos[lo:hi], vpos[lo + 1 : hi + 1]))
    headers: Iterable[Headers]
    if b.hlens is None:
        headers = repeat((), m)
    else:
        hpos = list(accumulate(b.hlens, initial=vpos[-1]))
        headers = [decode_headers(buf, hpos[i], hpos[i + 1]) if b.hlens[i] else ()
                   for i in range(lo, hi)]
    return keys, values, headers


def _records(buf: bytes, b: _Parsed, lo: int, hi: int) -> list[Record]:
    """Records ``lo .. hi-1`` (indexes within the batch) of a parsed batch of ``buf``."""
    m = hi - lo
    keys, values, headers = _fields(buf, b, lo, hi)
    return list(map(_new, repeat(Record, m), zip(range(b.base + lo, b.base + hi),
                                                   b.timestamps[lo:hi], keys, values, headers,
                                                   repeat(b.checksum, m), strict=True)))


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
    return list(accumulate((RECORD_OVERHEAD + (k if k > 0 else 0) + v + h
                            for k, v, h in zip(kl, b.vlens, hl, strict=True)), initial=0))


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
) -> EncodedBatch:
    """A client's batches (the binary produce request), checked whole, ready to append.

    Every batch is verified before anything is returned: its checksum (against the base
    offset it carries), its lengths, its values (not empty, at most ``append_threshold``
    bytes), its timestamps (below 2**62; a negative one means "the appending log's clock"),
    its headers and its attributes (no bit outside :data:`KNOWN_ATTRIBUTES`, none
    today). The batches' offsets are not checked against each other: the log
    assigns new ones (:meth:`EncodedBatch.rebased`). ``buf`` is copied once.

    Raises CorruptRecordError naming the first bad batch (index, byte position, offset),
    also when ``buf`` ends inside a batch or a batch has unknown attribute bits;
    RecordTooLargeError for a value over ``append_threshold``; InvalidArgumentError for
    an empty ``buf``, more than ``max_records`` records, an empty value or a timestamp
    past the 2**62 ms range.
    """
    data = bytearray(buf)
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
        (attributes,) = _ATTRIBUTES.unpack_from(data, pos + _ATTRIBUTES_AT)
        if attributes & ~KNOWN_ATTRIBUTES:
            raise CorruptRecordError(
                f"{where}: attributes 0x{attributes:04x} has bits the format does not define "
                "(attributes must be 0)")
        total += b.n
        if total > limit:
            raise InvalidArgumentError(f"more than {limit} records in one request")
        if min(b.vlens) == 0:
            raise InvalidArgumentError(f"{where}: a record value must not be empty")
        if max(b.vlens) > append_threshold:
            raise RecordTooLargeError(
                f"{where}: a value of {max(b.vlens)} bytes exceeds the append threshold of "
                f"{append_threshold} bytes")
        if max(b.timestamps) >= 1 << 62:
            raise InvalidArgumentError(f"{where}: timestamp {max(b.timestamps)} is out of range")
        try:
            _check_header_blocks(data, b)
        except CorruptRecordError as exc:
            raise CorruptRecordError(f"{where}: {exc}") from None
        infos.append(_info(b.base, pos, b.end - pos, b.timestamps))
        pos = b.end
        i += 1
    return EncodedBatch(infos[0].base_offset, data, infos, total)


# ---- scanning ------------------------------------------------------------------------


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
        out.append(_info(b.base, pos, b.end - pos, b.timestamps))
        expect += b.n
        pos = b.end
    return out, pos


def scan_batches(buf: bytes | memoryview, expect_offset: int) -> Iterator[BatchInfo]:
    """The verified batches of ``buf`` (see :func:`batch_table`), one at a time."""
    yield from batch_table(buf, expect_offset)[0]


def batch_timestamps(buf: bytes | memoryview, pos: int, count: int) -> array[int]:
    """The timestamp column (``count`` records) of the batch at ``pos``, unverified."""
    return _column(memoryview(buf), pos + HEADER_SIZE, "q", count)


def first_timestamp(buf: bytes | memoryview, pos: int = 0) -> int:
    """The timestamp of the first record of the batch at ``pos``, without verifying it."""
    return int(_TIMESTAMP.unpack_from(buf, pos + HEADER_SIZE)[0])


def rebatch(records: Sequence[Record], max_batch_bytes: int = MAX_BATCH_BYTES) -> bytes:
    """Consecutive decoded records as batches again, from ``records[0].offset`` (a new
    batch before one would pass ``max_batch_bytes``), timestamps kept: for the records
    kept of a stored batch that is cut (a truncation inside it)."""
    if not records:
        return b""
    prs = [ProducerRecord(r.value, r.key, r.headers, r.timestamp) for r in records]
    return bytes(encode_batch(records[0].offset, prs, 0, 1 << 62,
                              max_batch_bytes=max_batch_bytes).data)


def batch_header(buf: bytes | memoryview, pos: int = 0) -> tuple[int, int, int]:
    """``(base_offset, size, count)`` of the batch at ``pos`` without verifying it."""
    base, size, _cs, _m, _a, n = HEADER.unpack_from(buf, pos)
    return base, size, n


__all__ = [
    "HEADER_SIZE",
    "MAX_BATCH_BYTES",
    "RECORD_OVERHEAD",
    "BatchInfo",
    "EncodedBatch",
    "FrameColumns",
    "Headers",
    "ProducerRecord",
    "Record",
    "batch_header",
    "batch_table",
    "batch_timestamps",
    "decode_columns",
    "decode_records",
    "encode_batch",
    "encode_headers",
    "first_timestamp",
    "rebatch",
    "receive_batches",
    "scan_batches",
    "validate_value",
]
