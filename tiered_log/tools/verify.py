"""Verify a whole log directory without changing it: what ``tiered-log verify`` reports.

:func:`verify_log` scans every segment's store (:mod:`.store`), checks its index files
against it (:mod:`.index_check`) and the offsets across segments, and returns a
:class:`VerifyReport` of :class:`SegmentReport` and :class:`Problem` values (``to_dict``
for JSON). :func:`segment_file_kind` tells a segment file's kind and base offset from its
name (for ``tiered-log dump``).

Nothing here writes, renames or deletes a file, and the log is never opened with
:meth:`Log.open <tiered_log.local.log.Log.open>` (which repairs). Pure functions over
files; safe from any thread (each call reads its own files).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from ..errors import InvalidArgumentError
from ..format import naming
from .index_check import (
    EntryProblem,
    check_offset_index,
    check_time_index,
    read_offset_index,
    read_time_index,
)
from .store import ProblemSink, StoreScan, scan_store

MAX_PROBLEMS_PER_FILE = 20
"""Entry-level problems reported per index file before they are summarized in one line."""

Severity = Literal["error", "warning"]


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


__all__ = ["MAX_PROBLEMS_PER_FILE", "Problem", "SegmentReport", "Severity", "VerifyReport",
           "segment_file_kind", "verify_log"]
