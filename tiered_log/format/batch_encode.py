"""Encoding record batches: a producer's records (or a cut batch's) as Kafka v2 batches.

The layout is drawn in :mod:`tiered_log.format.batch`. :func:`encode_batch` validates
every record and cuts its input into batches of at most
:data:`~tiered_log.format.batch.MAX_BATCH_BYTES`; bare values (the log's own append
path) are framed with a few C-level passes (``map`` over cached varints, one
``bytes.join``) instead of a Python loop over records, and each batch's CRC is one
``crc32c`` call. :class:`EncodedBatch` is what a log appends (also built by
:func:`~tiered_log.format.batch_decode.receive_batches` from a client's bytes), moved to
the log's next offset by :meth:`EncodedBatch.rebased`; :func:`rebatch` writes decoded
records as batches again (the kept head of a batch a truncation cuts).

Everything here is pure and stateless: safe from any thread (an :class:`EncodedBatch` is
not safe to mutate from two).
"""

from __future__ import annotations

import struct
import threading
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate
from operator import add
from typing import Final, cast

from crc32c import crc32c

from ..errors import InvalidArgumentError, RecordTooLargeError
from .batch import (
    CRC_AT,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    MAX_BATCH_BYTES,
    MAX_BODY_BYTES,
    BatchInfo,
    ProducerRecord,
    Record,
)
from .kafka.compression import compress
from .kafka.layout import (
    ATTRIBUTES_AT,
    BASE_TIMESTAMP_AT,
    COMPRESSION_MASK,
    MAX_TIMESTAMP_AT,
    PARTITION_LEADER_EPOCH_AT,
    TIMESTAMP_TYPE_BIT,
    Compression,
)
from .kafka.records import VARINT, encode_headers

_HEAD = struct.Struct(">qiibI")
"""baseOffset, batchLength, partitionLeaderEpoch, magic, crc: bytes 0-20 (outside the
CRC but the CRC itself)."""
_TAIL = struct.Struct(">hiqqqhii")
"""attributes .. records count: bytes 21-60, the header's part under the CRC."""
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_TIMES = struct.Struct(">qq")
"""baseTimestamp, maxTimestamp (bytes 27-42)."""

NO_TIMESTAMP: Final = -1
"""A batch whose baseTimestamp and maxTimestamp are both this takes the appending log's
clock (:meth:`EncodedBatch.rebased`)."""


def validate_value(value: object, append_threshold: int) -> None:
    """Raise the library's error for a value no log accepts: not bytes or None, or
    longer than ``append_threshold`` bytes. None (null) and ``b""`` are valid values."""
    if value is None:
        return
    if not isinstance(value, bytes | bytearray | memoryview):
        raise InvalidArgumentError(
            f"record value must be bytes or None, not {type(value).__name__}"
        )
    n = len(value)
    if n > append_threshold:
        raise RecordTooLargeError(
            f"record value of {n} bytes exceeds the append threshold of {append_threshold} bytes"
        )


@dataclass(slots=True)
class EncodedBatch:
    """Kafka v2 batches of consecutive records ready to write, plus what the indexes need.

    ``batches`` describe the batches of ``data`` (positions relative to its start).
    Built by :func:`encode_batch`, or by
    :func:`~tiered_log.format.batch_decode.receive_batches` from a client's bytes and
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
        """Bytes of the batches' records sections (records with their framing, as stored:
        compressed if they are): the batches less their headers."""
        return len(self.data) - HEADER_SIZE * len(self.batches)

    def rebased(
        self,
        base_offset: int,
        now_ms: int,
        *,
        leader_epoch: int | None = None,
        log_append_time: bool = False,
    ) -> EncodedBatch:
        """These batches moved to offsets from ``base_offset`` (the batches need not have
        been consecutive), in place: baseOffset written, and partitionLeaderEpoch when
        ``leader_epoch`` is given (neither under the CRC). A batch whose baseTimestamp
        and maxTimestamp are both -1 (:data:`NO_TIMESTAMP`: "the appending log's
        clock", as :func:`encode_batch` writes them for ``now_ms=-1``) gets ``now_ms``
        in both; with ``log_append_time`` (a LogAppendTime topic) every batch gets
        attributes bit 3 and maxTimestamp ``now_ms``. The CRC is recomputed only for a
        batch whose covered bytes changed. The bytes must be verified already (as
        :func:`~tiered_log.format.batch_decode.receive_batches` does). A ``bytearray``
        ``data`` is rewritten in place (no copy of a large body): do not use this batch
        afterwards, only the one returned.
        """
        data = self.data if isinstance(self.data, bytearray) else bytearray(self.data)
        epoch = None if leader_epoch is None else _I32.pack(leader_epoch)
        out: list[BatchInfo] = []
        off = base_offset
        mv = memoryview(data)
        try:
            for b in self.batches:
                p, n = b.position, b.record_count
                data[p : p + 8] = _I64.pack(off)
                if epoch is not None:
                    data[p + PARTITION_LEADER_EPOCH_AT : p + PARTITION_LEADER_EPOCH_AT + 4] = epoch
                first, mx, mx_off = (
                    b.first_timestamp,
                    b.max_timestamp,
                    off + (b.max_timestamp_offset - b.base_offset),
                )
                changed = False
                if first == NO_TIMESTAMP and mx == NO_TIMESTAMP:
                    first = mx = now_ms
                    mx_off = off
                    _TIMES.pack_into(data, p + BASE_TIMESTAMP_AT, now_ms, now_ms)
                    changed = True
                if log_append_time:
                    a = p + ATTRIBUTES_AT
                    data[a + 1] |= TIMESTAMP_TYPE_BIT
                    if mx != now_ms:
                        _I64.pack_into(data, p + MAX_TIMESTAMP_AT, now_ms)
                        mx = now_ms
                    mx_off = off
                    changed = True
                if changed:
                    _U32.pack_into(data, p + CRC_AT, crc32c(mv[p + ATTRIBUTES_AT : p + b.size]))
                out.append(BatchInfo(off, n, p, b.size, first, mx, mx_off))
                off += n
        finally:
            mv.release()
        return EncodedBatch(base_offset, data, out, self.count)


# ---- framing records -------------------------------------------------------------------------

_MIDS: list[bytes] = []
"""``_MIDS[d]``: attributes 0, timestampDelta 0, offsetDelta ``d``, key null: the bytes
between a bare value's record length and its value length."""
_MID_LENS: list[int] = []
_MIDS_CACHED: Final = 1 << 16


_MIDS_LOCK = threading.Lock()
"""Held to extend :data:`_MIDS` (readers only slice it: it only grows)."""


def _mids(m: int) -> tuple[list[bytes], list[int]]:
    """The first ``m`` of :data:`_MIDS` and their lengths (extending the cache)."""
    if len(_MID_LENS) < m:
        with _MIDS_LOCK:
            have = len(_MIDS)
            new = [b"\x00\x00" + VARINT[d] + b"\x01" for d in range(have, min(m, _MIDS_CACHED))]
            _MIDS.extend(new)
            _MID_LENS.extend(map(len, new))  # last: a reader checks its length first
        if m > _MIDS_CACHED:
            extra = [b"\x00\x00" + VARINT[d] + b"\x01" for d in range(_MIDS_CACHED, m)]
            return _MIDS[:_MIDS_CACHED] + extra, _MID_LENS[:_MIDS_CACHED] + list(map(len, extra))
    return _MIDS[:m], _MID_LENS[:m]


class _ValueFraming(dict[int, int]):
    """``cache[n]``: bytes of a value of ``n`` bytes with its varint length, plus the
    header count byte after it (a C-level lookup once seen; small ``n`` only kept)."""

    def __missing__(self, n: int) -> int:
        v = len(VARINT[n]) + n + 1
        if n < 1 << 16:
            self[n] = v
        return v


_VALUE_FRAMING = _ValueFraming()


def _bare_framing(lens: Sequence[int]) -> tuple[list[bytes], list[int], list[bytes]]:
    """For bare values of these lengths at offset deltas 0, 1, ...: each record's
    length varint, its length (after that varint) and the bytes between the two
    (:data:`_MIDS`), with C-level passes only."""
    mids, mid_lens = _mids(len(lens))
    body = list(map(add, mid_lens, map(_VALUE_FRAMING.__getitem__, lens)))
    return list(map(VARINT.__getitem__, body)), body, mids


def _bare_section(
    values: Sequence[bytes], lens: Sequence[int], lv: list[bytes], mids: list[bytes]
) -> list[bytes]:
    """The records section of bare values (timestamp delta 0, null key, no headers),
    framed by :func:`_bare_framing`, as its pieces (joined by the builder)."""
    m = len(values)
    parts: list[bytes] = [b"\x00"] * (5 * m)
    parts[0::5] = lv
    parts[1::5] = mids
    parts[2::5] = list(map(VARINT.__getitem__, lens))
    parts[3::5] = values
    return parts


def _cut(sizes: list[int], limit: int) -> list[int]:
    """Record counts of consecutive batches of records of these sizes, each batch at
    most ``limit`` bytes with its header (or one record)."""
    ends = list(accumulate(sizes))
    counts: list[int] = []
    i, n, used = 0, len(ends), 0
    while i < n:
        j = max(bisect_right(ends, used + limit - HEADER_SIZE, i), i + 1)
        counts.append(j - i)
        used = ends[j - 1]
        i = j
    return counts


class _Builder:
    """Collects finished batches: their bytes and :class:`BatchInfo` (one per batch)."""

    __slots__ = (
        "at",
        "attributes",
        "base_offset",
        "codec",
        "epoch",
        "infos",
        "level",
        "log_append_time",
        "now_ms",
        "parts",
        "pending_crcs",
        "producer_epoch",
        "producer_id",
        "sequence",
    )

    def __init__(
        self,
        base_offset: int,
        now_ms: int,
        codec: Compression,
        level: int | None,
        epoch: int,
        log_append_time: bool,
        producer_id: int,
        producer_epoch: int,
        sequence: int,
    ) -> None:
        self.base_offset = base_offset
        self.now_ms = now_ms
        self.codec = codec
        self.level = level
        self.epoch = epoch
        self.log_append_time = log_append_time
        self.attributes = int(codec) | (TIMESTAMP_TYPE_BIT if log_append_time else 0)
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.sequence = sequence
        self.parts: list[bytes] = []
        self.infos: list[BatchInfo] = []
        self.at = 0
        self.pending_crcs: list[tuple[int, int]] = []
        """``(position, size)`` of the uncompressed batches whose CRC is computed over
        the joined buffer (their sections are never joined on their own)."""

    def add(
        self,
        first: int,
        count: int,
        section: list[bytes],
        base_ts: int,
        max_ts: int,
        max_i: int,
        section_len: int | None = None,
    ) -> None:
        """One batch of ``count`` records from record index ``first`` (of the input),
        its records section uncompressed, as the pieces it is made of (joined once, with
        the other batches, by :meth:`result`, unless the batch is compressed);
        ``section_len``, the section's length when the caller knows it."""
        plain = self.codec == Compression.NONE
        body = b"" if plain else compress(self.codec, b"".join(section), self.level)
        if plain:
            body_len = sum(map(len, section)) if section_len is None else section_len
        else:
            body_len = len(body)
        off = self.base_offset + first
        if self.log_append_time:
            max_ts, max_i = self.now_ms, 0
        seq = self.sequence
        if seq >= 0:
            seq = (seq + first) & 0x7FFFFFFF
        try:
            tail = _TAIL.pack(
                self.attributes,
                count - 1,
                base_ts,
                max_ts,
                self.producer_id,
                self.producer_epoch,
                seq,
                count,
            )
            head = _HEAD.pack(
                off,
                HEADER_SIZE - LOG_OVERHEAD + body_len,
                self.epoch,
                MAGIC,
                0 if plain else crc32c(body, crc32c(tail)),
            )
        except struct.error as exc:
            raise InvalidArgumentError(f"a batch header field is out of range: {exc}") from None
        size = HEADER_SIZE + body_len
        self.parts += (head, tail)
        if plain:
            self.parts += section
            self.pending_crcs.append((self.at, size))
        else:
            self.parts.append(body)
        self.infos.append(BatchInfo(off, count, self.at, size, base_ts, max_ts, off + max_i))
        self.at += size

    def result(self, count: int) -> EncodedBatch:
        """The batches: every piece joined once, then the CRCs of the uncompressed
        batches computed over the joined bytes and written in place."""
        if not self.pending_crcs:
            return EncodedBatch(self.base_offset, b"".join(self.parts), self.infos, count)
        data = bytearray().join(self.parts)
        mv = memoryview(data)
        for pos, size in self.pending_crcs:
            _U32.pack_into(data, pos + CRC_AT, crc32c(mv[pos + ATTRIBUTES_AT : pos + size]))
        mv.release()
        return EncodedBatch(self.base_offset, data, self.infos, count)


def encode_batch(
    base_offset: int,
    records: Sequence[ProducerRecord | bytes],
    now_ms: int,
    append_threshold: int,
    *,
    max_batch_bytes: int = MAX_BATCH_BYTES,
    compression: Compression | str | int | None = Compression.NONE,
    compression_level: int | None = None,
    leader_epoch: int = -1,
    log_append_time: bool = False,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> EncodedBatch:
    """Encode ``records`` as Kafka v2 batches with offsets ``base_offset``, +1, ...

    A bare ``bytes`` item is a value with no key, no headers and timestamp ``now_ms``, as
    is a record whose ``timestamp`` is None. ``now_ms`` is not validated: a client may
    pass ``-1`` ("the appending log's clock"): a batch of records without timestamps is
    then written with baseTimestamp = maxTimestamp = -1 and deltas 0, which
    :meth:`EncodedBatch.rebased` fills in (records with and without a timestamp are put
    in separate batches for that). A new batch starts before one would pass
    ``max_batch_bytes`` (uncompressed). Each batch is compressed with ``compression``
    (a :class:`~tiered_log.format.kafka.Compression`, its name or number, None for none)
    in Kafka's framing; ``log_append_time`` marks every batch LogAppendTime with
    maxTimestamp ``now_ms``; partitionLeaderEpoch is ``leader_epoch``; producer id,
    epoch and base sequence (counted on from batch to batch) are as given, -1 by
    default, as a producer that is not idempotent writes them.
    Validates every record first; raises before producing anything on bad input
    (InvalidArgumentError, RecordTooLargeError for a value over ``append_threshold``).
    """
    try:
        codec = Compression.parse(compression)
    except ValueError as exc:
        raise InvalidArgumentError(str(exc)) from None
    n = len(records)
    out = _Builder(
        base_offset,
        now_ms,
        codec,
        compression_level,
        leader_epoch,
        log_append_time,
        producer_id,
        producer_epoch,
        base_sequence,
    )
    if n and set(map(type, records)) == {bytes}:
        values = cast("Sequence[bytes]", records)
        lens = list(map(len, values))
        if max(lens) > min(append_threshold, MAX_BODY_BYTES):
            for v in values:
                validate_value(v, min(append_threshold, MAX_BODY_BYTES))
        lv, body, mids = _bare_framing(lens)
        section_len = sum(map(len, lv)) + sum(body)
        if HEADER_SIZE + section_len <= max_batch_bytes or n == 1:
            section = _bare_section(values, lens, lv, mids)
            out.add(0, n, section, now_ms, now_ms, 0, section_len)
        else:  # sizes with deltas from 0 bound those of later batches: cut, then frame
            i = 0
            for cnt in _cut(list(map(add, map(len, lv), body)), max_batch_bytes):
                part = values[i : i + cnt]
                plens = lens[i : i + cnt]
                plv, _, pmids = _bare_framing(plens)
                out.add(i, cnt, _bare_section(part, plens, plv, pmids), now_ms, now_ms, 0)
                i += cnt
        return out.result(n)
    if not n:
        return out.result(0)
    _encode_records(out, records, now_ms, min(append_threshold, MAX_BODY_BYTES), max_batch_bytes)
    return out.result(n)


def _encode_records(
    out: _Builder,
    records: Sequence[ProducerRecord | bytes],
    now_ms: int,
    threshold: int,
    limit: int,
) -> None:
    """Validate and frame ``records`` one by one, cutting batches as they fill."""
    tails: list[bytes] = []
    stamps: list[int] = []
    clock = now_ms < 0
    free: list[bool] = []  # per record: takes the log's clock (no timestamp, now_ms < 0)
    for rec in records:
        if type(rec) is bytes:
            if len(rec) > threshold:
                validate_value(rec, threshold)
            tails.append(b"\x01" + VARINT[len(rec)] + rec + b"\x00")
            stamps.append(now_ms)
            free.append(clock)
            continue
        if not isinstance(rec, ProducerRecord):
            raise InvalidArgumentError(
                f"records must be ProducerRecord or bytes, not {type(rec).__name__}"
            )
        value = rec.value
        if type(value) is not bytes or len(value) > threshold:
            validate_value(value, threshold)
        key = rec.key
        if key is not None and not isinstance(key, bytes | bytearray | memoryview):
            raise InvalidArgumentError(
                f"record key must be bytes or None, not {type(key).__name__}"
            )
        ts = rec.timestamp
        if ts is None:
            ts = now_ms
            free.append(clock)
        elif not isinstance(ts, int) or isinstance(ts, bool) or ts < 0 or ts >= 1 << 62:
            raise InvalidArgumentError(
                f"record timestamp must be a non-negative int (ms), got {ts!r}"
            )
        else:
            free.append(False)
        kb = b"\x01" if key is None else VARINT[len(key)] + bytes(key)
        vb = b"\x01" if value is None else VARINT[len(value)] + bytes(value)
        hb = encode_headers(rec.headers) if rec.headers else b"\x00"
        tail = kb + vb + hb
        if len(tail) > MAX_BODY_BYTES:
            raise InvalidArgumentError("a record's key, value and headers exceed 2 GiB")
        tails.append(tail)
        stamps.append(ts)
    parts: list[bytes] = []
    first = 0
    base_ts = stamps[0]
    max_ts, max_i = base_ts, 0
    used = HEADER_SIZE
    extend = parts.extend
    for i, tail in enumerate(tails):
        ts = stamps[i]
        d = i - first
        vt = VARINT[ts - base_ts]
        vd = VARINT[d]
        body = 1 + len(vt) + len(vd) + len(tail)
        vb = VARINT[body]
        if d and (used + len(vb) + body > limit or free[i] != free[first]):
            out.add(first, d, parts, base_ts, max_ts, max_i)
            parts = []
            extend = parts.extend
            first, d, base_ts, used = i, 0, ts, HEADER_SIZE
            max_ts, max_i = ts, 0
            vt = vd = b"\x00"
            body = 3 + len(tail)
            vb = VARINT[body]
        if ts > max_ts:
            max_ts, max_i = ts, d
        extend((vb, b"\x00", vt, vd, tail))
        used += len(vb) + body
    out.add(first, len(tails) - first, parts, base_ts, max_ts, max_i)


def rebatch(
    records: Sequence[Record],
    max_batch_bytes: int = MAX_BATCH_BYTES,
    *,
    like: bytes | bytearray | memoryview | None = None,
) -> bytes:
    """Consecutive decoded records as batches again, from ``records[0].offset`` (a new
    batch before one would pass ``max_batch_bytes``), timestamps kept: for the records
    kept of a stored batch that is cut (a truncation inside it). ``like``: the header
    (at least its 61 bytes) of the batch they came from, whose codec, timestamp type
    (maxTimestamp kept under LogAppendTime), partitionLeaderEpoch and producer id,
    epoch and base sequence the new batches keep."""
    if not records:
        return b""
    prs = [ProducerRecord(r.value, r.key, r.headers, r.timestamp) for r in records]
    if like is None:
        eb = encode_batch(records[0].offset, prs, 0, 1 << 62, max_batch_bytes=max_batch_bytes)
        return bytes(eb.data)
    f = HEADER.unpack_from(like, 0)
    lat = bool(f[5] & TIMESTAMP_TYPE_BIT)
    eb = encode_batch(
        records[0].offset,
        prs,
        f[8] if lat else 0,
        1 << 62,
        max_batch_bytes=max_batch_bytes,
        compression=f[5] & COMPRESSION_MASK,
        leader_epoch=f[2],
        log_append_time=lat,
        producer_id=f[9],
        producer_epoch=f[10],
        base_sequence=f[11],
    )
    return bytes(eb.data)


__all__ = ["NO_TIMESTAMP", "EncodedBatch", "encode_batch", "rebatch", "validate_value"]
