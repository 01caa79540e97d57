"""Read-only inspection of a log directory: what ``tiered-log dump`` and ``verify`` print.

Nothing here writes, renames or deletes a file: store and index files are opened
read-only (``Path.read_bytes``) and the log is never opened with :meth:`Log.open
<tiered_log.local.log.Log.open>` (which repairs). So it is safe to point at a copy of a
damaged log, or at the directory of a running log (a verify racing an append may then
report the last batch as a torn tail).

The functions return structured results (dataclasses, ``to_dict`` for JSON); the command
line only formats them, and the service can reuse them as they are.

- :func:`iter_store` walks the record batches of a store file's bytes (layout in
  :mod:`tiered_log.format.records`: a 28-byte header ``u64 base_offset, u32 size,
  u64 checksum, u16 magic, u16 attributes, u32 count``, then the record columns and
  data), yielding a :class:`BatchEntry` per batch and, where the bytes stop parsing as
  batches, one final :class:`StoreDamage`.
- :func:`read_offset_index` / :func:`read_time_index` parse ``.index`` / ``.timeindex``
  files (layouts in :mod:`tiered_log.format.index`). Their entries are added at batch
  granularity: an offset-index entry points at the start of a batch (its base offset and
  byte position); a time-index entry names a record of the segment (the one where the
  segment's largest timestamp so far was first reached).
- :func:`scan_store` summarizes a store for the index checks;
  :func:`check_offset_index` / :func:`check_time_index` check index entries against it.
- :func:`verify_log` checks a whole directory and returns a :class:`VerifyReport`.

Pure functions over files; safe from any thread (each call reads its own files).
"""

from __future__ import annotations

import struct
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from .errors import CorruptRecordError, InvalidArgumentError
from .format import naming
from .format.index import OFFSET_ENTRY, OFFSET_ENTRY_SIZE, TIME_ENTRY, TIME_ENTRY_SIZE
from .format.records import (
    HEADER,
    HEADER_SIZE,
    RECORD_OVERHEAD,
    Record,
    batch_table,
    batch_timestamps,
    decode_records,
)

MAX_PROBLEMS_PER_FILE = 20
"""Entry-level problems reported per index file before they are summarized in one line."""

Severity = Literal["error", "warning"]


# ---- store files ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BatchEntry:
    """One record batch of a store file as found on disk (header fields as stored).

    ``error`` is None when the batch verifies (checksum, magic, lengths, header blocks),
    else why not; the fields of a batch that does not verify are what its bytes say and
    may be garbage. ``timestamps`` is the batch's timestamp column (one per record, the
    record with offset ``base_offset + i`` at ``i``), read even from a batch that does not
    verify as long as its header's ``count`` fits its ``size`` (else empty);
    ``first_timestamp`` / ``max_timestamp`` come from it (-1 when it is empty).
    ``records`` holds the decoded records only when asked for (``with_data``) and the
    batch verifies.
    """

    base_offset: int
    count: int
    position: int
    size: int
    first_timestamp: int
    max_timestamp: int
    checksum: int
    error: str | None = None
    timestamps: tuple[int, ...] = ()
    records: tuple[Record, ...] = ()

    @property
    def valid(self) -> bool:
        return self.error is None

    @property
    def last_offset(self) -> int:
        """The offset of the batch's last record (as its header says)."""
        return self.base_offset + self.count - 1

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.count


@dataclass(frozen=True, slots=True)
class StoreDamage:
    """Where the bytes of a store file stop being batches: from ``position`` to ``file_size``."""

    position: int
    file_size: int
    reason: str

    @property
    def unreadable_bytes(self) -> int:
        return self.file_size - self.position


_UNDECODABLE = (struct.error, ValueError, IndexError, OverflowError)
"""What a damaged batch might raise besides CorruptRecordError (a dump must never crash)."""


def _check_batch(data: bytes, pos: int, bend: int, *,
                 with_data: bool = False) -> tuple[str | None, tuple[Record, ...]]:
    """``(why the complete batch data[pos:bend] fails to verify or None, its records)``;
    the records only when it verifies and ``with_data`` (else ``()``)."""
    if not with_data:  # verify without building records where the batch allows it
        base = HEADER.unpack_from(data, pos)[0]
        try:
            infos, used = batch_table(memoryview(data)[pos:bend], base)
        except _UNDECODABLE as exc:
            return f"undecodable batch: {exc}", ()
        if infos and used == bend - pos:
            return None, ()
    try:  # (without data, batch_table only stops: decode it again for the reason)
        recs, after, _ = decode_records(data, pos, bend)
    except CorruptRecordError as exc:
        return str(exc), ()
    except _UNDECODABLE as exc:
        return f"undecodable batch: {exc}", ()
    if not recs or after != bend:
        return "batch lengths do not add up", ()
    if not with_data:
        return "the batch does not verify", ()
    return None, tuple(recs)


def _batch_extent(data: bytes, pos: int) -> tuple[int, str | None]:
    """``(end, None)`` of the batch at ``pos`` if its header fits and its size is
    plausible, else ``(pos, reason)``."""
    end = len(data)
    left = end - pos
    if not any(data[pos : pos + 4096]) and data.count(0, pos) == left:
        return pos, f"the last {left} bytes are all zeros (a torn write, or space the file system preallocated)"
    if left < HEADER_SIZE:
        return pos, f"the last {left} bytes are too short for a batch header (torn write?)"
    base, size = HEADER.unpack_from(data, pos)[:2]
    if size < HEADER_SIZE + RECORD_OVERHEAD:
        return pos, f"batch header claims base offset {base} and an impossible size {size}"
    bend = pos + size
    if bend > end:
        return pos, (f"batch header claims base offset {base} and {size} bytes but only "
                     f"{left} remain (torn write or damaged size)")
    return bend, None


def _timestamp_column(data: bytes, pos: int, size: int, count: int) -> tuple[int, ...]:
    """The ``i64[count]`` timestamps after the header of the batch at ``pos``, or ``()``
    when ``count`` does not fit the batch's ``size`` (a damaged header)."""
    if count < 1 or HEADER_SIZE + RECORD_OVERHEAD * count > size:
        return ()
    return tuple(batch_timestamps(data, pos, count))


def iter_store(data: bytes, *, with_data: bool = False) -> Iterator[BatchEntry | StoreDamage]:
    """Every batch of a store file's bytes, in order; then a StoreDamage if some bytes are left.

    A batch that fails its checksum is yielded (``error`` set) and the walk goes on when
    the next batch verifies (or the file ends right after it): a damaged batch inside an
    intact sequence. Otherwise the damage is taken to start at that batch and the walk
    ends with a StoreDamage naming its byte position. ``with_data`` fills each verified
    batch's ``records``.
    """
    pos = 0
    end = len(data)
    while pos < end:
        bend, why = _batch_extent(data, pos)
        if why is not None:
            yield StoreDamage(pos, end, why)
            return
        error, records = _check_batch(data, pos, bend, with_data=with_data)
        if error is not None and bend < end:
            nend, nwhy = _batch_extent(data, bend)
            if nwhy is not None or _check_batch(data, bend, nend)[0] is not None:
                yield StoreDamage(pos, end, f"{error}; the bytes after it do not parse as batches")
                return
        base, size, cs, _magic, _attrs, count = HEADER.unpack_from(data, pos)
        ts = _timestamp_column(data, pos, size, count)
        first, mx = (ts[0], max(ts)) if ts else (-1, -1)
        yield BatchEntry(base, count, pos, size, first, mx, cs, error, ts, records)
        pos = bend


@dataclass(slots=True)
class StoreScan:
    """What the index checks need to know about one store file.

    Per batch, in file order: ``positions`` (its first byte) and ``base_offsets`` (the
    base offset expected in sequence when a batch fails its checksum, since its header
    cannot be trusted). Per record: ``offsets`` and ``timestamps`` (a batch that fails its
    checksum contributes the records its header claims, with the timestamps its bytes
    hold, when that count fits its size; else none). ``end`` is where readable batches stop.
    """

    path: Path
    base_offset: int
    file_size: int
    positions: array[int] = field(default_factory=lambda: array("q"))
    base_offsets: array[int] = field(default_factory=lambda: array("q"))
    offsets: array[int] = field(default_factory=lambda: array("q"))
    timestamps: array[int] = field(default_factory=lambda: array("q"))
    bad_batches: int = 0
    end: int = 0
    damage: StoreDamage | None = None
    next_offset: int = 0
    """One past the offset of the last record (``base_offset`` if there is none)."""
    _rows: dict[int, int] | None = None

    @property
    def records(self) -> int:
        return len(self.offsets)

    @property
    def batches(self) -> int:
        return len(self.positions)

    @property
    def max_timestamp(self) -> int:
        return max(self.timestamps) if self.timestamps else -1

    def batch_at(self, position: int) -> int | None:
        """Batch row of the batch starting at byte ``position``, or None if none starts there."""
        i = bisect_left(self.positions, position)
        if i < len(self.positions) and self.positions[i] == position:
            return i
        return None

    def row_of(self, offset: int) -> int | None:
        """Record row of the record with ``offset``, or None."""
        i = offset - self.base_offset
        if 0 <= i < len(self.offsets) and self.offsets[i] == offset:
            return i
        if self._rows is None:  # offsets out of sequence: map them once
            self._rows = {}
            for j, o in enumerate(self.offsets):
                self._rows.setdefault(o, j)
        return self._rows.get(offset)


ProblemSink = Callable[[str, str, int | None, int | None], None]
"""``(kind, message, position, offset)`` reported while scanning one file."""


def scan_store(path: Path, base_offset: int, report: ProblemSink | None = None) -> StoreScan:
    """Walk a store file, checking checksums and the offset sequence from ``base_offset``.

    Problems go to ``report`` (kinds ``checksum``, ``base_offset``, ``offset_sequence``,
    ``store_damaged``); the returned StoreScan feeds the index checks. After a batch that
    fails its checksum the sequence goes on from the count its header claims, or, when
    that count does not fit its size, from the next batch's base offset. OSError propagates.
    """
    data = path.read_bytes()
    scan = StoreScan(path, base_offset, len(data))
    expect = base_offset
    resync = False  # the records of the last (bad) batch are unknown: follow the next one
    sink: ProblemSink = report or (lambda *_: None)
    for item in iter_store(data):
        if isinstance(item, StoreDamage):
            scan.damage = item
            sink("store_damaged",
                 f"damage starts at byte {item.position} of {item.file_size} "
                 f"({item.unreadable_bytes} bytes not readable): {item.reason}",
                 item.position, expect)
            break
        base = item.base_offset
        n = item.count
        if item.error is not None:
            scan.bad_batches += 1
            sink("checksum", f"batch at byte {item.position} (offset {expect}) fails its check: "
                 f"{item.error}", item.position, expect)
            base = expect
            n = len(item.timestamps)
            resync = not n
        else:
            if base != expect and not (resync and base > expect):
                if not scan.positions:
                    sink("base_offset", f"the first batch has base offset {base}, but the file "
                         f"name says the segment starts at {base_offset}", item.position, base)
                else:
                    sink("offset_sequence", f"batch at byte {item.position} has base offset "
                         f"{base}, expected {expect}", item.position, base)
            resync = False
        scan.positions.append(item.position)
        scan.base_offsets.append(base)
        scan.offsets.extend(range(base, base + n))
        scan.timestamps.extend(item.timestamps[:n])
        scan.end = item.position + item.size
        expect = base + n
    scan.next_offset = expect
    return scan


# ---- index files -------------------------------------------------------------------------


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
    entries = [OffsetIndexEntry(i, rel, pos)
               for i, (rel, pos) in enumerate(OFFSET_ENTRY.iter_unpack(data[:whole]))]
    return entries, len(data) - whole


def read_time_index(path: Path) -> tuple[list[TimeIndexEntry], int]:
    """Entries of a time index file and the count of trailing bytes (a partial entry)."""
    data = path.read_bytes()
    whole = len(data) - len(data) % TIME_ENTRY_SIZE
    entries = [TimeIndexEntry(i, ts, rel)
               for i, (ts, rel) in enumerate(TIME_ENTRY.iter_unpack(data[:whole]))]
    return entries, len(data) - whole


EntryProblem = tuple[int | None, str]
"""``(entry index or None for the whole file, message)``."""


def check_offset_index(entries: list[OffsetIndexEntry], trailing: int, scan: StoreScan,
                       *, sealed: bool) -> list[EntryProblem]:
    """Check offset-index entries against the store: every entry must point at the start
    of a batch whose base offset is the entry's offset; entries start at ``(0, 0)`` and
    increase in both fields."""
    out: list[EntryProblem] = []
    if trailing:
        out.append((None, f"{trailing} trailing bytes: the file is not a whole number of "
                          f"{OFFSET_ENTRY_SIZE}-byte entries (truncated?)"))
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
        if prev is not None and (e.relative_offset <= prev.relative_offset
                                 or e.position <= prev.position):
            out.append((e.index, f"entry (offset {off}, position {e.position}) does not increase "
                                 f"on entry {prev.index} (offset {base + prev.relative_offset}, "
                                 f"position {prev.position})"))
        prev = e
        row = scan.batch_at(e.position)
        if row is None:
            where = ("past the end of the store" if e.position >= scan.end
                     else "not at the start of a batch")
            out.append((e.index, f"entry (offset {off}, position {e.position}) points {where}"))
        elif scan.base_offsets[row] != off:
            out.append((e.index, f"entry (offset {off}, position {e.position}) points at the "
                                 f"batch with base offset {scan.base_offsets[row]}"))
    if beyond:
        out.append((None, f"{beyond} entries point into the damaged part of the store "
                          f"(from byte {scan.damage.position if scan.damage else 0})"))
    return out


def check_time_index(entries: list[TimeIndexEntry], trailing: int, scan: StoreScan,
                     *, sealed: bool) -> list[EntryProblem]:
    """Check time-index entries against the store.

    Each entry ``(t, r)`` must say that ``t`` is the largest timestamp of the records up
    to relative offset ``r`` and that record ``r`` is where it was first reached (entries
    are added at batch starts, but ``r`` may be any record); entries strictly increase in
    both fields; a sealed segment's last entry holds its maximum.
    """
    out: list[EntryProblem] = []
    if trailing:
        out.append((None, f"{trailing} trailing bytes: the file is not a whole number of "
                          f"{TIME_ENTRY_SIZE}-byte entries (truncated?)"))
    if sealed and scan.records and not entries:
        out.append((None, "the time index is empty but the store holds records"))
    base = scan.base_offset
    running = array("q")
    m = -1 << 63
    for ts in scan.timestamps:
        m = max(m, ts)
        running.append(m)
    prev: TimeIndexEntry | None = None
    beyond = 0
    for e in entries:
        off = base + e.relative_offset
        if scan.damage is not None and off >= scan.next_offset:
            beyond += 1  # the store's damage is reported once, not once per entry
            continue
        if prev is not None and (e.max_timestamp <= prev.max_timestamp
                                 or e.relative_offset <= prev.relative_offset):
            out.append((e.index, f"entry (timestamp {e.max_timestamp}, offset {off}) does not "
                                 f"increase on entry {prev.index} (timestamp {prev.max_timestamp}, "
                                 f"offset {base + prev.relative_offset})"))
        prev = e
        row = scan.row_of(off)
        if row is None:
            out.append((e.index, f"entry (timestamp {e.max_timestamp}, offset {off}) names an "
                                 f"offset the store does not hold"))
            continue
        true_max = running[row]
        if true_max != e.max_timestamp:
            out.append((e.index, f"entry (timestamp {e.max_timestamp}, offset {off}): the largest "
                                 f"timestamp up to that offset is {true_max}"))
        elif row and running[row - 1] >= true_max:
            first = bisect_left(running, true_max)  # running maxima never decrease
            out.append((e.index, f"entry (timestamp {e.max_timestamp}, offset {off}): that maximum "
                                 f"was first reached at offset {scan.offsets[first]}"))
    if beyond:
        out.append((None, f"{beyond} entries name records in the damaged part of the store "
                          f"(from offset {scan.next_offset})"))
    if (sealed and entries and scan.records and not out and scan.damage is None
            and entries[-1].max_timestamp != running[-1]):
        out.append((entries[-1].index,
                    f"the last entry has timestamp {entries[-1].max_timestamp} but the "
                    f"segment's largest timestamp is {running[-1]}"))
    return out


# ---- the whole directory ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong in a log directory.

    ``kind`` is a stable name (``checksum``, ``store_damaged``, ``offset_sequence``,
    ``base_offset``, ``offset_gap``, ``offset_overlap``, ``missing_index``,
    ``offset_index``, ``time_index``, ``unreadable``, ``orphan_index``, ``leftover_tmp``,
    ``no_segments``); ``path`` the file concerned; ``position`` a byte position in it and
    ``offset`` a record offset where they apply. Warnings are not damage (``Log.open``
    cleans them up silently); errors are.
    """

    kind: str
    path: str
    message: str
    severity: Severity = "error"
    position: int | None = None
    offset: int | None = None

    def __str__(self) -> str:
        prefix = "warning: " if self.severity == "warning" else ""
        return f"{prefix}{Path(self.path).name}: {self.message}"


@dataclass(frozen=True, slots=True)
class SegmentReport:
    """What verify found in one segment (its files named by ``base_offset``)."""

    base_offset: int
    next_offset: int
    """One past the last record found in the store."""
    records: int
    batches: int
    """Batches found in the store, those failing their checksum included."""
    size: int
    max_timestamp: int
    sealed: bool
    index_entries: int | None
    """Entries of the ``.index`` file; None when it does not exist."""
    time_index_entries: int | None
    damaged_at: int | None
    """Byte position where the store stops being readable batches; None if it is whole."""
    problems: int


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """The result of :func:`verify_log`. ``ok`` is True when no error was found."""

    directory: str
    segments: tuple[SegmentReport, ...]
    problems: tuple[Problem, ...]

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "warning"]

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def records(self) -> int:
        return sum(s.records for s in self.segments)

    @property
    def batches(self) -> int:
        return sum(s.batches for s in self.segments)

    @property
    def size(self) -> int:
        return sum(s.size for s in self.segments)

    @property
    def log_start_offset(self) -> int | None:
        return self.segments[0].base_offset if self.segments else None

    @property
    def next_offset(self) -> int | None:
        return self.segments[-1].next_offset if self.segments else None

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form: the fields plus ``ok``, ``records``, ``batches``, ``size`` and
        counts."""
        return {
            "directory": self.directory,
            "ok": self.ok,
            "segments": [asdict(s) for s in self.segments],
            "records": self.records,
            "batches": self.batches,
            "size": self.size,
            "log_start_offset": self.log_start_offset,
            "next_offset": self.next_offset,
            "errors": len(self.errors),
            "warnings": len(self.warnings),
            "problems": [asdict(p) for p in self.problems],
        }


class _Collector:
    """Gathers problems, passing each one on to ``on_problem`` as soon as it is found."""

    def __init__(self, on_problem: Callable[[Problem], None] | None) -> None:
        self.problems: list[Problem] = []
        self._on_problem = on_problem

    def add(self, kind: str, path: Path, message: str, *, severity: Severity = "error",
            position: int | None = None, offset: int | None = None) -> None:
        p = Problem(kind, str(path), message, severity, position, offset)
        self.problems.append(p)
        if self._on_problem is not None:
            self._on_problem(p)

    def sink(self, path: Path) -> ProblemSink:
        def report(kind: str, message: str, position: int | None, offset: int | None) -> None:
            self.add(kind, path, message, position=position, offset=offset)
        return report

    def entries(self, kind: str, path: Path, found: list[EntryProblem]) -> None:
        for i, (entry, message) in enumerate(found):
            if i == MAX_PROBLEMS_PER_FILE:
                self.add(kind, path, f"... and {len(found) - i} more bad entries")
                return
            self.add(kind, path, message if entry is None else f"entry {entry}: {message}")


def _check_index_files(c: _Collector, base: int, directory: Path, scan: StoreScan | None,
                       *, sealed: bool) -> tuple[int | None, int | None]:
    """Check one segment's two index files; returns their entry counts (None = missing)."""
    counts: list[int | None] = []
    for suffix, what in ((naming.INDEX_SUFFIX, "offset"), (naming.TIMEINDEX_SUFFIX, "time")):
        path = naming.segment_path(directory, base, suffix)
        kind = f"{what}_index"
        if not path.exists():
            counts.append(None)
            if sealed:
                c.add("missing_index", path, f"the {what} index of a sealed segment is missing "
                      "(Log.open would rebuild it)")
            continue
        try:
            if suffix == naming.INDEX_SUFFIX:
                oentries, trailing = read_offset_index(path)
                counts.append(len(oentries))
                if scan is not None:
                    c.entries(kind, path, check_offset_index(oentries, trailing, scan, sealed=sealed))
            else:
                tentries, trailing = read_time_index(path)
                counts.append(len(tentries))
                if scan is not None:
                    c.entries(kind, path, check_time_index(tentries, trailing, scan, sealed=sealed))
        except OSError as exc:
            counts.append(None)
            c.add("unreadable", path, f"cannot read: {exc.strerror or exc}")
    return counts[0], counts[1]


def verify_log(directory: str | Path, *,
               on_problem: Callable[[Problem], None] | None = None,
               on_segment: Callable[[SegmentReport], None] | None = None) -> VerifyReport:
    """Check every segment of the log in ``directory`` without changing anything.

    Checks: every batch's checksum and framing; offsets consecutive within each store
    and across segments (each base offset equals the previous segment's next offset);
    every offset-index entry points at the start of the batch with that base offset;
    every time-index entry's max timestamp and offset are right and increasing; index
    files present for every sealed segment (all but the last). Leftover ``.tmp`` files and index files
    without a store are warnings (``Log.open`` removes them).

    ``on_problem`` is called with each problem as it is found, ``on_segment`` after each
    segment (for progress). Raises InvalidArgumentError if ``directory`` is not a
    directory; unreadable files are reported as problems.
    """
    root = Path(directory)
    if not root.exists():
        raise InvalidArgumentError(f"log directory {root} does not exist")
    if not root.is_dir():
        raise InvalidArgumentError(f"{root} is not a directory")
    c = _Collector(on_problem)
    try:
        names = sorted(p.name for p in root.iterdir())
    except OSError as exc:
        raise InvalidArgumentError(f"cannot list {root}: {exc.strerror or exc}") from exc
    bases = sorted(b for n in names if (b := naming.parse_offset_name(n, naming.LOG_SUFFIX)) is not None)
    base_set = set(bases)
    for n in names:
        if n.endswith(naming.TMP_SUFFIX) or ".tmp-" in n:
            c.add("leftover_tmp", root / n, "leftover temporary file (Log.open removes it)",
                  severity="warning")
        for suffix in (naming.INDEX_SUFFIX, naming.TIMEINDEX_SUFFIX):
            b = naming.parse_offset_name(n, suffix)
            if b is not None and b not in base_set:
                c.add("orphan_index", root / n, "index file without a store file (a deleted "
                      "segment's leftover; Log.open removes it)", severity="warning")
    if not bases:
        c.add("no_segments", root, "no segment store files (*.log) in the directory",
              severity="warning")
    segments: list[SegmentReport] = []
    prev: SegmentReport | None = None
    for i, base in enumerate(bases):
        store = naming.segment_path(root, base, naming.LOG_SUFFIX)
        sealed = i < len(bases) - 1
        before = len(c.problems)
        if prev is not None and base != prev.next_offset:
            prev_name = naming.offset_name(prev.base_offset) + naming.LOG_SUFFIX
            if base > prev.next_offset:
                why = (f"{prev_name} is damaged from byte {prev.damaged_at}"
                       if prev.damaged_at is not None
                       else f"a segment is missing, or {prev_name} lost its tail")
                c.add("offset_gap", store,
                      f"offsets {prev.next_offset}..{base - 1} are missing between {prev_name} "
                      f"and {store.name} ({why})", offset=prev.next_offset)
            else:
                c.add("offset_overlap", store,
                      f"starts at offset {base} but {prev_name} already holds offsets up to "
                      f"{prev.next_offset - 1}", offset=base)
        scan: StoreScan | None
        try:
            scan = scan_store(store, base, c.sink(store))
        except OSError as exc:
            c.add("unreadable", store, f"cannot read: {exc.strerror or exc}")
            scan = None
        icount, tcount = _check_index_files(c, base, root, scan, sealed=sealed)
        seg = SegmentReport(
            base_offset=base,
            next_offset=scan.next_offset if scan else base,
            records=scan.records if scan else 0,
            batches=scan.batches if scan else 0,
            size=scan.file_size if scan else 0,
            max_timestamp=scan.max_timestamp if scan else -1,
            sealed=sealed,
            index_entries=icount,
            time_index_entries=tcount,
            damaged_at=scan.damage.position if scan and scan.damage else None,
            problems=len(c.problems) - before,
        )
        segments.append(seg)
        if on_segment is not None:
            on_segment(seg)
        prev = seg
    return VerifyReport(str(root), tuple(segments), tuple(c.problems))


def segment_file_kind(path: Path) -> tuple[str, int | None] | None:
    """``(kind, base_offset)`` of a segment file by its name: kind is ``log``, ``index`` or
    ``timeindex``; base_offset is None when the name is not 20 digits. None if unknown."""
    for suffix, kind in ((naming.LOG_SUFFIX, "log"), (naming.INDEX_SUFFIX, "index"),
                         (naming.TIMEINDEX_SUFFIX, "timeindex")):
        if path.name.endswith(suffix):
            return kind, naming.parse_offset_name(path.name, suffix)
    return None


__all__ = [
    "BatchEntry",
    "OffsetIndexEntry",
    "Problem",
    "SegmentReport",
    "StoreDamage",
    "StoreScan",
    "TimeIndexEntry",
    "VerifyReport",
    "check_offset_index",
    "check_time_index",
    "iter_store",
    "read_offset_index",
    "read_time_index",
    "scan_store",
    "segment_file_kind",
    "verify_log",
]
