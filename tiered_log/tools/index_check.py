"""Index files checked against their store: the ``.index`` and ``.timeindex`` of a segment.

:func:`read_offset_index` / :func:`read_time_index` parse ``.index`` / ``.timeindex``
files (layouts in :mod:`tiered_log.format.index`). Their entries are added at batch
granularity: an offset-index entry points at the start of a batch (its base offset and
byte position); a time-index entry names a record of the segment (the one where the
segment's largest timestamp so far was first reached), checked against the batches'
header timestamps (no record is decoded). :func:`check_offset_index` /
:func:`check_time_index` check entries against a :class:`~.store.StoreScan` of the store
next to them and return one :data:`EntryProblem` per finding.

Read-only; pure functions over files, safe from any thread.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from pathlib import Path

from ..format.index import OFFSET_ENTRY, OFFSET_ENTRY_SIZE, TIME_ENTRY, TIME_ENTRY_SIZE
from .store import StoreScan


@dataclass(frozen=True, slots=True)
class OffsetIndexEntry:
    """One ``.index`` entry: ``u32 relative_offset, u32 position`` (8 bytes): the base
    offset of a batch (relative to the segment's) and the byte position where it starts."""

    index: int
    relative_offset: int
    position: int


@dataclass(frozen=True, slots=True)
class TimeIndexEntry:
    """One ``.timeindex`` entry: ``i64 max_timestamp, u32 relative_offset`` (12 bytes): the
    segment's largest timestamp up to the end of a batch, and the (relative) offset of the
    record where it was first reached (any record, not only a batch's first)."""

    index: int
    max_timestamp: int
    relative_offset: int


def read_offset_index(path: Path) -> tuple[list[OffsetIndexEntry], int]:
    """Entries of an offset index file and the count of trailing bytes (a partial entry)."""
    data = path.read_bytes()
    whole = len(data) - len(data) % OFFSET_ENTRY_SIZE
    entries = [
        OffsetIndexEntry(i, rel, pos)
        for i, (rel, pos) in enumerate(OFFSET_ENTRY.iter_unpack(data[:whole]))
    ]
    return entries, len(data) - whole


def read_time_index(path: Path) -> tuple[list[TimeIndexEntry], int]:
    """Entries of a time index file and the count of trailing bytes (a partial entry)."""
    data = path.read_bytes()
    whole = len(data) - len(data) % TIME_ENTRY_SIZE
    entries = [
        TimeIndexEntry(i, ts, rel)
        for i, (ts, rel) in enumerate(TIME_ENTRY.iter_unpack(data[:whole]))
    ]
    return entries, len(data) - whole


EntryProblem = tuple[int | None, str]
"""``(entry index or None for the whole file, message)``."""


def check_offset_index(
    entries: list[OffsetIndexEntry], trailing: int, scan: StoreScan, *, sealed: bool
) -> list[EntryProblem]:
    """Check offset-index entries against the store: every entry must point at the start
    of a batch whose base offset is the entry's offset; entries start at ``(0, 0)`` and
    increase in both fields."""
    out: list[EntryProblem] = []
    if trailing:
        out.append(
            (
                None,
                f"{trailing} trailing bytes: the file is not a whole number of "
                f"{OFFSET_ENTRY_SIZE}-byte entries (truncated?)",
            )
        )
    if sealed and scan.records and not entries:
        out.append((None, "the offset index is empty but the store holds records"))
    if entries and (entries[0].relative_offset, entries[0].position) != (0, 0):
        out.append((0, "the first entry must be relative offset 0 at position 0"))
    base = scan.base_offset
    prev: OffsetIndexEntry | None = None
    beyond = 0
    for e in entries:
        off = base + e.relative_offset
        if scan.damage is not None and e.position >= scan.damage.position:
            beyond += 1  # the store's damage is reported once, not once per entry
            continue
        if prev is not None and (
            e.relative_offset <= prev.relative_offset or e.position <= prev.position
        ):
            out.append(
                (
                    e.index,
                    f"entry (offset {off}, position {e.position}) does not increase "
                    f"on entry {prev.index} (offset {base + prev.relative_offset}, "
                    f"position {prev.position})",
                )
            )
        prev = e
        row = scan.batch_at(e.position)
        if row is None:
            where = (
                "past the end of the store"
                if e.position >= scan.end
                else "not at the start of a batch"
            )
            out.append((e.index, f"entry (offset {off}, position {e.position}) points {where}"))
        elif scan.base_offsets[row] != off:
            out.append(
                (
                    e.index,
                    f"entry (offset {off}, position {e.position}) points at the "
                    f"batch with base offset {scan.base_offsets[row]}",
                )
            )
    if beyond:
        out.append(
            (
                None,
                f"{beyond} entries point into the damaged part of the store "
                f"(from byte {scan.damage.position if scan.damage else 0})",
            )
        )
    return out


def check_time_index(
    entries: list[TimeIndexEntry], trailing: int, scan: StoreScan, *, sealed: bool
) -> list[EntryProblem]:
    """Check time-index entries against the store, batch by batch (the batch headers'
    maxTimestamp; records are not decoded).

    An entry ``(t, r)`` says that ``t`` is the segment's largest timestamp up to the
    record ``r`` and that ``r`` is where it was first reached: so the batch holding
    ``r`` has a maxTimestamp of at least ``t`` (the segment's first record may name its
    own timestamp, the first batch's baseTimestamp), the batches before it all stay
    below ``t``, and when ``r`` is its batch's last record, ``t`` is that batch's
    maxTimestamp. Entries strictly increase in both fields; a sealed segment's last
    entry holds its maximum.
    """
    out: list[EntryProblem] = []
    if trailing:
        out.append(
            (
                None,
                f"{trailing} trailing bytes: the file is not a whole number of "
                f"{TIME_ENTRY_SIZE}-byte entries (truncated?)",
            )
        )
    if sealed and scan.records and not entries:
        out.append((None, "the time index is empty but the store holds records"))
    base = scan.base_offset
    before = array("q")  # per batch: the largest maxTimestamp of the batches before it
    m = -1 << 63
    for ts in scan.max_timestamps:
        before.append(m)
        m = max(m, ts)
    prev: TimeIndexEntry | None = None
    beyond = 0
    for e in entries:
        off = base + e.relative_offset
        if scan.damage is not None and off >= scan.next_offset:
            beyond += 1  # the store's damage is reported once, not once per entry
            continue
        if prev is not None and (
            e.max_timestamp <= prev.max_timestamp or e.relative_offset <= prev.relative_offset
        ):
            out.append(
                (
                    e.index,
                    f"entry (timestamp {e.max_timestamp}, offset {off}) does not "
                    f"increase on entry {prev.index} (timestamp {prev.max_timestamp}, "
                    f"offset {base + prev.relative_offset})",
                )
            )
        prev = e
        row = scan.batch_of(off)
        if row is None:
            out.append(
                (
                    e.index,
                    f"entry (timestamp {e.max_timestamp}, offset {off}) names an "
                    f"offset the store does not hold",
                )
            )
            continue
        top = scan.max_timestamps[row]
        first_record = row == 0 and off == scan.base_offsets[0]
        last_record = off == scan.next_offsets[row] - 1
        if e.max_timestamp > top and not (
            first_record and e.max_timestamp == scan.first_timestamps[0]
        ):
            out.append(
                (
                    e.index,
                    f"entry (timestamp {e.max_timestamp}, offset {off}): the largest "
                    f"timestamp of the batch holding that offset is {top}",
                )
            )
        elif e.max_timestamp <= before[row]:
            out.append(
                (
                    e.index,
                    f"entry (timestamp {e.max_timestamp}, offset {off}): the batches "
                    f"before offset {scan.base_offsets[row]} already reach timestamp "
                    f"{before[row]}",
                )
            )
        elif last_record and not first_record and e.max_timestamp != top:
            out.append(
                (
                    e.index,
                    f"entry (timestamp {e.max_timestamp}, offset {off}): the largest "
                    f"timestamp up to that offset is {top}",
                )
            )
    if beyond:
        out.append(
            (
                None,
                f"{beyond} entries name records in the damaged part of the store "
                f"(from offset {scan.next_offset})",
            )
        )
    if (
        sealed
        and entries
        and scan.records
        and not out
        and scan.damage is None
        and entries[-1].max_timestamp != scan.max_timestamp
    ):
        out.append(
            (
                entries[-1].index,
                f"the last entry has timestamp {entries[-1].max_timestamp} but the "
                f"segment's largest timestamp is {scan.max_timestamp}",
            )
        )
    return out


__all__ = [
    "EntryProblem",
    "OffsetIndexEntry",
    "TimeIndexEntry",
    "check_offset_index",
    "check_time_index",
    "read_offset_index",
    "read_time_index",
]
