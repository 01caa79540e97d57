"""Command-line commands of the remote tier: its benchmarks and ``tiered-log describe``.

Registered on the ``tiered-log`` command registry when :mod:`tiered_log.cli` imports this
module (it is listed in ``COMMAND_MODULES``)::

    tiered-log perf ship [--json] [--total-mib N] [--segment-mib N] [--repeat R] [--endpoint URL]
    tiered-log perf remote-read [--json] [--total-mib N] [--segment-mib N] [--repeat R] [--endpoint URL]
    tiered-log perf produce-latency [--json] [--appends N] [--backlog-mib N]
                                    [--upload-bytes-per-sec N] [--fetch-bytes-per-sec N]
                                    [--copies-in-flight N] [--endpoint URL]
    tiered-log describe DIR [--json] [--remote URL] [--endpoint-url URL] [--region R] [--log-id ID]

The benchmarks (:mod:`tiered_log.perf.remote`) start moto's S3 server on 127.0.0.1 unless
``--endpoint`` names one; progress goes to stderr, the report to stdout (one JSON object
with ``--json``, ``key: value`` lines otherwise).

``describe`` opens every log under DIR (DIR itself if it is a log directory, else the log
directories below it, e.g. a service's data directory) without starting a shipper and
prints, per log: bounds, local and remote segments with offset ranges and sizes, copy
lag in bytes and segments, and the chunk cache (size on disk; hit rate as counted by
this process, so ``null`` until it reads). The remote tier is the one ``--remote`` names,
else the one the log recorded when it was last opened with a remote tier
(``remote/location.json``); a log with remote state and neither is an error. A log held
open by another process (a running server) cannot be described: its ``/metrics`` show
the same figures.

Not thread-safe (a command runs once per process).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ..cli import COMMANDS, PERF, UsageError, positive_int
from ..format import naming

# ---- perf ------------------------------------------------------------------------------


def _endpoint_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object instead of lines")
    p.add_argument("--endpoint", metavar="URL",
                   help="S3 endpoint to use (credentials from the standard chain; default: "
                        "start moto's server on 127.0.0.1)")


def _size_args(p: argparse.ArgumentParser) -> None:
    _endpoint_arg(p)
    p.add_argument("--total-mib", type=positive_int, default=64, metavar="N",
                   help="MiB of 1 KiB records to ship (default: 64)")
    p.add_argument("--segment-mib", type=positive_int, default=8, metavar="N",
                   help="segment size in MiB (default: 8)")
    p.add_argument("--repeat", type=positive_int, default=3, metavar="R",
                   help="rounds of baseline and ours; the best of each counts (default: 3)")


def _latency_args(p: argparse.ArgumentParser) -> None:
    _endpoint_arg(p)
    p.add_argument("--appends", type=positive_int, default=2000, metavar="N",
                   help="acknowledged single-record appends per phase (default: 2000)")
    p.add_argument("--backlog-mib", type=positive_int, default=32, metavar="N",
                   help="MiB appended before the shipping phase: the shipper's backlog and "
                        "the catch-up reader's archive (default: 32)")
    p.add_argument("--upload-bytes-per-sec", type=positive_int, default=None, metavar="N",
                   help="upload rate limit of the log (remote_upload_bytes_per_sec) "
                        "(default: none)")
    p.add_argument("--fetch-bytes-per-sec", type=positive_int, default=None, metavar="N",
                   help="remote fetch quota of the log (remote_fetch_bytes_per_sec) "
                        "(default: none)")
    p.add_argument("--copies-in-flight", type=positive_int, default=2, metavar="N",
                   help="segment copies under way at once (remote_copies_in_flight) "
                        "(default: 2)")


def format_lines(report: dict[str, Any], indent: str = "") -> str:
    """A report as ``key: value`` lines, nested dicts indented."""
    out = []
    for k, v in report.items():
        if isinstance(v, dict):
            out.append(f"{indent}{k}:")
            out.append(format_lines(v, indent + "  "))
        else:
            out.append(f"{indent}{k}: {v}")
    return "\n".join(out)


def _print(report: dict[str, Any], as_json: bool) -> int:
    print(json.dumps(report, indent=2) if as_json else format_lines(report))
    return 0


@PERF.command("ship", "segment shipping to S3 vs plain boto3 uploads of the same files",
              _size_args)
def cmd_perf_ship(args: argparse.Namespace) -> int:
    """``tiered-log perf ship``; exit 0 whether or not the target is met."""
    from .remote import run_ship

    return _print(run_ship(args.total_mib, args.segment_mib, args.endpoint, args.repeat), args.json)


@PERF.command("remote-read", "a consumer reading the archive from S3 vs plain boto3 "
              "downloads", _size_args)
def cmd_perf_remote_read(args: argparse.Namespace) -> int:
    """``tiered-log perf remote-read``; exit 0 whether or not the target is met."""
    from .remote import run_remote_read

    return _print(run_remote_read(args.total_mib, args.segment_mib, args.endpoint,
                                   args.repeat), args.json)


@PERF.command("produce-latency", "p50/p99 of acknowledged appends: tiering off, shipping, "
              "shipping + catch-up reader", _latency_args)
def cmd_perf_produce_latency(args: argparse.Namespace) -> int:
    """``tiered-log perf produce-latency``; exit 0 whether or not the targets are met."""
    from .remote import run_produce_latency

    return _print(run_produce_latency(args.appends, args.endpoint, args.backlog_mib,
                                      upload_bytes_per_sec=args.upload_bytes_per_sec,
                                      fetch_bytes_per_sec=args.fetch_bytes_per_sec,
                                      copies_in_flight=args.copies_in_flight), args.json)


# ---- describe ------------------------------------------------------------------------------

_SKIP_DIRS = frozenset({naming.REMOTE_DIR, "trash"})


def is_log_dir(path: Path) -> bool:
    """Whether ``path`` holds a log: a segment store file, or remote-tier state."""
    if (path / naming.REMOTE_DIR / "segments.jsonl").is_file():
        return True
    try:
        return any(naming.parse_offset_name(p.name, naming.LOG_SUFFIX) is not None
                   for p in path.iterdir())
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
    p.add_argument("dir", metavar="DIR", help="a log directory, or a directory of logs "
                   "(e.g. a service's data directory)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument("--remote", metavar="URL",
                   help="the remote tier (s3://bucket/prefix, file:///dir); default: the one "
                        "each log recorded")
    p.add_argument("--endpoint-url", metavar="URL", help="S3 endpoint (MinIO, moto, ...)")
    p.add_argument("--region", help="S3 region")
    p.add_argument("--log-id", help="the log's id when DIR is one log that did not record it "
                   "(default: recorded, else the directory name)")


def describe_logs(root: Path, remote: str | None = None, endpoint_url: str | None = None,
                  region: str | None = None, log_id: str | None = None) -> list[dict[str, Any]]:
    """``TieredLog.describe()`` of every log under ``root`` plus its ``directory``.

    UsageError if there is no log, or a log has remote state but no remote location.
    Storage objects are shared between logs on the same remote and closed at the end.
    """
    from ..remote.storage import RemoteStorage, open_storage
    from ..remote.tier import read_location
    from ..tiered import TieredLog

    if not root.is_dir():
        raise UsageError(f"{root} is not a directory")
    logs = find_logs(root)
    if not logs:
        raise UsageError(f"no log directories in {root}")
    if log_id is not None and len(logs) > 1:
        raise UsageError(f"--log-id needs DIR to be one log; {root} holds {len(logs)}")
    stores: dict[tuple[str, str | None, str | None], RemoteStorage] = {}
    out: list[dict[str, Any]] = []
    try:
        for d in logs:
            loc = read_location(d)
            url, ep, rg = remote, endpoint_url, region
            if url is None and loc is not None:
                url = loc["url"]
                ep = ep or loc.get("endpoint_url")
                rg = rg or loc.get("region")
            if url is None and (d / naming.REMOTE_DIR).is_dir():
                raise UsageError(f"log {d} has a remote tier but its location is not recorded; "
                                 "give it with --remote URL (and --endpoint-url for S3)")
            storage = None
            if url is not None:
                key = (url, ep, rg)
                if key not in stores:
                    stores[key] = open_storage(url, endpoint_url=ep, region=rg)
                storage = stores[key]
            lid = log_id or (loc or {}).get("log_id") or d.name
            tlog = TieredLog(d, log_id=lid, storage=storage, start_shipper=False, rebuild=False)
            try:
                desc = tlog.describe()
            finally:
                tlog.close()
            if not desc.get("cache_hits") and not desc.get("cache_misses"):
                desc["cache_hit_rate"] = None  # nothing read by this process yet
            out.append({"directory": str(d), **desc})
    finally:
        for st in stores.values():
            st.close()
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
        lines.append(f"  offsets: log start {_n(b['log_start_offset'])}, local start "
                     f"{_n(b['local_start_offset'])}, remote end {_n(b['remote_end_offset'])}, "
                     f"next {_n(b['next_offset'])}")
        rsegs = d.get("remote_segments", [])
        lines.append(f"  local: {len(d['local_segments'])} segments, {_n(d['local_bytes'])} bytes;"
                     f" remote: {len(rsegs)} segments, {_n(d.get('remote_bytes', 0))} bytes")
        lines.append(f"  copy lag: {d['copy_lag_segments']} segments, "
                     f"{_n(d['copy_lag_bytes'])} bytes")
        if d["remote_enabled"]:
            rate = d.get("cache_hit_rate")
            rate_s = "n/a (no reads by this process)" if rate is None else f"{rate:.1%}"
            lines.append(f"  cache: {_n(d.get('cache_bytes', 0))} bytes, hit rate {rate_s}")
        lines.append(f"  {'tier':<7}{'base offset':>14}{'next offset':>14}{'bytes':>14}  state")
        damaged = {x["id"]: x["problem"] for x in d.get("remote_damage", [])}
        for s in rsegs:
            state = f"UNREADABLE: {damaged[s['id']]}" if s["id"] in damaged else s["state"]
            lines.append(f"  {'remote':<7}{s['base_offset']:>14,}{s['next_offset']:>14,}"
                         f"{s['size']:>14,}  {state}")
        for s in d["local_segments"]:
            state = "active" if not s["sealed"] else ("copied" if s["copied"] else "not copied")
            lines.append(f"  {'local':<7}{s['base_offset']:>14,}{s['next_offset']:>14,}"
                         f"{s['size']:>14,}  {state}")
    return "\n".join(lines)


@COMMANDS.command("describe", "per log: local and remote segments, copy lag, cache",
                  _describe_args)
def cmd_describe(args: argparse.Namespace) -> int:
    """``tiered-log describe DIR``: see the module docstring."""
    logs = describe_logs(Path(args.dir), args.remote, args.endpoint_url, args.region,
                         args.log_id)
    if args.json:
        json.dump({"logs": logs}, sys.stdout, indent=2)
        print()
    else:
        print(format_describe(logs))
    return 0


__all__ = ["cmd_describe", "describe_logs", "find_logs", "format_describe", "format_lines",
           "is_log_dir"]
