"""``tiered-log migrate DIR``: rewrite a stopped service's data directory, written in
tiered_log's former batch format, as Kafka record batches.

The work is :func:`tiered_log.local.migrate.migrate_log`, once per topic-partition log
of the data directory (or on DIR itself when it is one log directory). Progress goes to
stderr (a line per segment while it runs, with ``--progress``), a line per log and a
summary to stdout. A running service (the data directory's lock held), a directory that
is neither a data directory nor a log directory, or damage in a former segment is one
line on stderr and exit status 1; the logs migrated before it stay migrated, and running
the command again goes on where it stopped (segments in the new format are skipped).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

from ..format import naming
from .registry import CommandGroup, counted, progress_flag

COMMANDS = CommandGroup()
"""``migrate``."""


def _migrate_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "directory",
        metavar="DIR",
        help="the service's data directory (the one holding topics/), or one log directory",
    )
    progress_flag(p)


def _size(n: int) -> str:
    """Bytes as the summary lines write them (``2,954 bytes``, ``12.3 KiB``, ``1.5 MiB``)."""
    if n < 10_000:
        return counted(n, "byte")
    if n < 10 << 20:
        return f"{n / 1024:,.1f} KiB"
    return f"{n / (1 << 20):,.1f} MiB"


def _shipped(log_dir: Path) -> bool:
    """Whether the log's remote tier recorded a copy (its journal is not empty)."""
    try:
        return (log_dir / naming.REMOTE_DIR / naming.COPY_JOURNAL_FILE).stat().st_size > 0
    except OSError:
        return False


@COMMANDS.command(
    "migrate",
    "rewrite a stopped service's data directory from tiered_log's former batch format "
    "into Kafka record batches (same offsets, timestamps, keys, values, headers)",
    _migrate_args,
)
def cmd_migrate(args: argparse.Namespace) -> int:
    """Migrate every log of DIR (see the module docstring); exit status 0 when done."""
    from ..local.migrate import (
        SegmentMigration,
        find_logs,
        legacy_segments,
        lock_data_dir,
        migrate_log,
    )
    from ..perf.common import Progress

    root = Path(args.directory)
    logs = find_logs(root)
    single = logs == [root]
    out = sys.stdout

    def where(d: Path) -> str:
        try:
            return str(d.relative_to(root)) or "."
        except ValueError:
            return str(d)

    with lock_data_dir(root) if not single else contextlib.nullcontext():
        todo = {d: legacy_segments(d) for d in logs}
        total = sum(len(naming.list_segment_bases(d)) for d in logs)
        migrated = records = old = new = torn = 0
        with Progress(total, "migrate", unit="segments", enabled=args.progress) as progress:

            def on_segment(_s: SegmentMigration) -> None:
                progress.advance()

            for d in logs:
                if not todo[d]:
                    progress.advance(len(naming.list_segment_bases(d)))
                    print(f"{where(d)}: already in the Kafka format", file=out, flush=True)
                    continue
                report = migrate_log(d, on_segment=on_segment)
                done = report.migrated
                migrated += len(done)
                records += report.records
                old += report.old_bytes
                new += report.new_bytes
                torn += report.torn_bytes
                line = (
                    f"{where(d)}: {counted(len(done), 'segment')} rewritten, "
                    f"{counted(report.records, 'record')}, {_size(report.old_bytes)} -> "
                    f"{_size(report.new_bytes)}"
                )
                if report.torn_bytes:
                    line += f" (a torn tail of {counted(report.torn_bytes, 'byte')} left out)"
                print(line, file=out, flush=True)
    remote = [d for d in logs if _shipped(d)]
    print(
        f"migrated {counted(len(logs), 'log')}: {counted(migrated, 'segment')} and "
        f"{counted(records, 'record')} rewritten as Kafka record batches "
        f"({_size(old)} -> {_size(new)})"
        + (f"; {counted(torn, 'byte')} of torn tails left out" if torn else ""),
        file=out,
    )
    if remote and migrated:
        print(
            f"note: {counted(len(remote), 'log')} shipped segments to a remote tier: only "
            "local segments were rewritten, the bucket's copies are as they were",
            file=out,
        )
    return 0


__all__ = ["COMMANDS", "cmd_migrate"]
