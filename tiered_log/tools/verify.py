"""Verify log directories without changing them: what ``tiered-log verify`` reports.

:func:`verify_log` scans every segment's store (:mod:`.store`), checks its index files
against it (:mod:`.index_check`) and the offsets across segments, and returns a
:class:`VerifyReport` of :class:`SegmentReport` and :class:`Problem` values (``to_dict``
for JSON). :func:`find_log_dirs` finds the logs under a directory (the directory itself,
or every partition of a service's data directory, or the log directories below it) and
:func:`verify_logs` checks each into a :class:`LogsReport`. A report that checked no
segment is not ``ok``: finding nothing to check is not a clean bill.
:func:`segment_file_kind` tells a segment file's kind and base offset from its name (for
``tiered-log dump``).

Nothing here writes, renames or deletes a file, takes a log's lock, or opens the log
with :meth:`Log.open <tiered_log.local.log.Log.open>` (which repairs), so a log may be
checked while its server runs. What such a server does meanwhile is told apart from
damage: a segment its retention deletes during the check is left out (counted in
``removed``), and the last segment, when the check finds a problem in it while it grows
(an append under way), is checked again. Pure functions over files; safe from any thread
(each call reads its own files).
"""

from __future__ import annotations

import os
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

LIVE_TAIL_RETRIES = 5
"""Checks of a last segment that keeps growing while problems are found in it (an append
under way in a running log) before its problems are reported as they stand."""

SEARCH_DEPTH = 4
"""How many directory levels below the given one :func:`find_log_dirs` looks for logs."""

Severity = Literal["error", "warning"]


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong in a log directory.

    ``kind`` is a stable name (``checksum``, ``store_damaged``, ``offset_sequence``,
    ``base_offset``, ``offset_gap``, ``offset_overlap``, ``missing_index``,
    ``offset_index``, ``time_index``, ``unreadable``, ``orphan_index``, ``leftover_tmp``);
    ``path`` the file concerned; ``position`` a byte position in it and
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
    """The result of :func:`verify_log`. ``ok`` is True when at least one segment was
    checked and no error was found (``checked`` False: the directory held no segment)."""

    directory: str
    segments: tuple[SegmentReport, ...]
    problems: tuple[Problem, ...]
    removed: tuple[int, ...] = ()
    """Base offsets of segments deleted while they were checked (by the running log that
    owns the directory: retention); left out of ``segments`` and ``problems``."""

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "warning"]

    @property
    def checked(self) -> bool:
        """Whether any segment was checked."""
        return bool(self.segments)

    @property
    def ok(self) -> bool:
        return self.checked and not self.errors

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
            "checked": self.checked,
            "segments": [asdict(s) for s in self.segments],
            "records": self.records,
            "batches": self.batches,
            "size": self.size,
            "log_start_offset": self.log_start_offset,
            "next_offset": self.next_offset,
            "errors": len(self.errors),
            "warnings": len(self.warnings),
            "problems": [asdict(p) for p in self.problems],
            "removed_while_checked": list(self.removed),
        }


class _Collector:
    """Gathers problems, passing each one on to ``on_problem`` as soon as it is found.

    Between :meth:`hold` and :meth:`release` problems are kept back (those of one
    segment, which may turn out to have been deleted or grown while it was checked) and
    then kept and passed on, or dropped."""

    def __init__(self, on_problem: Callable[[Problem], None] | None) -> None:
        self.problems: list[Problem] = []
        self._on_problem = on_problem
        self._held: list[Problem] | None = None

    def add(
        self,
        kind: str,
        path: Path,
        message: str,
        *,
        severity: Severity = "error",
        position: int | None = None,
        offset: int | None = None,
    ) -> None:
        p = Problem(kind, str(path), message, severity, position, offset)
        if self._held is not None:
            self._held.append(p)
            return
        self.problems.append(p)
        if self._on_problem is not None:
            self._on_problem(p)

    def hold(self) -> None:
        self._held = []

    def held(self) -> int:
        return len(self._held or ())

    def release(self, *, keep: bool) -> int:
        """End :meth:`hold`: keep (and pass on) or drop what was held; returns how many
        problems were kept."""
        held, self._held = self._held or [], None
        if not keep:
            return 0
        for p in held:
            self.problems.append(p)
            if self._on_problem is not None:
                self._on_problem(p)
        return len(held)

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


def _check_index_files(
    c: _Collector, base: int, directory: Path, scan: StoreScan | None, *, sealed: bool
) -> tuple[int | None, int | None]:
    """Check one segment's two index files; returns their entry counts (None = missing)."""
    counts: list[int | None] = []
    for suffix, what in ((naming.INDEX_SUFFIX, "offset"), (naming.TIMEINDEX_SUFFIX, "time")):
        path = naming.segment_path(directory, base, suffix)
        kind = f"{what}_index"
        if not path.exists():
            counts.append(None)
            if sealed:
                c.add(
                    "missing_index",
                    path,
                    f"the {what} index of a sealed segment is missing (Log.open would rebuild it)",
                )
            continue
        try:
            if suffix == naming.INDEX_SUFFIX:
                oentries, trailing = read_offset_index(path)
                counts.append(len(oentries))
                if scan is not None:
                    c.entries(
                        kind, path, check_offset_index(oentries, trailing, scan, sealed=sealed)
                    )
            else:
                tentries, trailing = read_time_index(path)
                counts.append(len(tentries))
                if scan is not None:
                    c.entries(kind, path, check_time_index(tentries, trailing, scan, sealed=sealed))
        except OSError as exc:
            counts.append(None)
            c.add("unreadable", path, f"cannot read: {exc.strerror or exc}")
    return counts[0], counts[1]


def _size(path: Path) -> int | None:
    """The file's size now; None when it no longer exists (-1 when it cannot be told)."""
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return None
    except OSError:
        return -1


def _check_segment(
    c: _Collector, root: Path, base: int, prev: SegmentReport | None, *, sealed: bool
) -> SegmentReport:
    """Check one segment (its problems go to ``c``, which holds them) and the offsets
    between it and the segment before, ``prev``."""
    store = naming.segment_path(root, base, naming.LOG_SUFFIX)
    if prev is not None and base != prev.next_offset:
        prev_name = naming.offset_name(prev.base_offset) + naming.LOG_SUFFIX
        if base > prev.next_offset:
            why = (
                f"{prev_name} is damaged from byte {prev.damaged_at}"
                if prev.damaged_at is not None
                else f"a segment is missing, or {prev_name} lost its tail"
            )
            c.add(
                "offset_gap",
                store,
                f"offsets {prev.next_offset}..{base - 1} are missing between {prev_name} "
                f"and {store.name} ({why})",
                offset=prev.next_offset,
            )
        else:
            c.add(
                "offset_overlap",
                store,
                f"starts at offset {base} but {prev_name} already holds offsets up to "
                f"{prev.next_offset - 1}",
                offset=base,
            )
    scan: StoreScan | None
    try:
        scan = scan_store(store, base, c.sink(store))
    except OSError as exc:
        c.add("unreadable", store, f"cannot read: {exc.strerror or exc}")
        scan = None
    icount, tcount = _check_index_files(c, base, root, scan, sealed=sealed)
    return SegmentReport(
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
        problems=c.held(),
    )


def _check_segments(
    c: _Collector,
    root: Path,
    bases: list[int],
    on_segment: Callable[[SegmentReport], None] | None,
) -> tuple[list[SegmentReport], list[int]]:
    """Check the segments ``bases`` of the log in ``root`` in order: the reports of those
    checked, and the base offsets of those deleted while checked (see :func:`verify_log`)."""
    segments: list[SegmentReport] = []
    removed: list[int] = []
    prev: SegmentReport | None = None
    for i, base in enumerate(bases):
        store = naming.segment_path(root, base, naming.LOG_SUFFIX)
        sealed = i < len(bases) - 1
        retries = 0 if sealed else LIVE_TAIL_RETRIES
        while True:
            c.hold()
            seg = _check_segment(c, root, base, prev, sealed=sealed)
            now = _size(store)
            if now is None or not (seg.problems and retries and now != seg.size):
                break
            c.release(keep=False)  # it grew (or was cut) while checked: check it again
            retries -= 1
        if now is None:  # deleted while checked: the running log's retention, which
            c.release(keep=False)  # removes the oldest segments: the log starts later
            removed.append(base)
            prev = None
            continue
        c.release(keep=True)
        segments.append(seg)
        if on_segment is not None:
            on_segment(seg)
        prev = seg
    return segments, removed


def verify_log(
    directory: str | Path,
    *,
    on_problem: Callable[[Problem], None] | None = None,
    on_segment: Callable[[SegmentReport], None] | None = None,
) -> VerifyReport:
    """Check every segment of the log in ``directory`` without changing anything.

    Checks: every batch's checksum and framing; offsets consecutive within each store
    and across segments (each base offset equals the previous segment's next offset);
    every offset-index entry points at the start of the batch with that base offset;
    every time-index entry's max timestamp and offset are right and increasing; index
    files present for every sealed segment (all but the last). Leftover ``.tmp`` files and
    index files without a store are warnings (``Log.open`` removes them). A directory
    without segments gives a report that is not ``ok``: nothing was checked.

    The log may be open in a running server meanwhile (see the module docstring): a
    segment whose store is gone once it has been checked was deleted during the check and
    is left out (``removed``), and the offsets of the next one are not compared with the
    segments before it (the log start moved past them); the last segment is checked
    again, up to :data:`LIVE_TAIL_RETRIES` times, while problems are found in it and its
    size is not the size that was checked; and when every segment listed was deleted
    while checked, the directory is listed and checked again.

    ``on_problem`` is called with each problem once its segment is checked, ``on_segment``
    after each segment (for progress). Raises InvalidArgumentError if ``directory`` is
    not a directory; unreadable files are reported as problems.
    """
    root = Path(directory)
    if not root.exists():
        raise InvalidArgumentError(f"log directory {root} does not exist")
    if not root.is_dir():
        raise InvalidArgumentError(f"{root} is not a directory")
    c = _Collector(on_problem)
    removed: list[int] = []
    for _ in range(LIVE_TAIL_RETRIES + 1):
        try:
            names = sorted(p.name for p in root.iterdir())
        except OSError as exc:
            raise InvalidArgumentError(f"cannot list {root}: {exc.strerror or exc}") from exc
        bases = sorted(
            b for n in names if (b := naming.parse_offset_name(n, naming.LOG_SUFFIX)) is not None
        )
        segments, gone = _check_segments(c, root, bases, on_segment)
        removed.extend(gone)
        if segments or not gone:
            break  # else every segment listed was deleted while checked: list them again
    base_set = set(bases)
    for n in names:
        path = root / n
        if (n.endswith(naming.TMP_SUFFIX) or ".tmp-" in n) and path.exists():
            c.add(
                "leftover_tmp",
                path,
                "leftover temporary file (Log.open removes it)",
                severity="warning",
            )
        for suffix in (naming.INDEX_SUFFIX, naming.TIMEINDEX_SUFFIX):
            b = naming.parse_offset_name(n, suffix)
            if b is not None and b not in base_set and path.exists():
                c.add(
                    "orphan_index",
                    path,
                    "index file without a store file (a deleted "
                    "segment's leftover; Log.open removes it)",
                    severity="warning",
                )
    return VerifyReport(str(root), tuple(segments), tuple(c.problems), tuple(removed))


# ---- every log under a directory -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LogsReport:
    """The result of :func:`verify_logs`: one :class:`VerifyReport` per log directory
    found under ``root``. ``ok`` when there is at least one log, every log had a segment
    to check, and no error was found."""

    root: str
    logs: tuple[VerifyReport, ...]

    @property
    def unchecked(self) -> list[VerifyReport]:
        """The logs without a segment to check."""
        return [r for r in self.logs if not r.checked]

    @property
    def damaged(self) -> list[VerifyReport]:
        """The logs with an error."""
        return [r for r in self.logs if r.errors]

    @property
    def errors(self) -> list[Problem]:
        return [p for r in self.logs for p in r.errors]

    @property
    def warnings(self) -> list[Problem]:
        return [p for r in self.logs for p in r.warnings]

    @property
    def segments(self) -> int:
        return sum(len(r.segments) for r in self.logs)

    @property
    def records(self) -> int:
        return sum(r.records for r in self.logs)

    @property
    def size(self) -> int:
        return sum(r.size for r in self.logs)

    @property
    def ok(self) -> bool:
        return bool(self.logs) and all(r.ok for r in self.logs)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form: ``root``, ``ok``, totals, the directories with nothing to check
        and each log's :meth:`VerifyReport.to_dict`."""
        return {
            "root": self.root,
            "ok": self.ok,
            "logs": [r.to_dict() for r in self.logs],
            "segments": self.segments,
            "records": self.records,
            "size": self.size,
            "errors": len(self.errors),
            "warnings": len(self.warnings),
            "unchecked": [r.directory for r in self.unchecked],
        }


def holds_segments(directory: Path) -> bool:
    """Whether ``directory`` holds a segment file (store or index, by its name)."""
    try:
        entries = list(directory.iterdir())
    except OSError:
        return False
    for p in entries:
        kind = segment_file_kind(p)
        if kind is not None and kind[1] is not None:
            return True
    return False


def _subdirs(directory: Path) -> list[Path]:
    try:
        return sorted(p for p in directory.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError:
        return []


def _search(directory: Path, depth: int) -> list[Path]:
    if holds_segments(directory):
        return [directory]
    if depth <= 0:
        return []
    found: list[Path] = []
    for child in _subdirs(directory):
        if child.name not in (naming.REMOTE_DIR, naming.TRASH_DIR):
            found.extend(_search(child, depth - 1))
    return found


def find_log_dirs(root: str | Path) -> list[Path]:
    """The log directories to check under ``root``, in order.

    ``root`` itself when it holds segment files. For a service's data directory (one
    with ``topics/``), every partition directory ``topics/<topic>/<partition>/``, with
    segment files or not (a partition without any has nothing to check, which its report
    says). Otherwise the directories below ``root`` that hold segment files, up to
    :data:`SEARCH_DEPTH` levels down (hidden, remote-tier and trash directories are
    skipped). Empty when there is nothing to check. Raises InvalidArgumentError when
    ``root`` is not a directory.
    """
    top = Path(root)
    if not top.exists():
        raise InvalidArgumentError(f"log directory {top} does not exist")
    if not top.is_dir():
        raise InvalidArgumentError(f"{top} is not a directory")
    if holds_segments(top):
        return [top]
    topics = top / naming.TOPICS_DIR
    if topics.is_dir():
        return [
            p
            for t in _subdirs(topics)
            for p in sorted((d for d in _subdirs(t) if d.name.isdigit()), key=lambda d: int(d.name))
        ]
    return _search(top, SEARCH_DEPTH)


def verify_logs(
    root: str | Path,
    *,
    on_problem: Callable[[Problem], None] | None = None,
    on_segment: Callable[[SegmentReport], None] | None = None,
    on_log: Callable[[VerifyReport], None] | None = None,
) -> LogsReport:
    """:func:`verify_log` of every log :func:`find_log_dirs` finds under ``root``;
    ``on_log`` is called with each log's report as it is done. Raises
    InvalidArgumentError when ``root`` is not a directory."""
    reports: list[VerifyReport] = []
    for d in find_log_dirs(root):
        report = verify_log(d, on_problem=on_problem, on_segment=on_segment)
        reports.append(report)
        if on_log is not None:
            on_log(report)
    return LogsReport(str(root), tuple(reports))


def segment_file_kind(path: Path) -> tuple[str, int | None] | None:
    """``(kind, base_offset)`` of a segment file by its name: kind is ``log``, ``index`` or
    ``timeindex``; base_offset is None when the name is not 20 digits. None if unknown."""
    for suffix, kind in (
        (naming.LOG_SUFFIX, "log"),
        (naming.INDEX_SUFFIX, "index"),
        (naming.TIMEINDEX_SUFFIX, "timeindex"),
    ):
        if path.name.endswith(suffix):
            return kind, naming.parse_offset_name(path.name, suffix)
    return None


__all__ = [
    "LIVE_TAIL_RETRIES",
    "MAX_PROBLEMS_PER_FILE",
    "SEARCH_DEPTH",
    "LogsReport",
    "Problem",
    "SegmentReport",
    "Severity",
    "VerifyReport",
    "find_log_dirs",
    "holds_segments",
    "segment_file_kind",
    "verify_log",
    "verify_logs",
]
