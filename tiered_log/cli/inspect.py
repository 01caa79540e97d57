"""Looking at logs without changing them: ``tiered-log dump``, ``verify`` and ``describe``.

::

    tiered-log dump PATH [--print-data] [--type log|index|timeindex|rli]
    tiered-log verify DIR [--json]        check a log, or every log of a data directory,
                                          without changing it (exit 1 if damaged, or if
                                          nothing was checked)
    tiered-log describe DIR [--json] [--remote URL] [--endpoint-url URL] [--region R] [--log-id ID]

``dump`` and ``verify`` read segment files as they are (:mod:`tiered_log.tools`: nothing
is written, no lock is taken, the log is never opened, so a running server's logs can be
read) and exit 1 when they find damage. ``dump`` prints every batch, record and index
entry of a file or a log directory, each checked (Kafka record batches as
``kafka-dump-log`` prints them; a chunk or data object from the bucket too); ``verify``
checks DIR when it is a log, else every log below it (a service's data directory: every
partition, ``topics/<topic>/<partition>``), prints each problem as found, a line per log
(of a directory of logs), then a summary (or one JSON report). A log without segments,
or a DIR without logs, is not clean: nothing was checked, which it says (exit 1).

``describe`` reads every log under DIR (DIR itself if it is a log directory, else the log
directories below it, e.g. a service's data directory) from its files alone
(:mod:`tiered_log.tools.describe`: no lock, nothing written, the bucket never asked) and
prints, per log: bounds, local and remote segments with offset ranges and sizes, copy
lag in bytes and segments, lost and unreadable ranges, and the chunk cache's size on
disk. The remote tier named is the one ``--remote`` names, else the one the log recorded
when it was last opened with a remote tier (``remote/location.json``); a log with remote
state and neither is an error. A log open in a running server is described beside it:
the output says it is a snapshot of a live directory (and which process holds it).
``read`` (:mod:`.log`), ``dump`` and ``verify`` say the same on stderr.

Output goes to stdout, progress to stderr. One command per process; not thread-safe.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InvalidArgumentError
from ..format import naming
from .registry import CommandGroup, UsageError, counted, note, progress_flag

if TYPE_CHECKING:
    from ..tools.verify import LogsReport, VerifyReport

COMMANDS = CommandGroup()
"""``dump``, ``verify``, ``describe``."""


# ---- dump / verify -------------------------------------------------------------------------


def note_live(root: Path, logs: list[Path]) -> None:
    """One line on stderr when any of ``logs`` (found under ``root``) is open in another
    process (a running server): what is printed is a snapshot of a live directory."""
    from ..local.log import held_by
    from .log import live_note

    holders = {d: pid for d in logs if (pid := held_by(d)) is not None}
    if not holders:
        return
    pids = sorted(set(holders.values()))
    pid_s = ", ".join(map(str, pids))
    if len(logs) == 1:
        note(live_note(str(logs[0]), pids[0]))
        return
    note(
        f"{len(holders)} of the {len(logs)} logs in {root} are open by process "
        f"{pid_s} (a running server?): this is a snapshot of a live directory, as its "
        "files were when read"
    )


def _dump_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "path",
        metavar="PATH",
        help="a store (.log), offset index (.index), time index (.timeindex) or remote "
        "segment manifest (.rli) file, or a directory (dumps every such file)",
    )
    p.add_argument(
        "--print-data",
        "--print-data-log",
        dest="print_data",
        action="store_true",
        help="print each record's key, payload and headers (null for a null key or value)",
    )
    p.add_argument(
        "--type",
        choices=("log", "index", "timeindex", "rli"),
        help="how to read PATH when its name does not say",
    )


@COMMANDS.command(
    "dump", "print every record or index entry of segment files, checking each", _dump_args
)
def cmd_dump(args: argparse.Namespace) -> int:
    """Dump a file or every segment file of a directory (like kafka-dump-log).

    Read-only. Exit status 1 when a batch fails its check, a store has damaged bytes or
    an index entry does not match its store; 0 otherwise.
    """
    from ..tools.dump import DumpTotals, dump_directory, dump_file
    from ..tools.verify import segment_file_kind

    path = Path(args.path)
    out = sys.stdout
    totals = DumpTotals()
    if not path.exists():
        raise InvalidArgumentError(f"{path} does not exist")
    note_live(path, [path if path.is_dir() else path.parent])
    if path.is_dir():
        if args.type is not None:
            raise UsageError("--type applies to a file, not a directory")
        dump_directory(path, args.print_data, out, totals)
    elif args.type == "rli" or (args.type is None and path.name.endswith(naming.RLI_SUFFIX)):
        from ..tools.dump import dump_manifest

        dump_manifest(path, out, totals)
    else:
        kind_base = segment_file_kind(path)
        base = kind_base[1] if kind_base is not None else None
        if args.type is not None:
            kind = args.type
        elif kind_base is None:
            raise UsageError(
                f"cannot tell what {path.name} is: name it *.log, *.index, *.timeindex "
                f"or *.rli, or pass --type"
            )
        else:
            kind = kind_base[0]
        dump_file(path, kind, base, args.print_data, out, totals)
    return 1 if totals.damaged_files else 0


def _verify_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "directory",
        metavar="DIR",
        help="a log directory, or a directory of logs (e.g. a service's data "
        "directory: every partition is checked)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON report instead of text")
    progress_flag(p)


def _nothing_to_check(directory: Path) -> InvalidArgumentError:
    """The error of a verify that found no log to check under ``directory``."""
    if (directory / naming.TOPICS_DIR).is_dir():
        return InvalidArgumentError(
            f"nothing to check: {directory} is a service's data "
            "directory without partitions (it has no topics)"
        )
    return InvalidArgumentError(
        f"nothing to check: no segment files in {directory} or in "
        "the directories below it (give a log directory or a "
        "service's data directory)"
    )


def _summary(report: VerifyReport | LogsReport) -> str:
    """``N segments, N records[ (offsets [a, b))], N bytes`` of a report."""
    from ..tools.dump import plural
    from ..tools.verify import VerifyReport

    if isinstance(report, VerifyReport):
        span = (
            ""
            if report.next_offset is None
            else f" (offsets [{report.log_start_offset}, {report.next_offset}))"
        )
        segments = len(report.segments)
    else:
        span = ""
        segments = report.segments
    return (
        f"{plural(segments, 'segment')}, {plural(report.records, 'record')}{span}, "
        f"{plural(report.size, 'byte')}"
    )


def _verdict(report: VerifyReport, where: str = "") -> str:
    """How one log came out: ``clean``, ``DAMAGED: ...``, or that nothing was checked
    (no segment store file ``where``)."""
    from ..tools.dump import plural

    removed = (
        f"; {plural(len(report.removed), 'segment')} deleted by the running log while checked"
        if report.removed
        else ""
    )
    warnings = plural(len(report.warnings), "warning")
    extra = f" ({warnings})" if report.warnings else ""
    if not report.checked:
        return f"NOTHING CHECKED: no segment store files (*.log){where}{extra}"
    if report.ok:
        return f"clean{extra}{removed}"
    return f"DAMAGED: {plural(len(report.errors), 'error')}, {warnings}{removed}"


@COMMANDS.command(
    "verify",
    "check every segment of a log, or of every log of a data "
    "directory, without changing it; exit 1 if damaged or nothing was checked",
    _verify_args,
)
def cmd_verify(args: argparse.Namespace) -> int:
    """Check checksums, offsets, segment continuity and indexes (see tools.verify_logs).

    DIR is one log, or a directory of logs (a service's data directory: every partition).
    Prints each problem as it is found, then a line per log (for a directory of logs)
    and a summary; exit status 0 when every log had segments and no error was found
    (warnings allowed), 1 otherwise. Nothing to check at all is a one-line error. Reads
    files only (no lock, no write): a running server's directory can be checked.
    """
    from ..perf.common import Progress
    from ..tools.dump import plural
    from ..tools.verify import (
        Problem,
        SegmentReport,
        VerifyReport,
        find_log_dirs,
        verify_log,
        verify_logs,
    )

    out = sys.stdout
    directory = Path(args.directory)
    logs = find_log_dirs(directory)
    if not logs:
        raise _nothing_to_check(directory)
    single = logs == [directory]
    note_live(directory, logs)

    def where(path: str | Path) -> str:
        try:
            return str(Path(path).relative_to(directory))
        except ValueError:
            return str(path)

    def on_problem(p: Problem) -> None:
        if args.json:
            return
        prefix = "warning: " if p.severity == "warning" else ""
        name = Path(p.path).name if single else where(p.path)
        print(f"{prefix}{name}: {p.message}", file=out, flush=True)

    def on_log(r: VerifyReport) -> None:
        if not args.json:
            print(f"{where(r.directory)}: {_summary(r)}: {_verdict(r)}", file=out, flush=True)

    total = 0
    for d in logs:
        with contextlib.suppress(OSError):
            total += len(naming.list_segment_bases(d))
    with Progress(total, "verify", unit="segments", enabled=args.progress) as progress:

        def on_segment(_s: SegmentReport) -> None:
            progress.advance()

        if single:
            report: VerifyReport | LogsReport = verify_log(
                directory, on_problem=on_problem, on_segment=on_segment
            )
        else:
            report = verify_logs(
                directory, on_problem=on_problem, on_segment=on_segment, on_log=on_log
            )
    if args.json:
        print(json.dumps(report.to_dict(), indent=2), file=out)
        return 0 if report.ok else 1
    if isinstance(report, VerifyReport):
        print(f"{_summary(report)}: {_verdict(report, f' in {directory}')}", file=out)
        return 0 if report.ok else 1
    head = f"{plural(len(report.logs), 'log')}: {_summary(report)}"
    warnings = plural(len(report.warnings), "warning")
    unchecked = report.unchecked
    nothing = (
        f"{len(unchecked)} of {plural(len(report.logs), 'log')} with nothing to check"
        if unchecked
        else ""
    )
    if report.damaged:
        print(
            f"{head}: DAMAGED: {plural(len(report.errors), 'error')} in "
            f"{plural(len(report.damaged), 'log')}, {warnings}"
            f"{'; ' + nothing if nothing else ''}",
            file=out,
        )
    elif unchecked:
        print(f"{head}: NOT ALL CHECKED: {nothing}", file=out)
    else:
        extra = f" ({warnings})" if report.warnings else ""
        print(f"{head}: clean{extra}", file=out)
    return 0 if report.ok else 1


# ---- describe ------------------------------------------------------------------------------

_SKIP_DIRS = frozenset({naming.REMOTE_DIR, "trash"})


def is_log_dir(path: Path) -> bool:
    """Whether ``path`` holds a log: a segment store file, or remote-tier state."""
    if (path / naming.REMOTE_DIR / naming.COPY_JOURNAL_FILE).is_file():
        return True
    try:
        return any(
            naming.parse_offset_name(p.name, naming.LOG_SUFFIX) is not None for p in path.iterdir()
        )
    except OSError:
        return False


def find_logs(root: Path, depth: int = 4) -> list[Path]:
    """``root`` if it is a log directory, else the log directories below it (sorted)."""
    if is_log_dir(root):
        return [root]
    found: list[Path] = []
    if depth <= 0:
        return found
    try:
        children = sorted(p for p in root.iterdir() if p.is_dir())
    except OSError:
        return found
    for child in children:
        if child.name.startswith(".") or child.name in _SKIP_DIRS:
            continue
        found.extend(find_logs(child, depth - 1))
    return found


def _describe_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "dir",
        metavar="DIR",
        help="a log directory, or a directory of logs (e.g. a service's data directory)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument(
        "--remote",
        metavar="URL",
        help="the remote tier (s3://bucket/prefix, file:///dir); default: the one "
        "each log recorded",
    )
    p.add_argument("--endpoint-url", metavar="URL", help="S3 endpoint (MinIO, moto, ...)")
    p.add_argument("--region", help="S3 region")
    p.add_argument(
        "--log-id",
        help="the log's id when DIR is one log that did not record it "
        "(default: recorded, else the directory name)",
    )


def describe_logs(
    root: Path,
    remote: str | None = None,
    endpoint_url: str | None = None,
    region: str | None = None,
    log_id: str | None = None,
) -> list[dict[str, Any]]:
    """:func:`~tiered_log.tools.describe.describe_log` of every log under ``root`` plus
    its ``directory``: read-only, beside a running server too (``live``: the pid of the
    process holding a log, which makes it a snapshot).

    UsageError if there is no log, or a log has remote state but no remote location.
    The bucket is not asked: what a log knows of its remote tier is in its directory.
    ``endpoint_url`` and ``region`` are accepted for the commands' compatibility.
    """
    from ..remote.tier import read_location
    from ..tools.describe import describe_log

    del endpoint_url, region  # the bucket is never asked
    if not root.is_dir():
        raise UsageError(f"{root} is not a directory")
    logs = find_logs(root)
    if not logs:
        raise UsageError(f"no log directories in {root}")
    if log_id is not None and len(logs) > 1:
        raise UsageError(f"--log-id needs DIR to be one log; {root} holds {len(logs)}")
    out: list[dict[str, Any]] = []
    for d in logs:
        loc = read_location(d)
        url = remote if remote is not None else (loc["url"] if loc is not None else None)
        has_remote = (d / naming.REMOTE_DIR).is_dir()
        if url is None and has_remote:
            raise UsageError(
                f"log {d} has a remote tier but its location is not recorded; "
                "give it with --remote URL (and --endpoint-url for S3)"
            )
        lid = log_id or (loc or {}).get("log_id") or d.name
        desc = describe_log(d, lid, url, remote=has_remote or remote is not None)
        out.append({"directory": str(d), **desc})
    return out


def _n(v: int) -> str:
    return f"{v:,}"


def format_describe(logs: list[dict[str, Any]]) -> str:
    """The human-readable table of :func:`describe_logs`' result."""
    lines: list[str] = []
    for d in logs:
        b = d["bounds"]
        where = d.get("remote_url") or "no remote tier"
        lines.append(f"{d['log_id']}  {d['directory']}  ({where})")
        if d.get("live"):
            lines.append(
                f"  LIVE: open by process {d['live']}: a snapshot of a live directory, "
                "as its files were when read"
            )
        lines.append(
            f"  offsets: log start {_n(b['log_start_offset'])}, local start "
            f"{_n(b['local_start_offset'])}, remote end {_n(b['remote_end_offset'])}, "
            f"next {_n(b['next_offset'])}"
        )
        rsegs = d.get("remote_segments", [])
        lines.append(
            f"  local: {counted(len(d['local_segments']), 'segment')}, "
            f"{counted(d['local_bytes'], 'byte')}; remote: "
            f"{counted(len(rsegs), 'segment')}, "
            f"{counted(d.get('remote_bytes', 0), 'byte')}"
        )
        lines.append(
            f"  copy lag: {counted(d['copy_lag_segments'], 'segment')}, "
            f"{counted(d['copy_lag_bytes'], 'byte')}"
        )
        lost = d.get("lost_offsets") or []
        if lost:
            lines.append("  lost offsets: " + ", ".join(f"[{a:,}, {b:,})" for a, b in lost))
        if d["remote_enabled"]:
            lines.append(
                f"  cache: {counted(d.get('cache_bytes', 0), 'byte')} on disk "
                "(hit rate: the server's /metrics)"
            )
        for n in d.get("notes", []):
            lines.append(f"  note: {n}")
        lines.append(f"  {'tier':<7}{'base offset':>14}{'next offset':>14}{'bytes':>14}  state")
        damaged = {x["id"]: x["problem"] for x in d.get("remote_damage", [])}
        for s in rsegs:
            state = f"UNREADABLE: {damaged[s['id']]}" if s["id"] in damaged else s["state"]
            lines.append(
                f"  {'remote':<7}{s['base_offset']:>14,}{s['next_offset']:>14,}"
                f"{s['size']:>14,}  {state}"
            )
        for s in d["local_segments"]:
            state = "active" if not s["sealed"] else ("copied" if s["copied"] else "not copied")
            lines.append(
                f"  {'local':<7}{s['base_offset']:>14,}{s['next_offset']:>14,}"
                f"{s['size']:>14,}  {state}"
            )
    return "\n".join(lines)


@COMMANDS.command("describe", "per log: local and remote segments, copy lag, cache", _describe_args)
def cmd_describe(args: argparse.Namespace) -> int:
    """``tiered-log describe DIR``: see the module docstring."""
    logs = describe_logs(Path(args.dir), args.remote, args.endpoint_url, args.region, args.log_id)
    if args.json:
        json.dump({"logs": logs}, sys.stdout, indent=2)
        print()
    else:
        print(format_describe(logs))
    return 0


__all__ = [
    "COMMANDS",
    "cmd_describe",
    "cmd_dump",
    "cmd_verify",
    "describe_logs",
    "find_logs",
    "format_describe",
    "is_log_dir",
]
