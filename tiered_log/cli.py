"""The ``tiered-log`` command line.

Subcommands (``tiered-log COMMAND --help`` for each one's options)::

    tiered-log append DIR [--key K] [--file F] [--segment-bytes N]   lines -> records
    tiered-log read DIR [--offset N | --timestamp T] [--max-records N] [--json]
    tiered-log demo DIR            append, read back, look up, verify; print a summary
    tiered-log dump PATH [--print-data]   a store / index / timeindex file, or a log dir
    tiered-log verify DIR [--json]        check a log without changing it (exit 1 if damaged)
    tiered-log perf append|read [--json] [--records N] [--repeat R] [--dir D]

Errors never show a traceback: a bad command line prints one line
``tiered-log: error: <message>`` on stderr and exits 2; any other failure (a
:class:`~tiered_log.errors.TieredLogError`, an ``OSError``) prints one such line and exits
1. Set ``TIERED_LOG_DEBUG=1`` to get the traceback of an unexpected error.

**Adding a subcommand.** Each subcommand is one function ``(args) -> exit code``
registered on a :class:`CommandGroup` with a function that adds its arguments::

    def _serve_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--port", type=int, default=8080)

    @COMMANDS.command("serve", "run the HTTP service", _serve_args)
    def cmd_serve(args: argparse.Namespace) -> int:
        ...
        return 0

Nested groups work the same way (``PERF.command("ship", ...)`` adds ``tiered-log perf
ship``). Raise :class:`UsageError` for a bad argument found after parsing; raise the
library's errors (or let ``OSError`` through) for everything else. Keep imports of heavy
modules (the service, boto3, benchmarks) inside the command function so that every
command starts fast.

Output goes to stdout; progress lines and notes go to stderr.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import io
import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NoReturn, TextIO

from . import __version__
from .errors import InvalidArgumentError, OffsetOutOfRangeError, TieredLogError
from .format import naming

if TYPE_CHECKING:
    from .local.log import LogConfig
    from .tools import StoreScan

PROG = "tiered-log"
APPEND_BATCH = 1000
"""Records per ``append_batch`` when appending lines."""
READ_PAGE = 1000
"""Records per ``read_range`` when printing records."""


# ---- the command registry ---------------------------------------------------------------


class UsageError(Exception):
    """A bad command line: reported in one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser that raises UsageError instead of printing usage and exiting."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see '{self.prog} --help')")


Runner = Callable[[argparse.Namespace], int]
"""A subcommand: parsed arguments in, exit status out."""
Configure = Callable[[argparse.ArgumentParser], None]
"""Adds a subcommand's arguments to its parser."""


def _no_arguments(parser: argparse.ArgumentParser) -> None:
    """Configure for a subcommand without arguments."""


@dataclass(frozen=True, slots=True)
class Command:
    """One registered subcommand."""

    name: str
    help: str
    configure: Configure
    run: Runner


class CommandGroup:
    """An ordered registry of subcommands and nested groups (``tiered-log perf ...``).

    Register with the :meth:`command` decorator; :meth:`install` adds everything to an
    argparse parser. Registration happens at import time, in one thread.
    """

    def __init__(self, name: str, help: str = "") -> None:
        self.name = name
        self.help = help
        self.entries: dict[str, Command | CommandGroup] = {}

    def _add(self, name: str, entry: Command | CommandGroup) -> None:
        if name in self.entries:
            raise ValueError(f"subcommand {self.name} {name} is registered twice")
        self.entries[name] = entry

    def command(self, name: str, help: str, configure: Configure | None = None) -> Callable[[Runner], Runner]:
        """Decorator registering ``fn`` as subcommand ``name`` (arguments by ``configure``)."""

        def register(fn: Runner) -> Runner:
            self._add(name, Command(name, help, configure or _no_arguments, fn))
            return fn

        return register

    def group(self, name: str, help: str) -> CommandGroup:
        """A nested group of subcommands, e.g. ``perf``."""
        g = CommandGroup(f"{self.name} {name}", help)
        self._add(name, g)
        return g

    def install(self, parser: argparse.ArgumentParser) -> None:
        """Add every registered subcommand (and group, recursively) to ``parser``."""
        sub = parser.add_subparsers(title="commands", metavar="COMMAND", required=True,
                                    dest=f"_{self.name.replace(' ', '_').replace('-', '_')}")
        for name, entry in self.entries.items():
            p = sub.add_parser(name, help=entry.help, description=entry.help)
            if isinstance(entry, CommandGroup):
                entry.install(p)
            else:
                entry.configure(p)
                p.set_defaults(_run=entry.run)


COMMANDS = CommandGroup(PROG)
"""Every ``tiered-log`` subcommand."""


# ---- argument types ----------------------------------------------------------------------


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0 (offsets, timestamps)."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {v}")
    return v


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (counts, sizes); accepts ``_`` separators."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {v}")
    return v


def timestamp_ms(text: str) -> int:
    """argparse type: milliseconds since the epoch, or an ISO 8601 date-time (UTC if no zone)."""
    try:
        v = int(text)
    except ValueError:
        try:
            dt = datetime.fromisoformat(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected milliseconds since the epoch or an ISO 8601 date-time, got {text!r}"
            ) from None
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=UTC)
        v = int(dt.timestamp() * 1000)
    if v < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {v}")
    return v


def _progress_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="show progress on stderr (default: only when stderr is a terminal)")


# ---- shared helpers ------------------------------------------------------------------------


def _out() -> TextIO:
    return sys.stdout


def _note(message: str) -> None:
    """A one-line note on stderr (not an error)."""
    print(f"{PROG}: {message}", file=sys.stderr)


def _log_config(segment_bytes: int | None) -> LogConfig:
    """A LogConfig from command-line values; a bad value is a usage error."""
    from .local.log import LogConfig

    try:
        return LogConfig() if segment_bytes is None else LogConfig(segment_bytes=segment_bytes)
    except InvalidArgumentError as exc:
        raise UsageError(exc.message) from exc


def _existing_log_dir(directory: str) -> Path:
    """``directory`` if it holds a log (at least one segment file); else an error.

    Opening a log creates its directory: commands that only read call this first, so a
    typo does not create an empty log.
    """
    path = Path(directory)
    if not path.exists():
        raise InvalidArgumentError(f"log directory {directory} does not exist")
    if not path.is_dir():
        raise InvalidArgumentError(f"{directory} is not a directory")
    if not naming.list_segment_bases(path):
        raise InvalidArgumentError(f"{directory} holds no log (no *{naming.LOG_SUFFIX} segment files)")
    return path


def text_field(b: bytes | None) -> str:
    """A key or value for one-line text output.

    The text itself when the bytes are UTF-8 with no control characters (and do not start
    with ``base64:``); otherwise ``base64:`` and the base64 of the bytes. None (no key)
    prints as an empty field; an empty key as ``base64:``.
    """
    if b is None:
        return ""
    try:
        s = b.decode("utf-8")
    except UnicodeDecodeError:
        pass
    else:
        if s and s.isprintable() and not s.startswith("base64:"):
            return s
    return "base64:" + base64.b64encode(b).decode("ascii")


def _plural(n: int, word: str, plural: str | None = None) -> str:
    """``"1 record"``, ``"2 records"``."""
    return f"{n:,} {word if n == 1 else (plural or word + 's')}"


def _headers_text(headers: Iterable[tuple[str, bytes | None]]) -> str:
    return ",".join(f"{n}={'(null)' if v is None else text_field(v)}" for n, v in headers)


# ---- append / read / demo ----------------------------------------------------------------


def input_lines(stream: IO[bytes]) -> Iterator[bytes]:
    """Lines of a binary stream without their line ending (``\\n`` or ``\\r\\n``)."""
    for line in stream:
        if line.endswith(b"\n"):
            line = line[:-1]
            if line.endswith(b"\r"):
                line = line[:-1]
        yield line


def _append_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("directory", metavar="DIR", help="log directory (created if needed)")
    p.add_argument("--key", help="key of every record (UTF-8); default: no key")
    p.add_argument("--file", metavar="F", help="read lines from F instead of stdin ('-' = stdin)")
    p.add_argument("--segment-bytes", type=positive_int, metavar="N",
                   help="roll segments at N bytes (default: 64 MiB)")
    p.add_argument("--batch", type=positive_int, default=APPEND_BATCH, metavar="N",
                   help=f"records per append_batch (default: {APPEND_BATCH})")
    _progress_flag(p)


@COMMANDS.command("append", "append each line of stdin (or --file) as one record", _append_args)
def cmd_append(args: argparse.Namespace) -> int:
    """Append lines as records in batches, flush (fsync), print the offsets appended.

    Empty lines are skipped (a record value cannot be empty) and counted on stderr.
    """
    from .format.records import ProducerRecord
    from .local.log import Log
    from .perf.common import Progress

    config = _log_config(args.segment_bytes)
    key = None if args.key is None else args.key.encode("utf-8")
    from_file = args.file is not None and args.file != "-"
    stream: IO[bytes] = open(args.file, "rb") if from_file else sys.stdin.buffer  # noqa: SIM115
    total = os.fstat(stream.fileno()).st_size if from_file else None
    first = last = None
    count = skipped = 0
    try:
        with Log.open(args.directory, config) as log, Progress(
            total, "append", unit="bytes" if from_file else "records", enabled=args.progress
        ) as progress:
            batch: list[ProducerRecord | bytes] = []

            def send() -> None:
                nonlocal first, last, count
                lo, hi = log.append_batch(batch)
                first = lo if first is None else first
                last = hi
                count += len(batch)
                batch.clear()

            for line in input_lines(stream):
                progress.advance(len(line) + 1 if from_file else 1)
                if not line:
                    skipped += 1
                    continue
                batch.append(line if key is None else ProducerRecord(line, key=key))
                if len(batch) >= args.batch:
                    send()
            if batch:
                send()
            log.flush()
            bounds = log.bounds()
    finally:
        if from_file:
            stream.close()
    if skipped:
        _note(f"skipped {skipped} empty line{'s' if skipped != 1 else ''} (a record value cannot be empty)")
    out = _out()
    if count:
        print(f"appended {count} record{'s' if count != 1 else ''} at offsets {first}..{last} "
              f"(log offsets [{bounds.log_start_offset}, {bounds.next_offset}))", file=out)
    else:
        print(f"appended 0 records (log offsets [{bounds.log_start_offset}, {bounds.next_offset}))",
              file=out)
    return 0


def _read_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("directory", metavar="DIR", help="log directory")
    start = p.add_mutually_exclusive_group()
    start.add_argument("--offset", type=non_negative_int, metavar="N",
                       help="first offset to print (default: the log start)")
    start.add_argument("--timestamp", type=timestamp_ms, metavar="T",
                       help="start at the first record with timestamp >= T "
                            "(ms since the epoch, or ISO 8601)")
    p.add_argument("--max-records", type=positive_int, metavar="N", help="print at most N records")
    p.add_argument("--json", action="store_true",
                   help="one JSON object per line (the HTTP API's record shape)")


@COMMANDS.command(
    "read",
    "print records: offset, timestamp, key, value separated by tabs (or --json lines)",
    _read_args,
)
def cmd_read(args: argparse.Namespace) -> int:
    """Print records from an offset (or timestamp) to the end (or ``--max-records``).

    Text lines are ``offset<TAB>timestamp<TAB>key<TAB>value`` (see :func:`text_field`).
    Opens the log like any client does, which recovers it after a crash (cutting a torn
    tail); use ``dump`` to look at a log without touching it.
    """
    from .local.log import Log

    path = _existing_log_dir(args.directory)
    out = _out()
    with Log.open(path) as log:
        end = log.next_offset
        if args.timestamp is not None:
            found = log.offset_for_timestamp(args.timestamp)
            if found is None:
                _note(f"no record has a timestamp at or after {args.timestamp}")
                return 0
            offset = found
        else:
            offset = log.log_start_offset if args.offset is None else args.offset
        start = log.log_start_offset
        if not start <= offset <= end:
            raise OffsetOutOfRangeError(f"offset {offset} is not in the log [{start}, {end})",
                                        log_start=start, next_offset=end)
        from .service.wire import record_to_json  # the HTTP API's JSON shape

        limit = args.max_records if args.max_records is not None else 1 << 62
        printed = 0
        while offset < end and printed < limit:
            recs = log.read_range(offset, min(READ_PAGE, limit - printed), 16 << 20)
            if not recs:
                break
            lines = []
            for r in recs:
                if args.json:
                    lines.append(json.dumps(record_to_json(r), ensure_ascii=False))
                else:
                    lines.append(f"{r.offset}\t{r.timestamp}\t{text_field(r.key)}\t{text_field(r.value)}")
            out.write("\n".join(lines) + "\n")
            printed += len(recs)
            offset = recs[-1].offset + 1
    return 0


def _demo_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("directory", metavar="DIR", help="log directory (created if needed)")
    p.add_argument("--records", type=positive_int, default=10_000, metavar="N",
                   help="records to append (default: 10000)")
    p.add_argument("--segment-bytes", type=positive_int, default=256 * 1024, metavar="N",
                   help="segment size, small so that the demo rolls a few (default: 262144)")


@COMMANDS.command("demo", "append records, read them back, look one up by time, verify", _demo_args)
def cmd_demo(args: argparse.Namespace) -> int:
    """The library end to end on a local directory, with a short summary.

    Appends ``--records`` keyed records with a header and increasing timestamps (after
    whatever the log already holds), reads them back and compares, finds one by
    timestamp, closes the log and verifies the directory read-only.
    """
    from .format.records import ProducerRecord
    from .local.log import Log, now_ms
    from .tools import verify_log

    config = _log_config(args.segment_bytes)
    directory = Path(args.directory)
    n = args.records
    out = _out()
    with Log.open(directory, config) as log:
        ts0 = max([now_ms(), *(s.max_timestamp + 1 for s in log.segments())])
        records = [
            ProducerRecord(
                json.dumps({"event": i, "user": f"user-{i % 10}", "message": f"hello #{i}"}).encode(),
                key=f"user-{i % 10}".encode(),
                headers=(("source", b"tiered-log demo"),),
                timestamp=ts0 + i,
            )
            for i in range(n)
        ]
        t0 = time.perf_counter()
        first = log.next_offset
        for i in range(0, n, 500):
            log.append_batch(records[i : i + 500])
        log.flush()
        t_append = time.perf_counter() - t0
        t0 = time.perf_counter()
        got = []
        offset = first
        while offset < first + n:
            page = log.read_range(offset, READ_PAGE, 16 << 20)
            got.extend(page)
            offset = page[-1].offset + 1
        t_read = time.perf_counter() - t0
        for i, (want, rec) in enumerate(zip(records, got, strict=True)):
            if (rec.offset, rec.key, rec.value, rec.headers, rec.timestamp) != (
                first + i, want.key, want.value, want.headers, want.timestamp
            ):
                raise TieredLogError(f"demo: record {first + i} read back differs from what was appended")
        middle = n // 2
        found = log.offset_for_timestamp(ts0 + middle)
        if found != first + middle:
            raise TieredLogError(f"demo: timestamp lookup found offset {found}, expected {first + middle}")
        segments = log.segments()
        bounds = log.bounds()
        size = log.size_bytes
    report = verify_log(directory)
    print(f"tiered-log demo: log in {directory}", file=out)
    print(f"  appended {n:,} records (offsets {first}..{first + n - 1}) in {t_append:.3f} s "
          f"({n / max(t_append, 1e-9):,.0f} records/s), flushed", file=out)
    print(f"  read them back and compared: all {len(got):,} match ({t_read:.3f} s, "
          f"{n / max(t_read, 1e-9):,.0f} records/s)", file=out)
    print(f"  first record at or after timestamp {ts0 + middle}: offset {found}", file=out)
    print(f"  log: offsets [{bounds.log_start_offset}, {bounds.next_offset}), {len(segments)} "
          f"segments, {size:,} bytes", file=out)
    if report.ok:
        print(f"  verify: clean ({report.records:,} records checked)", file=out)
    else:
        print(f"  verify: {len(report.errors)} problems", file=out)
        for p in report.errors:
            print(f"    {p}", file=out)
    print(f"  next: {PROG} read {directory} --max-records 5 | {PROG} dump {directory} | "
          f"{PROG} verify {directory}", file=out)
    return 0 if report.ok else 1


# ---- dump / verify -------------------------------------------------------------------------


def _dump_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", metavar="PATH",
                   help="a store (.log), offset index (.index) or time index (.timeindex) file, "
                        "or a log directory (dumps every file)")
    p.add_argument("--print-data", action="store_true", help="print each record's key, value and headers")
    p.add_argument("--type", choices=("log", "index", "timeindex"),
                   help="how to read PATH when its name does not say")


class _DumpTotals:
    """State across the files of one dump: damaged files (for the exit status) and store
    scans, so that a segment's two index files share one scan of its store."""

    def __init__(self) -> None:
        self.damaged_files = 0
        self.scans: dict[Path, StoreScan | None] = {}


def _sealed(directory: Path, base: int | None) -> bool:
    """Whether the segment ``base`` in ``directory`` is sealed (a later segment exists)."""
    if base is None or not directory.is_dir():
        return False
    return any(b > base for b in naming.list_segment_bases(directory))


def _dump_store(path: Path, base: int | None, print_data: bool, out: TextIO, totals: _DumpTotals) -> None:
    """Print each batch's header line, then a ``| offset: ...`` line per record of a batch
    that verifies (with its key, value and headers when ``print_data``), then a summary."""
    from .tools import StoreDamage, iter_store

    data = path.read_bytes()
    print(f"Dumping {path} (store, {len(data):,} bytes"
          f"{'' if base is None else f', segment base offset {base}'})", file=out)
    batches = records = bad = 0
    first = last = None
    damage: StoreDamage | None = None
    expect = base
    out_of_sequence = 0
    for item in iter_store(data, with_data=True):
        if isinstance(item, StoreDamage):
            damage = item
            print(f"DAMAGE at byte {item.position}: {item.reason}; the remaining "
                  f"{item.unreadable_bytes:,} bytes are not readable batches", file=out)
            break
        batches += 1
        note = ""
        if item.valid:
            if expect is not None and item.base_offset != expect:
                out_of_sequence += 1
                note = f" (expected base offset {expect})"
            records += item.count
            first = item.base_offset if first is None else first
            last = item.last_offset
            expect = item.next_offset
        else:
            bad += 1
            # The header cannot be trusted: go on by its count if that fits, else resync.
            expect = expect + len(item.timestamps) if expect is not None and item.timestamps else None
        status = "true" if item.valid else f"false ({item.error})"
        print(f"base_offset: {item.base_offset} last_offset: {item.last_offset} "
              f"count: {item.count} position: {item.position} size: {item.size} "
              f"first_timestamp: {item.first_timestamp} max_timestamp: {item.max_timestamp} "
              f"checksum: {item.checksum:#018x} valid: {status}{note}", file=out)
        for r in item.records:
            line = (f"| offset: {r.offset} timestamp: {r.timestamp} "
                    f"key_length: {-1 if r.key is None else len(r.key)} "
                    f"value_length: {len(r.value)} header_count: {len(r.headers)}")
            if print_data:
                line += f" key: {text_field(r.key)} value: {text_field(r.value)}"
                if r.headers:
                    line += f" headers: {_headers_text(r.headers)}"
            print(line, file=out)
    span = "" if first is None else f", offsets {first}..{last}"
    verdict = []
    if bad:
        verdict.append(f"{_plural(bad, 'batch', 'batches')} failing their checksum")
    if out_of_sequence:
        verdict.append(f"{out_of_sequence} out of sequence")
    if damage is not None:
        verdict.append(f"damaged from byte {damage.position} ({damage.unreadable_bytes:,} bytes)")
    if verdict:
        totals.damaged_files += 1
    print(f"Summary: {_plural(batches, 'batch', 'batches')}, {_plural(records, 'readable record')}"
          f"{span}, {len(data):,} bytes; "
          f"{'; '.join(verdict) if verdict else 'all batches verify'}", file=out)


def _store_scan_for(path: Path, base: int | None, totals: _DumpTotals) -> StoreScan | None:
    """A StoreScan of the store next to index file ``path`` (None if there is none)."""
    from .tools import scan_store

    if base is None:
        return None
    store = naming.segment_path(path.parent, base, naming.LOG_SUFFIX)
    if store not in totals.scans:
        totals.scans[store] = scan_store(store, base) if store.is_file() else None
    return totals.scans[store]


def _dump_index(path: Path, base: int | None, kind: str, out: TextIO, totals: _DumpTotals) -> None:
    """Print every entry of an index file; check each against the store next to it."""
    from .tools import check_offset_index, check_time_index, read_offset_index, read_time_index

    scan = _store_scan_for(path, base, totals)
    sealed = _sealed(path.parent, base)
    b = 0 if base is None else base
    lines: list[str] = []
    unchecked: set[int] = set()  # entries in the damaged part of the store
    found: list[tuple[int | None, str]] = []
    if kind == "index":
        what = "offset index"
        oentries, trailing = read_offset_index(path)
        if scan is not None:
            found = check_offset_index(oentries, trailing, scan, sealed=sealed)
        for e in oentries:
            lines.append(f"entry: {e.index} offset: {b + e.relative_offset} "
                         f"relative_offset: {e.relative_offset} position: {e.position}")
            if scan is not None and scan.damage is not None and e.position >= scan.damage.position:
                unchecked.add(e.index)
    else:
        what = "time index"
        tentries, trailing = read_time_index(path)
        if scan is not None:
            found = check_time_index(tentries, trailing, scan, sealed=sealed)
        for t in tentries:
            lines.append(f"entry: {t.index} max_timestamp: {t.max_timestamp} "
                         f"offset: {b + t.relative_offset} relative_offset: {t.relative_offset}")
            if scan is not None and scan.damage is not None and b + t.relative_offset >= scan.next_offset:
                unchecked.add(t.index)
    if scan is None and trailing:
        found = [(None, f"{trailing} trailing bytes: not a whole number of entries (truncated?)")]
    bad: dict[int, list[str]] = {}
    file_problems: list[str] = []
    for entry, message in found:
        if entry is None:
            file_problems.append(message)
        else:
            bad.setdefault(entry, []).append(message)
    print(f"Dumping {path} ({what}, {len(lines)} entries"
          f"{'' if base is None else f', segment base offset {base}'})", file=out)
    for i, line in enumerate(lines):
        if scan is None:
            status = ""
        elif i in bad:
            status = " MISMATCH: " + "; ".join(bad[i])
        elif i in unchecked:
            status = " not checked (the store is damaged there)"
        else:
            status = " ok"
        print(line + status, file=out)
    for message in file_problems:
        print(f"PROBLEM: {message}", file=out)
    if scan is not None:
        checked = f"checked against {scan.path.name}"
    elif base is not None:
        checked = "not checked: no store file next to it"
    else:
        checked = "not checked: the file name does not give the segment's base offset"
    if found:
        totals.damaged_files += 1
    extra = f", {_plural(len(file_problems), 'file problem')}" if file_problems else ""
    print(f"Summary: {_plural(len(lines), 'entry', 'entries')}, {len(bad)} bad{extra}; {checked}",
          file=out)


def _dump_file(path: Path, kind: str, base: int | None, print_data: bool, out: TextIO,
               totals: _DumpTotals) -> None:
    if kind == "log":
        _dump_store(path, base, print_data, out, totals)
    else:
        _dump_index(path, base, kind, out, totals)


def _dump_directory(path: Path, print_data: bool, out: TextIO, totals: _DumpTotals) -> None:
    """Dump every segment file of ``path``: by base offset, then store, index, time index."""
    from .tools import segment_file_kind

    order = ("log", "index", "timeindex")
    files: list[tuple[int, int, Path, str]] = []
    for p in sorted(path.iterdir()):
        kind, base = segment_file_kind(p) or ("", None)
        if base is not None and p.is_file():
            files.append((base, order.index(kind), p, kind))
        else:
            print(f"Skipping {p} (not a segment file)", file=out)
    files.sort()
    if not files:
        print(f"No segment files in {path}", file=out)
    for base, _, p, kind in files:
        _dump_file(p, kind, base, print_data, out, totals)
        print(file=out)
    print(f"Dumped {len(files)} files; {totals.damaged_files} with problems", file=out)


@COMMANDS.command("dump", "print every record or index entry of segment files, checking each", _dump_args)
def cmd_dump(args: argparse.Namespace) -> int:
    """Dump a file or every segment file of a directory (like kafka-dump-log).

    Read-only. Exit status 1 when a batch fails its check, a store has damaged bytes or
    an index entry does not match its store; 0 otherwise.
    """
    from .tools import segment_file_kind

    path = Path(args.path)
    out = _out()
    totals = _DumpTotals()
    if not path.exists():
        raise InvalidArgumentError(f"{path} does not exist")
    if path.is_dir():
        if args.type is not None:
            raise UsageError("--type applies to a file, not a directory")
        _dump_directory(path, args.print_data, out, totals)
    else:
        kind_base = segment_file_kind(path)
        base = kind_base[1] if kind_base is not None else None
        if args.type is not None:
            kind = args.type
        elif kind_base is None:
            raise UsageError(f"cannot tell what {path.name} is: name it *.log, *.index or "
                             f"*.timeindex, or pass --type")
        else:
            kind = kind_base[0]
        _dump_file(path, kind, base, args.print_data, out, totals)
    return 1 if totals.damaged_files else 0


def _verify_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("directory", metavar="DIR", help="log directory")
    p.add_argument("--json", action="store_true", help="print one JSON report instead of text")
    _progress_flag(p)


@COMMANDS.command("verify", "check every segment of a log without changing it; exit 1 if damaged",
                  _verify_args)
def cmd_verify(args: argparse.Namespace) -> int:
    """Check checksums, offsets, segment continuity and indexes (see tools.verify_log).

    Prints each problem as it is found, then a summary; exit status 0 when no error was
    found (warnings allowed), 1 otherwise.
    """
    from .perf.common import Progress
    from .tools import Problem, SegmentReport, verify_log

    out = _out()
    directory = Path(args.directory)
    total = len(naming.list_segment_bases(directory)) if directory.is_dir() else None
    with Progress(total, "verify", unit="segments", enabled=args.progress) as progress:

        def on_problem(p: Problem) -> None:
            if not args.json:
                print(p, file=out, flush=True)

        def on_segment(_s: SegmentReport) -> None:
            progress.advance()

        report = verify_log(directory, on_problem=on_problem, on_segment=on_segment)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2), file=out)
        return 0 if report.ok else 1
    span = "" if report.next_offset is None else \
        f" (offsets [{report.log_start_offset}, {report.next_offset}))"
    head = (f"{_plural(len(report.segments), 'segment')}, {_plural(report.records, 'record')}"
            f"{span}, {_plural(report.size, 'byte')}")
    if report.ok:
        extra = f" ({_plural(len(report.warnings), 'warning')})" if report.warnings else ""
        print(f"{head}: clean{extra}", file=out)
        return 0
    print(f"{head}: DAMAGED: {_plural(len(report.errors), 'error')}, "
          f"{_plural(len(report.warnings), 'warning')}", file=out)
    return 1


# ---- perf ------------------------------------------------------------------------------------

PERF = COMMANDS.group("perf", "benchmarks, each measuring its baseline in the same run")
"""``tiered-log perf KIND``: benchmarks. Add kinds with ``@PERF.command(...)``."""



def _perf_args(p: argparse.ArgumentParser) -> None:
    from .perf.common import DEFAULT_BATCH, DEFAULT_RECORDS, DEFAULT_REPEAT

    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument("--records", type=positive_int, default=DEFAULT_RECORDS, metavar="N",
                   help=f"1 KiB records per run (default: {DEFAULT_RECORDS})")
    p.add_argument("--small-records", type=positive_int, metavar="N",
                   help="100-byte records per run (default: the same as --records)")
    p.add_argument("--batch", type=positive_int, default=DEFAULT_BATCH, metavar="N",
                   help=f"records per batch (default: {DEFAULT_BATCH})")
    p.add_argument("--repeat", type=positive_int, default=DEFAULT_REPEAT, metavar="R",
                   help=f"runs per system; the best counts (default: {DEFAULT_REPEAT})")
    p.add_argument("--dir", metavar="D",
                   help="where to put the files (a fresh subdirectory; default: the temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the files afterwards")
    _progress_flag(p)


def _run_perf(args: argparse.Namespace, run: Callable[..., dict[str, Any]]) -> int:
    from .perf.local import format_table

    report = run(args.records, small_records=args.small_records, batch=args.batch,
                 repeat=args.repeat, directory=args.dir, keep=args.keep, progress=args.progress)
    out = _out()
    if args.json:
        print(json.dumps(report, indent=2), file=out)
    else:
        print(format_table(report), file=out)
    return 0


@PERF.command("append", "Log.append_batch vs plain buffered file writes and SQLite (WAL)", _perf_args)
def cmd_perf_append(args: argparse.Namespace) -> int:
    """Benchmark appends (see tiered_log.perf.local); exit 0 whether or not targets are met."""
    from .perf.local import run_append

    return _run_perf(args, run_append)


@PERF.command("read", "sequential Log.read_range vs SQLite pages (and a plain file)", _perf_args)
def cmd_perf_read(args: argparse.Namespace) -> int:
    """Benchmark sequential reads (see tiered_log.perf.local)."""
    from .perf.local import run_read

    return _run_perf(args, run_read)


# ---- entry point ------------------------------------------------------------------------------


COMMAND_MODULES: tuple[str, ...] = (
    "tiered_log.perf.http", "tiered_log.perf.remote_cli", "tiered_log.perf.spark",
)
"""Modules that register more commands on :data:`COMMANDS` / :data:`PERF` when imported."""

_installed = False


def _install_command_modules() -> None:
    """Import :data:`COMMAND_MODULES` and register the service commands, once."""
    global _installed
    if _installed:
        return
    _installed = True
    import importlib

    from .service.cli_commands import COMMANDS as SERVICE_COMMANDS
    from .service.cli_commands import GROUP_HELP

    for spec in SERVICE_COMMANDS:
        group = COMMANDS
        for part in spec.path[:-1]:
            found = group.entries.get(part)
            group = found if isinstance(found, CommandGroup) else group.group(
                part, GROUP_HELP.get(part, part))
        group.command(spec.path[-1], spec.help, spec.add_arguments)(spec.run)
    for name in COMMAND_MODULES:
        importlib.import_module(name)


def build_parser() -> argparse.ArgumentParser:
    """The full ``tiered-log`` parser, from the registry."""
    _install_command_modules()
    parser = _Parser(prog=PROG, description="A segmented, append-only commit log: tools.")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    COMMANDS.install(parser)
    return parser


def _error(message: str) -> None:
    """The one line every failure prints."""
    text = " ".join(message.split()) or "unknown error"
    with contextlib.suppress(OSError, ValueError):
        print(f"{PROG}: error: {text}", file=sys.stderr, flush=True)


def _os_error_message(exc: OSError) -> str:
    if exc.strerror and exc.filename is not None:
        return f"{exc.strerror}: {exc.filename}"
    return exc.strerror or str(exc)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``tiered-log`` with ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(errors="backslashreplace")
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        return int(args._run(args))
    except UsageError as exc:
        _error(str(exc))
        return 2
    except SystemExit as exc:  # --help, --version
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except KeyboardInterrupt:
        _error("interrupted")
        return 130
    except BrokenPipeError:
        # The reader went away (``tiered-log read DIR | head``): stop quietly.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 141
    except TieredLogError as exc:
        _error(exc.message)
        return 1
    except OSError as exc:
        _error(_os_error_message(exc))
        return 1
    except Exception as exc:
        if os.environ.get("TIERED_LOG_DEBUG"):
            raise
        _error(f"unexpected {type(exc).__name__}: {exc} (set TIERED_LOG_DEBUG=1 for the traceback)")
        return 1


if __name__ == "__main__":
    # ``python -m tiered_log.cli`` runs this file as ``__main__``, a second copy of the
    # module; COMMAND_MODULES register on ``tiered_log.cli``'s registry, so run that one's.
    from tiered_log.cli import main as _main

    raise SystemExit(_main())
