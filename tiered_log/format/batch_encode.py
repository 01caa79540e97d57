"""Encoding record batches: a producer's records (or a cut batch's) as verified-ready bytes.

The layout is drawn in :mod:`tiered_log.format.batch`. :func:`encode_batch` validates
every record first and builds the columns with a few C-level calls (bare values need no
Python loop over records), cutting the input into batches of at most
:data:`~tiered_log.format.batch.MAX_BATCH_BYTES`; :class:`EncodedBatch` is what a log
appends (also built by :func:`~tiered_log.format.batch_decode.receive_batches` from a
client's bytes), and :func:`rebatch` writes decoded records as batches again (the kept
head of a batch a truncation cuts).

Everything here is pure and stateless: safe from any thread (an :class:`EncodedBatch` is
not safe to mutate from two).
"""

from __future__ import annotations

import struct
from array import array
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import cast

from xxhash import xxh3_64

from ..errors import InvalidArgumentError, RecordTooLargeError
from .batch import (
    CHECKED_FROM,
    CHECKSUM_AT,
    HEADER_SIZE,
    MAGIC,
    MAX_BATCH_BYTES,
    MAX_BODY_BYTES,
    RECORD_OVERHEAD,
    U64,
    BatchInfo,
    ProducerRecord,
    Record,
    batch_info,
    encode_headers,
    h64,
    le_bytes,
    read_column,
)

_PREFIX = struct.Struct("<QIQ")
"""The unchecked head of a batch's header: base offset, size, checksum (bytes 0-19)."""
_CHECKED_HEAD = struct.Struct("<HHI")
"""The rest of the header, under the checksum: magic, attributes, count (bytes 20-27)."""


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


@dataclass(slots=True)
class EncodedBatch:
    """Batches of consecutive records ready to write, plus what the indexes need.

    ``batches`` describe the batches of ``data`` (positions relative to its start).
    Built by :func:`encode_batch`, or by :func:`~tiered_log.format.batch_decode.receive_batches` from a client's bytes and
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
        in place (the bytes must be verified already, as :func:`~tiered_log.format.batch_decode.receive_batches` does).
        A ``bytearray`` ``data`` is rewritten in place (no copy of a large body): do not
        use this batch afterwards, only the one returned.
        """
        data = self.data if isinstance(self.data, bytearray) else bytearray(self.data)
        mv = memoryview(data)
        out: list[BatchInfo] = []
        off = base_offset
        for b in self.batches:
            p, n = b.position, b.record_count
            U64.pack_into(data, p, off)
            ts = read_column(mv, p + HEADER_SIZE, "q", n)
            if min(ts) < 0:
                if max(ts) < 0:  # every record takes the log's clock (what the clients send)
                    ts = array("q", [now_ms]) * n
                else:
                    ts = array("q", [now_ms if t < 0 else t for t in ts])
                mv[p + HEADER_SIZE : p + HEADER_SIZE + 8 * n] = le_bytes(ts)
            U64.pack_into(data, p + CHECKSUM_AT, h64(mv[p + CHECKED_FROM : p + b.size], off))
            out.append(batch_info(off, p, b.size, ts))
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


def _assemble(
    parts: list[bytes | bytearray | memoryview],
    off: int,
    timestamps: array[int],
    klens: array[int],
    vlens: array[int],
    hlens: array[int],
    payload: Sequence[bytes | memoryview],
    at: int,
) -> BatchInfo:
    """Append one whole batch's pieces to ``parts``, its header and checksum included:
    the checksum is computed over the pieces as they are (a streaming xxh3, the same
    value as over the joined bytes), so the batches are joined once, into ``bytes``,
    and never patched. Returns the batch's info with ``position`` = ``at``."""
    body = [
        _CHECKED_HEAD.pack(MAGIC, 0, len(timestamps)),
        le_bytes(timestamps),
        le_bytes(klens),
        le_bytes(vlens),
        le_bytes(hlens),
        *payload,
    ]
    size = CHECKED_FROM + sum(map(len, body))
    h = xxh3_64(seed=off)
    for piece in body:
        h.update(piece)
    parts.append(_PREFIX.pack(off, size, h.intdigest()))
    parts.extend(body)
    return batch_info(off, at, size, timestamps)


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
            return _encode_columns(
                base_offset,
                array("q", [now_ms]) * n,
                array("i", [-1]) * n,
                array("I", lens),
                array("I", bytes(4 * n)),
                None,
                values,
                None,
                max_batch_bytes,
            )
    ts_col, keys, values, hdrs = _producer_columns(records, now_ms, append_threshold)
    return _encode_columns(
        base_offset,
        ts_col,
        array("i", [-1 if k is None else len(k) for k in keys]),
        array("I", map(len, values)),
        array("I", map(len, hdrs)),
        keys,
        values,
        hdrs,
        max_batch_bytes,
    )


def _producer_columns(
    records: Sequence[ProducerRecord | bytes],
    now_ms: int,
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
            raise InvalidArgumentError(
                f"record timestamp must be a non-negative int (ms), got {ts!r}"
            )
        h = encode_headers(rec.headers) if rec.headers else b""
        if (len(key) if key else 0) + len(rec.value) + len(h) > MAX_BODY_BYTES:
            raise InvalidArgumentError("a record's key, value and headers exceed 4 GiB")
        ts_col.append(ts)
        keys.append(key)
        values.append(bytes(rec.value))
        hdrs.append(h)
    return ts_col, keys, values, hdrs


def _encode_columns(
    base_offset: int,
    ts_col: array[int],
    kl: array[int],
    vl: array[int],
    hl: array[int],
    keys: Sequence[bytes | None] | None,
    values: Sequence[bytes],
    hdrs: Sequence[bytes] | None,
    max_batch_bytes: int,
) -> EncodedBatch:
    """Batches of validated columns; ``keys``/``hdrs`` None when no record has any."""
    if keys is None and hdrs is None:
        sizes: Iterable[int] = (RECORD_OVERHEAD + v for v in vl)
    else:
        sizes = (
            RECORD_OVERHEAD + (k if k > 0 else 0) + v + h
            for k, v, h in zip(kl, vl, hl, strict=True)
        )
    parts: list[bytes | bytearray | memoryview] = []
    infos: list[BatchInfo] = []
    at, i = 0, 0
    for cnt in _batch_counts(sizes, max_batch_bytes):
        j = i + cnt
        payload: Sequence[bytes | memoryview] = values[i:j]
        if keys is not None and hdrs is not None:
            payload = [k for k in keys[i:j] if k is not None] + list(values[i:j]) + list(hdrs[i:j])
        info = _assemble(
            parts, base_offset + i, ts_col[i:j], kl[i:j], vl[i:j], hl[i:j], payload, at
        )
        infos.append(info)
        at += info.size
        i = j
    return EncodedBatch(base_offset, b"".join(parts), infos, len(values))


def rebatch(records: Sequence[Record], max_batch_bytes: int = MAX_BATCH_BYTES) -> bytes:
    """Consecutive decoded records as batches again, from ``records[0].offset`` (a new
    batch before one would pass ``max_batch_bytes``), timestamps kept: for the records
    kept of a stored batch that is cut (a truncation inside it)."""
    if not records:
        return b""
    prs = [ProducerRecord(r.value, r.key, r.headers, r.timestamp) for r in records]
    return bytes(
        encode_batch(records[0].offset, prs, 0, 1 << 62, max_batch_bytes=max_batch_bytes).data
    )
