"""A fetched chunk's record batches as Arrow-ready columns, decoded with numpy.

:func:`chunk_columns` verifies every batch of a buffer (framing and CRC-32C, through the
same checked walk as :func:`~tiered_log.format.records.decode_columns`; a compressed
batch is decompressed) and returns its records as columns: offsets and timestamps as
int64 numpy arrays, keys and values as Arrow binary arrays. No Python object is made
per record except the one integer of the walk over the record lengths:

- the *fast path* walks each batch's records by their length prefixes (one Python loop
  iteration a record, ~0.2 us), then reads
  every field of every record of the buffer at once with vectorised varint reads, and
  checks that each record's fields fill it exactly. Keys and values become Arrow
  ``binary_view`` arrays pointing into the decoded bytes, cast (one C copy of each
  value) to the plain ``binary`` arrays Spark takes;
- the *general path* is :func:`~tiered_log.format.records.decode_columns` itself, its
  lists turned into arrays. It is used for the whole buffer whenever the fast path
  meets anything it does not take: a record with headers, an attributes byte with its
  top bit set, a varint longer than an int32's (a timestamp delta's: 9 bytes), a
  negative length other than -1 (null), or records that do not fill their batch
  exactly. Damage is therefore reported by the general path, with the same error as
  before; the fast path returns nothing it has not checked, and what it returns is what
  the general path returns for the same bytes (tests/spark/test_columns.py).

Pure functions; safe from any thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate, repeat
from operator import is_
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from ..errors import CorruptRecordError
from ..format.batch import Headers
from ..format.batch_decode import _follows, _Incomplete, _parse, _section, decode_columns
from ..format.kafka.records import read_varint

_TIMESTAMP_TYPE_BIT = 0x08
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_INLINE = 12
"""A ``binary_view`` element of at most this many bytes is stored inside its view."""
_PREFIX = np.arange(4, dtype=np.int64)
_INLINE_AT = np.arange(_INLINE, dtype=np.int64)

Array = np.ndarray[Any, Any]


class ChunkColumns(NamedTuple):
    """The verified records of a buffer as columns (what :func:`chunk_columns` returns).

    ``keys`` and ``values`` are Arrow binary arrays (null for a null key or value);
    ``headers`` is None when no record has a header, else every record's headers.
    ``end`` is the position after the last complete batch.
    """

    offsets: Array
    timestamps: Array
    keys: pa.Array
    values: pa.Array
    headers: list[Headers] | None
    end: int

    @property
    def rows(self) -> int:
        """How many records."""
        return len(self.offsets)


def chunk_columns(buf: bytes | bytearray | memoryview, *, fast: bool = True) -> ChunkColumns:
    """Every record of the complete batches of ``buf`` as columns (see the module doc).

    Stops at the first incomplete batch (see ``end``); raises CorruptRecordError on a
    damaged one (LegacyFormatError for the format before Kafka v2), as
    :func:`~tiered_log.format.records.decode_columns` does. ``fast=False`` takes the
    general path (for tests comparing the two).
    """
    data = buf if isinstance(buf, bytes) else bytes(buf)
    if fast:
        got = _fast(data)
        if got is not None:
            return got
    return general_columns(data)


def general_columns(data: bytes) -> ChunkColumns:
    """:func:`~tiered_log.format.records.decode_columns` of ``data`` as arrays."""
    cols = decode_columns(data)
    headers = cols.headers if any(cols.headers) else None
    return ChunkColumns(
        np.array(cols.offsets, np.int64),
        np.array(cols.timestamps, np.int64),
        binary_array(cols.keys),
        binary_array(cols.values),
        headers,
        cols.end,
    )


def binary_array(values: Sequence[bytes | memoryview | None]) -> pa.Array:
    """A binary Arrow array of ``values`` (None: null): one join into the data buffer
    and the offsets summed in C, instead of converting item by item; a validity bitmap
    only when some value is null."""
    n = len(values)
    nulls = sum(map(is_, values, repeat(None)))  # C-level; list.count compares views slowly
    if nulls == n:
        return pa.nulls(n, pa.binary())
    present = values if not nulls else [b"" if v is None else v for v in values]
    ends = np.fromiter(accumulate(map(len, present), initial=0), np.int64, n + 1)  # type: ignore[arg-type]
    if ends[-1] >= 1 << 31:  # past int32 offsets: let Arrow convert (and complain) itself
        return pa.array([None if v is None else bytes(v) for v in values], pa.binary())
    validity = (
        None if not nulls else pa.array([v is not None for v in values], pa.bool_()).buffers()[1]
    )
    return pa.Array.from_buffers(
        pa.binary(),
        n,
        [validity, pa.py_buffer(ends.astype(np.int32)), pa.py_buffer(b"".join(present))],  # type: ignore[arg-type]
        null_count=nulls,
    )


def _varints(a: Array, at: Array, most: int) -> tuple[Array, Array] | None:
    """The zigzag varints at positions ``at`` of the bytes ``a``: ``(values, sizes)``
    as int64, or None when one runs longer than ``most`` bytes."""
    top = len(a) - 1
    b = a[np.minimum(at, top)]
    v = (b & 0x7F).astype(np.int64)
    size = np.ones(len(at), np.int64)
    more = b >= 0x80
    k = 1
    while more.any():
        if k >= most:
            return None
        idx = np.flatnonzero(more)
        bk = a[np.minimum(at[idx] + k, top)]
        v[idx] |= (bk & 0x7F).astype(np.int64) << (7 * k)
        size[idx] += 1
        more[idx] = bk >= 0x80
        k += 1
    return (v >> 1) ^ -(v & 1), size


def _record_starts(data: bytes, pos: int, end: int, count: int, out: list[int]) -> bool:
    """Append the starts of the ``count`` records of ``data[pos:end]`` to ``out``, by
    their length prefixes alone (one loop iteration a record; the fields are checked
    afterwards, all at once). False when they do not fill ``data[pos:end]`` exactly."""
    add = out.append
    first = len(out)
    try:
        while pos < end:
            add(pos)
            b = data[pos]
            if b < 0x80:
                pos += 1 + (b >> 1)  # a negative length moves on too; the check refuses it
            elif data[pos + 1] < 0x80:
                pos += 2 + ((b & 0x7F | data[pos + 1] << 7) >> 1)
            else:
                length, after = read_varint(data, pos)
                pos = after + max(length, 0)
    except (IndexError, CorruptRecordError):
        return False
    return pos == end and len(out) - first == count


def _int32s(v: Array) -> bool:
    return bool(v.size == 0 or (v.min() >= _INT32_MIN and v.max() <= _INT32_MAX))


def _fast(data: bytes) -> ChunkColumns | None:
    """The fast path of :func:`chunk_columns`: None when it does not take ``data``."""
    # The batches, verified; each batch's records as (bytes, first record, end).
    sections: list[tuple[bytes, int, int]] = []
    counts: list[int] = []
    bases: list[int] = []
    base_ts: list[int] = []
    lat: list[int] = []  # LogAppendTime: every record's timestamp; else -1 << 63
    end = len(data)
    pos = 0
    nxt: int | None = None
    while True:
        try:
            b = _parse(data, pos, end)
            nxt = _follows(b.base, b.n, nxt, pos)
            section, spos, send = _section(data, b)
        except _Incomplete:
            break
        except CorruptRecordError:
            return None  # the general path raises what it raises for it (also out of sequence)
        sections.append((bytes(section), spos, send))
        counts.append(b.n)
        bases.append(b.base)
        base_ts.append(b.base_timestamp)
        lat.append(b.max_timestamp if b.attributes & _TIMESTAMP_TYPE_BIT else -(1 << 63))
        pos = b.end
    if not sections:
        return None
    # One buffer for every record: the data itself when no batch is compressed, else
    # the batches' records sections end to end.
    compressed = any(s[0] is not data for s in sections)
    if compressed:
        whole = b"".join(s[0][s[1] : s[2]] for s in sections)
        shift = list(accumulate((s[2] - s[1] for s in sections), initial=0))
        spans = [(whole, shift[i], shift[i + 1]) for i in range(len(sections))]
    else:
        whole = data
        spans = sections
    if len(whole) >= 1 << 31:
        return None
    starts_l: list[int] = []
    for (sec, spos, send), n in zip(spans, counts, strict=True):
        if not _record_starts(sec, spos, send, n, starts_l):
            return None
    a = np.frombuffer(whole, np.uint8)
    starts = np.array(starts_l, np.int64)
    count = np.array(counts, np.int64)
    got = _varints(a, starts, 5)
    if got is None:
        return None
    length, ls = got
    rend = starts + ls + length
    p = starts + ls
    if (a[np.minimum(p, len(a) - 1)] >= 0x80).any():  # attributes: see the module doc
        return None
    p += 1
    ts = _varints(a, p, 9)
    if ts is None:
        return None
    ts_delta, n1 = ts
    p += n1
    od = _varints(a, p, 5)
    if od is None or not _int32s(od[0]):
        return None
    p += od[1]
    keys = _field(a, p)
    if keys is None:
        return None
    key_at, key_len, p = keys
    vals = _field(a, p)
    if vals is None:
        return None
    val_at, val_len, p = vals
    hc = _varints(a, p, 5)
    if hc is None or hc[0].any():
        return None
    p += hc[1]
    if not np.array_equal(p, rend):
        return None
    big = 1 << 62
    if any(abs(x) >= big for x in (*bases, *base_ts)) or np.abs(ts_delta).max() >= big:
        return None  # int64 sums could wrap: the general path computes them
    offsets = np.repeat(np.array(bases, np.int64), count) + od[0]
    lat_a = np.repeat(np.array(lat, np.int64), count)
    timestamps = np.where(
        lat_a != -(1 << 63), lat_a, np.repeat(np.array(base_ts, np.int64), count) + ts_delta
    )
    buf = pa.py_buffer(whole)
    return ChunkColumns(
        offsets,
        timestamps,
        _views_to_binary(a, buf, key_at, key_len),
        _views_to_binary(a, buf, val_at, val_len),
        None,
        pos,
    )


def _field(a: Array, at: Array) -> tuple[Array, Array, Array] | None:
    """A key or value at ``at`` (its varint length first): ``(start, length (-1:
    null), position after it)``, or None for a length below -1 or past int32."""
    got = _varints(a, at, 5)
    if got is None:
        return None
    length, size = got
    if length.size and (length.min() < -1 or length.max() > _INT32_MAX):
        return None
    start = at + size
    return start, length, start + np.maximum(length, 0)


def _views_to_binary(a: Array, buf: pa.Buffer, start: Array, length: Array) -> pa.Array:
    """A binary Arrow array of ``buf[start:start+length]`` (length -1: null), made as
    a ``binary_view`` array over ``buf`` and cast (one copy of each value, in C)."""
    n = len(start)
    null = length < 0
    nulls = int(null.sum())
    if nulls == n:
        return pa.nulls(n, pa.binary())
    ln = np.where(null, 0, length).astype(np.int32)
    views = np.zeros((n, 4), np.int32)
    views[:, 0] = ln
    raw = views.view(np.uint8)  # (n, 16): length, then 12 inline bytes or prefix, index, offset
    top = len(a) - 1
    long = np.flatnonzero(ln > _INLINE)
    if long.size:
        s = start[long]
        raw[long, 4:8] = a[np.minimum(s[:, None] + _PREFIX, top)]
        views[long, 3] = s  # buffer index 0 (views[:, 2]) is already 0
    short = np.flatnonzero((ln > 0) & (ln <= _INLINE))
    if short.size:
        g = a[np.minimum(start[short][:, None] + _INLINE_AT, top)]
        g[_INLINE_AT[None, :] >= ln[short][:, None]] = 0
        raw[short, 4:16] = g
    validity = None if not nulls else pa.py_buffer(np.packbits(~null, bitorder="little"))
    view_arr = pa.Array.from_buffers(
        pa.binary_view(), n, [validity, pa.py_buffer(views), buf], null_count=nulls
    )
    return view_arr.cast(pa.binary(), safe=False)


def empty_headers(n: int) -> list[Headers]:
    """``n`` records' headers when none has any."""
    return [()] * n


__all__ = ["ChunkColumns", "binary_array", "chunk_columns", "empty_headers", "general_columns"]
