"""The batch format tiered_log stored before Kafka's record batch v2: read it, to migrate.

Segment files written by earlier versions hold "TB" batches, which nothing in tiered_log
reads any more; opening a log that holds them is refused
(:func:`~tiered_log.format.batch.is_legacy_batch` tells them apart from Kafka batches by
bytes 20-21) and ``tiered-log migrate DIR`` (:mod:`tiered_log.cli.migrate`) rewrites them
as Kafka batches through :func:`legacy_batches`. Read-only by intent: :func:`encode_legacy_batch`
exists only so that tests can build an old directory.

All integers little-endian. One batch of ``n`` records::

    0   u64  base_offset      offset of its first record (record i has base_offset + i)
    8   u32  size             bytes of the whole batch, this header included
   12   u64  checksum         xxh3_64(batch[20:size], seed=base_offset)
   20   u16  magic            0x5442 (the bytes b"BT" at 20-21)
   22   u16  attributes       0
   24   u32  count            n >= 1
   28   i64[n]  timestamps    milliseconds since the epoch
        i32[n]  key lengths   -1 = no key
        u32[n]  value lengths
        u32[n]  header bytes  length of each record's header block (0 = no headers)
        then the keys, then the values, then the header blocks, each concatenated in
        record order; a header block is, per header: u16 name_length, name (UTF-8),
        i32 value_length (-1 = null), value.

Pure functions: safe from any thread.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from itertools import accumulate
from typing import NamedTuple

import xxhash

from ..errors import CorruptRecordError

HEADER = struct.Struct("<QIQHHI")
"""base_offset u64, size u32, checksum u64, magic u16, attributes u16, count u32."""
HEADER_SIZE = HEADER.size  # 28
CHECKED_FROM = 20
"""The checksum covers a batch from this byte on."""
MAGIC = 0x5442
RECORD_OVERHEAD = 20
"""Column bytes per record: timestamp 8, key length 4, value length 4, header bytes 4."""
NAME = "tiered_log's former 'TB' record batch format"
"""How errors and tools name the format."""

_HNAME = struct.Struct("<H")
_HVAL = struct.Struct("<i")

LegacyHeaders = tuple[tuple[str, bytes | None], ...]


class LegacyRecord(NamedTuple):
    """One record of an old batch: offset, timestamp (ms), key, value, headers."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes
    headers: LegacyHeaders = ()


class LegacyBatch(NamedTuple):
    """One verified old batch: where it lies in the buffer and its records."""

    base_offset: int
    position: int
    size: int
    records: list[LegacyRecord]

    @property
    def next_offset(self) -> int:
        return self.base_offset + len(self.records)


def _headers(buf: bytes, pos: int, end: int) -> LegacyHeaders:
    out: list[tuple[str, bytes | None]] = []
    try:
        while pos < end:
            (nlen,) = _HNAME.unpack_from(buf, pos)
            pos += 2
            name = buf[pos : pos + nlen].decode("utf-8")
            pos += nlen
            (vlen,) = _HVAL.unpack_from(buf, pos)
            pos += 4
            if vlen < -1 or pos + max(vlen, 0) > end:
                raise CorruptRecordError("a header value overruns its record")
            if vlen < 0:
                out.append((name, None))
            else:
                out.append((name, buf[pos : pos + vlen]))
                pos += vlen
    except (struct.error, UnicodeDecodeError) as exc:
        raise CorruptRecordError(f"malformed record headers: {exc}") from exc
    if pos != end:
        raise CorruptRecordError("record headers overrun their record")
    return tuple(out)


def _parse(buf: bytes, pos: int) -> LegacyBatch | None:
    """The verified batch at ``pos``; None when the buffer ends inside it. Raises
    CorruptRecordError when it is damaged."""
    if pos + HEADER_SIZE > len(buf):
        return None
    base, size, cs, magic, _attrs, n = HEADER.unpack_from(buf, pos)
    if size < HEADER_SIZE + RECORD_OVERHEAD:
        raise CorruptRecordError(f"batch at byte {pos} has an impossible size {size}")
    end = pos + size
    if end > len(buf):
        return None
    if xxhash.xxh3_64_intdigest(memoryview(buf)[pos + CHECKED_FROM : end], base) != cs:
        raise CorruptRecordError(f"checksum mismatch for the batch at offset {base}")
    if magic != MAGIC or n < 1 or HEADER_SIZE + RECORD_OVERHEAD * n > size:
        raise CorruptRecordError(f"batch at offset {base} has a bad header")
    p = pos + HEADER_SIZE
    ts = struct.unpack_from(f"<{n}q", buf, p)
    kl = struct.unpack_from(f"<{n}i", buf, p + 8 * n)
    vl = struct.unpack_from(f"<{n}I", buf, p + 12 * n)
    hl = struct.unpack_from(f"<{n}I", buf, p + 16 * n)
    p += RECORD_OVERHEAD * n
    if min(kl) < -1:
        raise CorruptRecordError(f"batch at offset {base} has a bad key length")
    kpos = list(accumulate((max(k, 0) for k in kl), initial=p))
    vpos = list(accumulate(vl, initial=kpos[-1]))
    hpos = list(accumulate(hl, initial=vpos[-1]))
    if hpos[-1] != end:
        raise CorruptRecordError(f"batch at offset {base}: its lengths do not add up")
    records = [
        LegacyRecord(
            base + i,
            ts[i],
            buf[kpos[i] : kpos[i + 1]] if kl[i] >= 0 else None,
            buf[vpos[i] : vpos[i + 1]],
            _headers(buf, hpos[i], hpos[i + 1]) if hl[i] else (),
        )
        for i in range(n)
    ]
    return LegacyBatch(base, pos, size, records)


def legacy_batches(buf: bytes, expect_offset: int) -> Iterator[LegacyBatch]:
    """The verified old batches of ``buf`` from byte 0 holding offsets ``expect_offset``,
    +1, ... in sequence, records decoded. Stops (without raising) at the first batch that
    is incomplete, damaged or breaks the sequence, as the old recovery did: its
    position is the last batch's ``position + size`` (a torn tail is not migrated)."""
    pos, expect = 0, expect_offset
    while True:
        try:
            b = _parse(buf, pos)
        except CorruptRecordError:
            return
        if b is None or b.base_offset != expect:
            return
        yield b
        pos += b.size
        expect = b.next_offset


def _encode_headers(headers: LegacyHeaders) -> bytes:
    parts: list[bytes] = []
    for name, value in headers:
        nb = name.encode("utf-8")
        parts += [_HNAME.pack(len(nb)), nb]
        parts += [_HVAL.pack(-1)] if value is None else [_HVAL.pack(len(value)), value]
    return b"".join(parts)


def encode_legacy_batch(base_offset: int, records: Sequence[LegacyRecord]) -> bytes:
    """One old batch of ``records`` at ``base_offset``, +1, ... (their own offsets are
    ignored): for tests that build a directory as the old code wrote it."""
    n = len(records)
    if n < 1:
        raise ValueError("a batch holds at least one record")
    hdrs = [_encode_headers(r.headers) for r in records]
    cols = b"".join(
        (
            struct.pack(f"<{n}q", *(r.timestamp for r in records)),
            struct.pack(f"<{n}i", *(-1 if r.key is None else len(r.key) for r in records)),
            struct.pack(f"<{n}I", *(len(r.value) for r in records)),
            struct.pack(f"<{n}I", *map(len, hdrs)),
        )
    )
    body = (
        struct.pack("<HHI", MAGIC, 0, n)
        + cols
        + b"".join(r.key for r in records if r.key is not None)
        + b"".join(r.value for r in records)
        + b"".join(hdrs)
    )
    size = CHECKED_FROM + len(body)
    checksum = xxhash.xxh3_64_intdigest(body, base_offset)
    return struct.pack("<QIQ", base_offset, size, checksum) + body


__all__ = [
    "CHECKED_FROM",
    "HEADER",
    "HEADER_SIZE",
    "MAGIC",
    "NAME",
    "LegacyBatch",
    "LegacyRecord",
    "encode_legacy_batch",
    "legacy_batches",
]
