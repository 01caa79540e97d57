"""The local log at the command line: ``tiered-log append``, ``read`` and ``demo``.

::

    tiered-log append DIR [--key K] [--file F] [--segment-bytes N]   lines -> records
    tiered-log read DIR [--offset N | --timestamp T] [--max-records N] [--json]
    tiered-log demo DIR            append, read back, look up, verify; print a summary

``append`` and ``demo`` open the log with :meth:`Log.open <tiered_log.local.log.Log.open>`
like any client (which recovers it after a crash); ``read``, as ``dump``, ``verify`` and
``describe`` (:mod:`.inspect`), looks at a log without touching it (also one a running
server holds). Records go to stdout, notes and progress to stderr. One command
per process; not thread-safe.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING

from ..errors import InvalidArgumentError, OffsetOutOfRangeError, TieredLogError
from ..format import naming
from .registry import (
    PROG,
    CommandGroup,
    UsageError,
    non_negative_int,
    note,
    positive_int,
    progress_flag,
    timestamp_ms,
)

if TYPE_CHECKING:
    from ..local.log import LogConfig

COMMANDS = CommandGroup()
"""``append``, ``read``, ``demo``."""

APPEND_BATCH = 1000
"""Records per ``append_batch`` when appending lines."""
READ_PAGE = 1000
"""Records per ``read_range`` when printing records."""


def _log_config(segment_bytes: int | None) -> LogConfig:
    """A LogConfig from command-line values; a bad value is a usage error."""
    from ..local.log import LogConfig

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
        raise InvalidArgumentError(
            f"{directory} holds no log (no *{naming.LOG_SUFFIX} segment files)"
        )
    return path


def input_lines(stream: IO[bytes]) -> Iterator[bytes]:
    """Lines of a binary stream without their line ending (``\\n`` or ``\\r\\n``)."""
    for line in stream:
        if line.endswith(b"\n"):
            line = line[:-1]
            if line.endswith(b"\r"):
                line = line[:-1]
        yield line


APPEND_IS_LOCAL = (
    "append writes a log directory on this machine, it does not send to a service; "
    "to produce to a service's topic, use: {prog} produce {topic}"
)


def _append_args(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Append each line of stdin (or --file) as one record to the local log in directory "
        "DIR, created if missing. This writes files on this machine and talks to no "
        f"service: to send records to a topic of a running service, use '{PROG} produce "
        "TOPIC'."
    )
    p.add_argument(
        "directory",
        metavar="DIR",
        help="local log directory (created if needed; not a service topic)",
    )
    p.add_argument("--key", help="key of every record (UTF-8); default: no key")
    p.add_argument("--file", metavar="F", help="read lines from F instead of stdin ('-' = stdin)")
    p.add_argument(
        "--segment-bytes",
        type=positive_int,
        metavar="N",
        help="roll segments at N bytes (default: 64 MiB)",
    )
    p.add_argument(
        "--batch",
        type=positive_int,
        default=APPEND_BATCH,
        metavar="N",
        help=f"records per append_batch (default: {APPEND_BATCH})",
    )
    progress_flag(p)


@COMMANDS.command(
    "append",
    "append lines of stdin (or --file) as records to a local log directory (not a topic: "
    "see produce)",
    _append_args,
)
def cmd_append(args: argparse.Namespace) -> int:
    """Append lines as records in batches, flush (fsync), print the offsets appended.

    Empty lines are skipped (a blank line is not taken for a record) and counted on stderr. When
    DIR did not exist, one line on stderr says it was created and that ``produce`` is the
    command for a service's topic (a Kafka user may take ``append orders`` for one).
    """
    from ..format.records import ProducerRecord
    from ..local.log import Log
    from ..perf.common import Progress

    config = _log_config(args.segment_bytes)
    key = None if args.key is None else args.key.encode("utf-8")
    from_file = args.file is not None and args.file != "-"
    stream: IO[bytes] = open(args.file, "rb") if from_file else sys.stdin.buffer  # noqa: SIM115
    total = os.fstat(stream.fileno()).st_size if from_file else None
    created = not os.path.lexists(args.directory)
    first = last = None
    count = skipped = 0
    try:
        with (
            Log.open(args.directory, config) as log,
            Progress(
                total, "append", unit="bytes" if from_file else "records", enabled=args.progress
            ) as progress,
        ):
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
    if created:  # after success: an error stays one line
        name = Path(args.directory).name or str(args.directory)
        topic = APPEND_IS_LOCAL.format(prog=PROG, topic=name)
        note(f"created the local log directory {args.directory} ({topic})")
    if skipped:
        note(
            f"skipped {skipped} empty line{'s' if skipped != 1 else ''} "
            "(a blank line is not taken for a record)"
        )
    out = sys.stdout
    if count:
        print(
            f"appended {count} record{'s' if count != 1 else ''} at offsets {first}..{last} "
            f"(log offsets [{bounds.log_start_offset}, {bounds.next_offset}))",
            file=out,
        )
    else:
        print(
            f"appended 0 records (log offsets [{bounds.log_start_offset}, {bounds.next_offset}))",
            file=out,
        )
    return 0


def _read_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("directory", metavar="DIR", help="log directory")
    start = p.add_mutually_exclusive_group()
    start.add_argument(
        "--offset",
        type=non_negative_int,
        metavar="N",
        help="first offset to print (default: the log start)",
    )
    start.add_argument(
        "--timestamp",
        type=timestamp_ms,
        metavar="T",
        help="start at the first record with timestamp >= T (ms since the epoch, or ISO 8601)",
    )
    p.add_argument("--max-records", type=positive_int, metavar="N", help="print at most N records")
    p.add_argument(
        "--json", action="store_true", help="one JSON object per line (the HTTP API's record shape)"
    )


@COMMANDS.command(
    "read",
    "print records: offset, timestamp, key, value separated by tabs (or --json lines)",
    _read_args,
)
def cmd_read(args: argparse.Namespace) -> int:
    """Print records from an offset (or timestamp) to the end (or ``--max-records``).

    Text lines are ``offset<TAB>timestamp<TAB>key<TAB>value`` (see :func:`text_field`: a
    null key or value is an empty field, an empty one ``base64:``; ``--json`` says
    ``null``).
    Opens the log read-only (:meth:`Log.open_read_only`: no lock, nothing written, a torn
    tail left as it is), so a running server's log can be read: a note on stderr then
    says the records are a snapshot of a live directory, and offsets its retention
    deletes during the read are skipped with a note.
    """
    from ..local.log import Log, held_by

    path = _existing_log_dir(args.directory)
    out = sys.stdout
    holder = held_by(path)
    if holder is not None:
        note(live_note(str(path), holder))
    with Log.open_read_only(path) as log:
        end = log.next_offset
        if args.timestamp is not None:
            found = log.offset_for_timestamp(args.timestamp)
            if found is None:
                note(f"no record has a timestamp at or after {args.timestamp}")
                return 0
            offset = found
        else:
            offset = log.log_start_offset if args.offset is None else args.offset
        start = log.log_start_offset
        if not start <= offset <= end:
            raise OffsetOutOfRangeError(
                f"offset {offset} is not in the log [{start}, {end})",
                log_start=start,
                next_offset=end,
            )
        from ..format.record_json import record_to_json  # the HTTP API's JSON shape
        from ..tools.dump import text_field

        limit = args.max_records if args.max_records is not None else 1 << 62
        printed = 0
        while offset < end and printed < limit:
            try:
                recs = log.read_range(offset, min(READ_PAGE, limit - printed), 16 << 20)
            except OffsetOutOfRangeError:
                # The owner's retention deleted segments after this snapshot was taken
                # (the oldest first): go on at the first one still there.
                later = [
                    s.base_offset
                    for s in log.segments()
                    if s.base_offset > offset and s.store_path.exists()
                ]
                resume = later[0] if later else end
                note(
                    f"offsets [{offset}, {resume}) were deleted from {path} while this read "
                    f"ran (the running log's retention): skipped"
                    + (f", reading on at {resume}" if resume < end else "")
                )
                offset = resume
                continue
            if not recs:
                break
            lines = []
            for r in recs:
                if args.json:
                    lines.append(json.dumps(record_to_json(r), ensure_ascii=False))
                else:
                    lines.append(
                        f"{r.offset}\t{r.timestamp}\t{text_field(r.key)}\t{text_field(r.value)}"
                    )
            out.write("\n".join(lines) + "\n")
            printed += len(recs)
            offset = recs[-1].offset + 1
    return 0


def live_note(where: str, pid: int) -> str:
    """The line that says ``where`` is open in process ``pid`` (a running server)."""
    return (
        f"{where} is open by process {pid} (a running server?): this is a snapshot of a "
        "live directory, as its files were when read"
    )


def _demo_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("directory", metavar="DIR", help="log directory (created if needed)")
    p.add_argument(
        "--records",
        type=positive_int,
        default=10_000,
        metavar="N",
        help="records to append (default: 10000)",
    )
    p.add_argument(
        "--segment-bytes",
        type=positive_int,
        default=256 * 1024,
        metavar="N",
        help="segment size, small so that the demo rolls a few (default: 262144)",
    )


@COMMANDS.command("demo", "append records, read them back, look one up by time, verify", _demo_args)
def cmd_demo(args: argparse.Namespace) -> int:
    """The library end to end on a local directory, with a short summary.

    Appends ``--records`` keyed records with a header and increasing timestamps (after
    whatever the log already holds), reads them back and compares, finds one by
    timestamp, closes the log and verifies the directory read-only.
    """
    from ..format.records import ProducerRecord
    from ..local.log import Log, now_ms
    from ..tools.verify import verify_log

    config = _log_config(args.segment_bytes)
    directory = Path(args.directory)
    n = args.records
    out = sys.stdout
    with Log.open(directory, config) as log:
        ts0 = max([now_ms(), *(s.max_timestamp + 1 for s in log.segments())])
        records = [
            ProducerRecord(
                json.dumps(
                    {"event": i, "user": f"user-{i % 10}", "message": f"hello #{i}"}
                ).encode(),
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
                first + i,
                want.key,
                want.value,
                want.headers,
                want.timestamp,
            ):
                raise TieredLogError(
                    f"demo: record {first + i} read back differs from what was appended"
                )
        middle = n // 2
        found = log.offset_for_timestamp(ts0 + middle)
        if found != first + middle:
            raise TieredLogError(
                f"demo: timestamp lookup found offset {found}, expected {first + middle}"
            )
        segments = log.segments()
        bounds = log.bounds()
        size = log.size_bytes
    report = verify_log(directory)
    print(f"tiered-log demo: log in {directory}", file=out)
    print(
        f"  appended {n:,} records (offsets {first}..{first + n - 1}) in {t_append:.3f} s "
        f"({n / max(t_append, 1e-9):,.0f} records/s), flushed",
        file=out,
    )
    print(
        f"  read them back and compared: all {len(got):,} match ({t_read:.3f} s, "
        f"{n / max(t_read, 1e-9):,.0f} records/s)",
        file=out,
    )
    print(f"  first record at or after timestamp {ts0 + middle}: offset {found}", file=out)
    print(
        f"  log: offsets [{bounds.log_start_offset}, {bounds.next_offset}), {len(segments)} "
        f"segments, {size:,} bytes",
        file=out,
    )
    if report.ok:
        print(f"  verify: clean ({report.records:,} records checked)", file=out)
    else:
        print(f"  verify: {len(report.errors)} problems", file=out)
        for p in report.errors:
            print(f"    {p}", file=out)
    print(
        f"  next: {PROG} read {directory} --max-records 5 | {PROG} dump {directory} | "
        f"{PROG} verify {directory}",
        file=out,
    )
    return 0 if report.ok else 1


__all__ = [
    "APPEND_BATCH",
    "COMMANDS",
    "READ_PAGE",
    "cmd_append",
    "cmd_demo",
    "cmd_read",
    "input_lines",
    "live_note",
]
