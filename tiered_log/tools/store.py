"""Store files read as they are on disk: the Kafka record batches of a ``.log`` file, checked.

A store file is Kafka record batches v2 back to back (the layout is drawn in
:mod:`tiered_log.format.kafka`: a 61-byte big-endian header, baseOffset, batchLength,
partitionLeaderEpoch, magic 2, CRC-32C, attributes, lastOffsetDelta, base and max
timestamps, producer id/epoch, baseSequence, records count, then the records, compressed
as one block when the codec is not none). :func:`iter_store` walks a store file's bytes,
yielding a :class:`BatchEntry` per batch (every header field as stored) and, where the
bytes stop parsing as batches, one final :class:`StoreDamage`. :func:`scan_store` walks a
store file and summarizes it as a :class:`StoreScan`: checks, the offset sequence, and
the per-batch columns the index checks (:mod:`.index_check`) compare index entries
against.

A batch *verifies* as the log's reads verify it: framing (magic 2, a batchLength that
fits, a known codec, records count equal to lastOffsetDelta + 1, at least one record)
and the CRC-32C over attributes to its end. Its records are decoded (decompressed first)
only when they are asked for (``with_data``); a batch whose records then do not parse
does not verify either. A segment of tiered_log's former batch format
(:mod:`~tiered_log.format.legacy`) is one damage at byte 0 naming that format.

Read-only (``Path.read_bytes``); pure functions over files, safe from any thread.
"""

from __future__ import annotations

import struct
from array import array
from bisect import bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import CorruptRecordError, RemoteCorruptionError
from ..format.kafka import BatchHeader, KafkaBatch, verify_batches
from ..format.kafka.layout import (
    COMPRESSION_MASK,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    MAGIC_AT,
    MIN_BATCH_LENGTH,
    TIMESTAMP_TYPE_BIT,
    Compression,
)
from ..format.kafka.records import Record
from ..format.records import is_legacy_batch
from ..remote.chunk_codec import chunk_is_encrypted, decode_chunk, frame_size, is_framed
from ..remote.manifest import FORMER_FORMAT


@dataclass(frozen=True, slots=True)
class BatchEntry:
    """One record batch of a store file as found on disk: its Kafka v2 header as stored
    (:class:`~tiered_log.format.kafka.BatchHeader`: every field by Kafka's name, and
    where the batch lies), and whether it verifies.

    ``error`` is None when the batch verifies (see the module docstring), else why not;
    the fields of a batch that does not verify are what its bytes say and may be
    garbage. ``records`` holds the decoded records only when asked for (``with_data``)
    and the batch verifies.
    """

    header: BatchHeader
    error: str | None = None
    records: tuple[Record, ...] = ()

    @property
    def valid(self) -> bool:
        return self.error is None

    @property
    def position(self) -> int:
        return self.header.position

    @property
    def base_offset(self) -> int:
        return self.header.base_offset

    @property
    def size(self) -> int:
        """Bytes of the whole batch (batchLength + 12)."""
        return self.header.size

    @property
    def count(self) -> int:
        """Records the header says the batch holds (lastOffsetDelta + 1)."""
        return self.header.last_offset_delta + 1

    @property
    def last_offset(self) -> int:
        """The offset of the batch's last record (baseOffset + lastOffsetDelta)."""
        return self.header.last_offset

    @property
    def next_offset(self) -> int:
        return self.header.next_offset

    @property
    def first_timestamp(self) -> int:
        """baseTimestamp: the first record's timestamp (under CreateTime)."""
        return self.header.base_timestamp

    @property
    def max_timestamp(self) -> int:
        return self.header.max_timestamp

    @property
    def last_sequence(self) -> int:
        """The last record's sequence number (-1 without a producer sequence), as
        Kafka's ``RecordBatch.lastSequence`` (wrapping past 2**31 - 1)."""
        h = self.header
        if h.base_sequence < 0:
            return -1
        return (h.base_sequence + h.last_offset_delta) & 0x7FFFFFFF

    @property
    def compression(self) -> str:
        """The records' codec by Kafka's name (``none``, ``gzip``, ``snappy``, ``lz4``,
        ``zstd``), or ``unknown(n)``."""
        codec = self.header.attributes & COMPRESSION_MASK
        return Compression(codec).name.lower() if codec <= 4 else f"unknown({codec})"

    @property
    def timestamp_type(self) -> str:
        """``CreateTime`` or ``LogAppendTime`` (attributes bit 3), as Kafka prints it."""
        return "LogAppendTime" if self.header.attributes & TIMESTAMP_TYPE_BIT else "CreateTime"

    @property
    def plausible_count(self) -> int:
        """The records the header claims when its counts agree (records count equals
        lastOffsetDelta + 1, at least one), else 0: what a walk past a batch that does
        not verify can still go by."""
        n = self.header.last_offset_delta + 1
        return n if n >= 1 and self.header.records_count == n else 0


@dataclass(frozen=True, slots=True)
class StoreDamage:
    """Where the bytes of a store file stop being batches: from ``position`` to ``file_size``."""

    position: int
    file_size: int
    reason: str

    @property
    def unreadable_bytes(self) -> int:
        return self.file_size - self.position


_UNDECODABLE = (struct.error, ValueError, IndexError, OverflowError, MemoryError)
"""What a damaged batch might raise besides CorruptRecordError (a dump must never crash)."""


def _check_batch(
    view: memoryview, pos: int, bend: int, *, with_data: bool = False
) -> tuple[str | None, tuple[Record, ...]]:
    """``(why the complete batch view[pos:bend] fails to verify or None, its records)``;
    the records only when it verifies and ``with_data`` (else ``()``)."""
    one = view[pos:bend]
    try:
        (h,) = verify_batches(one)
    except CorruptRecordError as exc:
        return exc.message.partition(": ")[2] or exc.message, ()
    except _UNDECODABLE as exc:
        return f"undecodable batch: {exc}", ()
    if h.last_offset_delta + 1 != h.records_count or h.records_count < 1:
        return (
            f"records count {h.records_count} does not match lastOffsetDelta "
            f"{h.last_offset_delta} + 1",
            (),
        )
    if not with_data:
        return None, ()
    try:
        records = KafkaBatch(h, one).records()
    except CorruptRecordError as exc:
        return f"records do not parse: {exc.message}", ()
    except _UNDECODABLE as exc:
        return f"records do not decompress or parse: {exc}", ()
    return None, tuple(records)


def _batch_extent(data: bytes, pos: int) -> tuple[int, str | None]:
    """``(end, None)`` of the batch at ``pos`` if its header fits and its framing is
    plausible (magic 2, batchLength in range), else ``(pos, reason)``."""
    end = len(data)
    left = end - pos
    if not any(data[pos : pos + 4096]) and data.count(0, pos) == left:
        return (
            pos,
            f"the last {left} bytes are all zeros (a torn write, or space the file system preallocated)",
        )
    if is_legacy_batch(data, pos):
        return pos, (
            f"the bytes hold a batch of {FORMER_FORMAT}, not a Kafka record batch v2 "
            "(a log written by an earlier version: tiered-log migrate rewrites its directory)"
        )
    if left < HEADER_SIZE:
        return pos, f"the last {left} bytes are too short for a batch header (torn write?)"
    base, length = struct.unpack_from(">qi", data, pos)
    magic = data[pos + MAGIC_AT]
    if magic != MAGIC:
        return pos, f"batch header claims base offset {base} and magic {magic}, not 2"
    if length < MIN_BATCH_LENGTH:
        return pos, f"batch header claims base offset {base} and an impossible batchLength {length}"
    bend = pos + LOG_OVERHEAD + length
    if bend > end:
        return pos, (
            f"batch header claims base offset {base} and {length + LOG_OVERHEAD} bytes but "
            f"only {left} remain (torn write or damaged batchLength)"
        )
    return bend, None


def iter_store(data: bytes, *, with_data: bool = False) -> Iterator[BatchEntry | StoreDamage]:
    """Every batch of a store file's bytes, in order; then a StoreDamage if some bytes are left.

    A batch that fails its check is yielded (``error`` set) and the walk goes on when
    the next batch verifies (or the file ends right after it): a damaged batch inside an
    intact sequence. Otherwise the damage is taken to start at that batch and the walk
    ends with a StoreDamage naming its byte position. ``with_data`` decodes each
    verified batch's ``records`` (a batch whose records do not parse fails its check).
    """
    view = memoryview(data)
    pos = 0
    end = len(data)
    while pos < end:
        bend, why = _batch_extent(data, pos)
        if why is not None:
            yield StoreDamage(pos, end, why)
            return
        error, records = _check_batch(view, pos, bend, with_data=with_data)
        if error is not None and bend < end:
            nend, nwhy = _batch_extent(data, bend)
            if nwhy is not None or _check_batch(view, bend, nend)[0] is not None:
                yield StoreDamage(pos, end, f"{error}; the bytes after it do not parse as batches")
                return
        yield BatchEntry(BatchHeader._make((pos, *HEADER.unpack_from(data, pos))), error, records)
        pos = bend


def unframe(stored: bytes) -> tuple[bytes, int, str | None]:
    """The batches of a data object or chunk as the bucket stores it
    (:mod:`~tiered_log.remote.chunk_codec`): ``(batches, framed chunks decoded, what
    stopped the decoding or None)``. Plain bytes (a local store, a plain chunk) are
    returned as they are; each framed chunk is verified and decompressed. An encrypted
    chunk, or one that fails its check, ends the decoding (its data key is wrapped in
    the manifest; this reads files only), the bytes decoded so far are returned."""
    if not is_framed(stored):
        return stored, 0, None
    view = memoryview(stored)
    out: list[bytes | memoryview] = []
    pos = frames = 0
    while pos < len(stored):
        rest = view[pos:]
        if not is_framed(rest):  # plain batches between frames: up to the next frame
            q = pos
            while q < len(stored) and not is_framed(view[q:]):
                nxt, why = _batch_extent(stored, q)
                if why is not None:
                    q = len(stored)  # not a batch either: the walk reports the damage
                    break
                q = nxt
            out.append(view[pos:q])
            pos = q
            continue
        if chunk_is_encrypted(rest):
            return (
                b"".join(out),
                frames,
                (
                    f"the chunk at byte {pos} of {len(stored)} is encrypted (its data key is "
                    "in the segment's manifest): not read"
                ),
            )
        n = frame_size(rest)
        try:
            out.append(decode_chunk(rest[:n], None, f"byte {pos}"))
        except RemoteCorruptionError as exc:
            return b"".join(out), frames, exc.message
        frames += 1
        pos += n
    return b"".join(out), frames, None


@dataclass(slots=True)
class StoreScan:
    """What the index checks need to know about one store file.

    Per batch, in file order: ``positions`` (its first byte), ``base_offsets`` (the
    base offset expected in sequence when a batch fails its check, since its header
    cannot be trusted), ``next_offsets`` (one past its last offset; its base offset when
    the records of a batch that fails its check are unknown), ``first_timestamps``
    (baseTimestamp) and ``max_timestamps`` (maxTimestamp), as its header says. ``end``
    is where readable batches stop.
    """

    path: Path
    base_offset: int
    file_size: int
    positions: array[int] = field(default_factory=lambda: array("q"))
    base_offsets: array[int] = field(default_factory=lambda: array("q"))
    next_offsets: array[int] = field(default_factory=lambda: array("q"))
    first_timestamps: array[int] = field(default_factory=lambda: array("q"))
    max_timestamps: array[int] = field(default_factory=lambda: array("q"))
    records: int = 0
    """Records of the batches (those of a batch failing its check as its header claims)."""
    bad_batches: int = 0
    end: int = 0
    damage: StoreDamage | None = None
    next_offset: int = 0
    """One past the offset of the last record (``base_offset`` if there is none)."""

    @property
    def batches(self) -> int:
        return len(self.positions)

    @property
    def max_timestamp(self) -> int:
        return max(self.max_timestamps) if self.max_timestamps else -1

    def batch_at(self, position: int) -> int | None:
        """Batch row of the batch starting at byte ``position``, or None if none starts there."""
        i = bisect_right(self.positions, position) - 1
        if i >= 0 and self.positions[i] == position:
            return i
        return None

    def batch_of(self, offset: int) -> int | None:
        """Batch row of the (first) batch holding ``offset``, or None if none holds it."""
        i = bisect_right(self.base_offsets, offset) - 1
        if i >= 0 and self.base_offsets[i] <= offset < self.next_offsets[i]:
            return i
        for j, (lo, hi) in enumerate(zip(self.base_offsets, self.next_offsets, strict=True)):
            if lo <= offset < hi:  # offsets out of sequence: bisect cannot tell
                return j
        return None


ProblemSink = Callable[[str, str, int | None, int | None], None]
"""``(kind, message, position, offset)`` reported while scanning one file."""


def scan_store(path: Path, base_offset: int, report: ProblemSink | None = None) -> StoreScan:
    """Walk a store file, checking every batch and the offset sequence from ``base_offset``.

    Problems go to ``report`` (kinds ``checksum``, ``base_offset``, ``offset_sequence``,
    ``store_damaged``); the returned StoreScan feeds the index checks. After a batch that
    fails its check the sequence goes on from the count its header claims, or, when its
    counts disagree, from the next batch's base offset. OSError propagates.
    """
    data = path.read_bytes()
    scan = StoreScan(path, base_offset, len(data))
    expect = base_offset
    resync = False  # the records of the last (bad) batch are unknown: follow the next one
    sink: ProblemSink = report or (lambda *_: None)
    for item in iter_store(data):
        if isinstance(item, StoreDamage):
            scan.damage = item
            sink(
                "store_damaged",
                f"damage starts at byte {item.position} of {item.file_size} "
                f"({item.unreadable_bytes} bytes not readable): {item.reason}",
                item.position,
                expect,
            )
            break
        base = item.base_offset
        n = item.count
        if item.error is not None:
            scan.bad_batches += 1
            sink(
                "checksum",
                f"batch at byte {item.position} (offset {expect}) fails its check: {item.error}",
                item.position,
                expect,
            )
            base = expect
            n = item.plausible_count
            resync = not n
        else:
            if base != expect and not (resync and base > expect):
                if not scan.positions:
                    sink(
                        "base_offset",
                        f"the first batch has base offset {base}, but the file "
                        f"name says the segment starts at {base_offset}",
                        item.position,
                        base,
                    )
                else:
                    sink(
                        "offset_sequence",
                        f"batch at byte {item.position} has base offset {base}, expected {expect}",
                        item.position,
                        base,
                    )
            resync = False
        scan.positions.append(item.position)
        scan.base_offsets.append(base)
        scan.next_offsets.append(base + n)
        scan.first_timestamps.append(item.first_timestamp)
        scan.max_timestamps.append(item.max_timestamp)
        scan.records += n
        scan.end = item.position + item.size
        expect = base + n
    scan.next_offset = expect
    return scan


__all__ = [
    "BatchEntry",
    "ProblemSink",
    "StoreDamage",
    "StoreScan",
    "iter_store",
    "scan_store",
    "unframe",
]
