"""``tiered-log perf KIND``: the benchmarks at the command line.

::

    tiered-log perf append|read [--json] [--records N] [--small-records N] [--batch N]
                                [--repeat R] [--dir D] [--keep]
    tiered-log perf http-produce|http-fetch [--json] [--records N] [--batch N] [--repeat R]
                                [--durable] [--dir D] [--keep] [--single N (produce)]
    tiered-log perf ship|remote-read [--json] [--total-mib N] [--segment-mib N] [--repeat R]
                                [--endpoint URL]
    tiered-log perf produce-latency [--json] [--appends N] [--backlog-mib N] [--rounds R] [--bucket-cpu C]
                                [--upload-bytes-per-sec N] [--fetch-bytes-per-sec N]
                                [--copies-in-flight N] [--endpoint URL] [--replicated]
    tiered-log perf failover [--json] [--kills N] [--lease-ttl S] [--nodes N] [--dir D] [--keep]
    tiered-log perf replicated-latency [--json] [--records N] [--value-bytes B] [--rounds R]
                                [--dir D] [--keep]
    tiered-log perf rebuild [--json] [--archive-mb N,N] [--tail-mb N] [--record-bytes B]
                                [--request-kib K] [--load-rate R] [--load-records N]
                                [--before-s S] [--wipes N] [--lease-ttl S] [--dir D] [--keep]
    tiered-log perf spark-scan [--json] [--records N] [--partitions P] [--segment-bytes B]
                                [--repeat R] [--dir D] [--keep]
    tiered-log perf archive [--json] [--total-mib N] [--segment-mib N] [--repeat R]
                                [--endpoint URL] [--dir D] [--keep]
    tiered-log perf kafka-codec [--json] [--total-kib N] [--record-bytes B]
                                [--batch-records N] [--compression C] [--rounds R]
    tiered-log perf kafka [--json] [--mib N] [--repeat R] [--dir D] [--keep]

Each command parses its arguments and runs one benchmark of :mod:`tiered_log.perf`
(``.local``, ``.http``, ``.remote``, ``.archive``, ``.cluster``, ``.rebuild``,
``.spark``, ``.kafka_codec``, ``.kafka``; imported
only when it runs), which measures its baseline in the same run. The remote ones start
moto's S3 server on 127.0.0.1 unless ``--endpoint`` names one; the cluster ones
(``.cluster``, ``.rebuild``) start etcd and ``tiered-log serve`` processes on loopback
(:class:`~tiered_log.cluster.dev.DevCluster`).
Progress goes to stderr, the report to stdout (one JSON object with ``--json``, a table
or ``key: value`` lines otherwise); the exit status is 0 whether or not a target is met.
One benchmark per process; not thread-safe.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from ..perf.common import (
    DEFAULT_BATCH,
    DEFAULT_LATENCY_ROUNDS,
    DEFAULT_RECORDS,
    DEFAULT_REPEAT,
)
from ..perf.http import DEFAULT_HTTP_RECORDS, DEFAULT_SINGLE
from ..perf.spark import DEFAULT_SPARK_RECORDS
from .registry import CommandGroup, UsageError, positive_int, progress_flag

COMMANDS = CommandGroup()
"""The ``perf`` group."""

PERF = COMMANDS.group("perf", "benchmarks, each measuring its baseline in the same run")
"""``tiered-log perf KIND``: benchmarks, in the order ``tiered-log perf --help`` lists them."""


# ---- the local log: append, read -------------------------------------------------------------


def _perf_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument(
        "--records",
        type=positive_int,
        default=DEFAULT_RECORDS,
        metavar="N",
        help=f"1 KiB records per run (default: {DEFAULT_RECORDS})",
    )
    p.add_argument(
        "--small-records",
        type=positive_int,
        metavar="N",
        help="100-byte records per run (default: the same as --records)",
    )
    p.add_argument(
        "--batch",
        type=positive_int,
        default=DEFAULT_BATCH,
        metavar="N",
        help=f"records per batch (default: {DEFAULT_BATCH})",
    )
    p.add_argument(
        "--repeat",
        type=positive_int,
        default=DEFAULT_REPEAT,
        metavar="R",
        help=f"runs per system; the best counts (default: {DEFAULT_REPEAT})",
    )
    p.add_argument(
        "--dir",
        metavar="D",
        help="where to put the files (a fresh subdirectory; default: the temp dir)",
    )
    p.add_argument("--keep", action="store_true", help="keep the files afterwards")
    progress_flag(p)


def _run_perf(args: argparse.Namespace, run: Callable[..., dict[str, Any]]) -> int:
    from ..perf.local import format_table

    report = run(
        args.records,
        small_records=args.small_records,
        batch=args.batch,
        repeat=args.repeat,
        directory=args.dir,
        keep=args.keep,
        progress=args.progress,
    )
    out = sys.stdout
    if args.json:
        print(json.dumps(report, indent=2), file=out)
    else:
        print(format_table(report), file=out)
    return 0


@PERF.command(
    "append", "Log.append_batch vs plain buffered file writes and SQLite (WAL)", _perf_args
)
def cmd_perf_append(args: argparse.Namespace) -> int:
    """Benchmark appends (see tiered_log.perf.local); exit 0 whether or not targets are met."""
    from ..perf.local import run_append

    return _run_perf(args, run_append)


@PERF.command("read", "sequential Log.read_range vs SQLite pages (and a plain file)", _perf_args)
def cmd_perf_read(args: argparse.Namespace) -> int:
    """Benchmark sequential reads (see tiered_log.perf.local)."""
    from ..perf.local import run_read

    return _run_perf(args, run_read)


# ---- the service over HTTP: http-produce, http-fetch --------------------------------------


def _http_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument(
        "--records",
        type=positive_int,
        default=DEFAULT_HTTP_RECORDS,
        metavar="N",
        help=f"1 KiB records per run (default: {DEFAULT_HTTP_RECORDS})",
    )
    p.add_argument(
        "--batch",
        type=positive_int,
        default=DEFAULT_BATCH,
        metavar="N",
        help=f"records per produce batch / fetch page (default: {DEFAULT_BATCH})",
    )
    p.add_argument(
        "--repeat",
        type=positive_int,
        default=DEFAULT_REPEAT,
        metavar="R",
        help=f"runs per system; the best counts (default: {DEFAULT_REPEAT})",
    )
    p.add_argument(
        "--durable", action="store_true", help="flush_messages=1 on both sides (an fsync per batch)"
    )
    p.add_argument(
        "--dir",
        metavar="D",
        help="where to put the files (a fresh subdirectory; default: the temp dir)",
    )
    p.add_argument("--keep", action="store_true", help="keep the files afterwards")
    progress_flag(p)


def _http_produce_args(p: argparse.ArgumentParser) -> None:
    _http_args(p)
    p.add_argument(
        "--single",
        type=int,
        default=DEFAULT_SINGLE,
        metavar="N",
        help=f"single-record produces for the latency figures (default: {DEFAULT_SINGLE}; 0: skip)",
    )


def _print_table(report: dict[str, Any], as_json: bool) -> int:
    from ..perf.http import format_table

    if as_json:
        print(json.dumps(report, indent=2))
    else:
        print(format_table(report))
    return 0


@PERF.command(
    "http-produce",
    "batched produce over HTTP vs in-process append_batch, and "
    "p99 latency of single-record produce",
    _http_produce_args,
)
def cmd_perf_http_produce(args: argparse.Namespace) -> int:
    """``tiered-log perf http-produce``; exit 0 whether or not the target is met."""
    from ..perf.http import run_http_produce

    if args.single < 0:
        raise UsageError("--single must not be negative")
    report = run_http_produce(
        args.records,
        batch=args.batch,
        repeat=args.repeat,
        single=args.single,
        durable=args.durable,
        directory=args.dir,
        keep=args.keep,
        progress=args.progress,
    )
    return _print_table(report, args.json)


@PERF.command("http-fetch", "binary fetch over HTTP vs in-process read_range", _http_args)
def cmd_perf_http_fetch(args: argparse.Namespace) -> int:
    """``tiered-log perf http-fetch``; exit 0 whether or not the target is met."""
    from ..perf.http import run_http_fetch

    report = run_http_fetch(
        args.records,
        batch=args.batch,
        repeat=args.repeat,
        durable=args.durable,
        directory=args.dir,
        keep=args.keep,
        progress=args.progress,
    )
    return _print_table(report, args.json)


# ---- the remote tier: ship, remote-read, produce-latency ------------------------------------


def _endpoint_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object instead of lines")
    p.add_argument(
        "--endpoint",
        metavar="URL",
        help="S3 endpoint to use (credentials from the standard chain; default: "
        "start moto's server on 127.0.0.1)",
    )


def _size_args(p: argparse.ArgumentParser) -> None:
    _endpoint_arg(p)
    p.add_argument(
        "--total-mib",
        type=positive_int,
        default=64,
        metavar="N",
        help="MiB of 1 KiB records to ship (default: 64)",
    )
    p.add_argument(
        "--segment-mib",
        type=positive_int,
        default=8,
        metavar="N",
        help="segment size in MiB (default: 8)",
    )
    p.add_argument(
        "--repeat",
        type=positive_int,
        default=3,
        metavar="R",
        help="rounds of baseline and ours; the best of each counts (default: 3)",
    )


def _latency_args(p: argparse.ArgumentParser) -> None:
    from ..perf.remote import BUCKET_CPU

    _endpoint_arg(p)
    p.add_argument(
        "--appends",
        type=positive_int,
        default=2000,
        metavar="N",
        help="acknowledged single-record appends per phase (default: 2000)",
    )
    p.add_argument(
        "--backlog-mib",
        type=positive_int,
        default=32,
        metavar="N",
        help="MiB appended before the shipping phase: the shipper's backlog and "
        "the catch-up reader's archive (default: 32)",
    )
    p.add_argument(
        "--upload-bytes-per-sec",
        type=positive_int,
        default=None,
        metavar="N",
        help="upload rate limit of the log (remote_upload_bytes_per_sec) (default: none)",
    )
    p.add_argument(
        "--fetch-bytes-per-sec",
        type=positive_int,
        default=None,
        metavar="N",
        help="remote fetch quota of the log (remote_fetch_bytes_per_sec) (default: none)",
    )
    p.add_argument(
        "--copies-in-flight",
        type=positive_int,
        default=2,
        metavar="N",
        help="segment copies under way at once (remote_copies_in_flight) (default: 2)",
    )
    p.add_argument(
        "--bucket-cpu",
        choices=BUCKET_CPU,
        default="idle",
        help="CPU priority of the moto server standing in for the bucket when there is "
        "no --endpoint: idle (SCHED_IDLE: a real bucket's CPUs are other machines') or "
        "normal (its request handling competes with the log's) (default: idle)",
    )
    p.add_argument(
        "--rounds",
        type=positive_int,
        default=None,
        metavar="R",
        help=f"rounds of the three phases, in turn; the targets judge the median "
        f"of the rounds' p99 ratios (default: {DEFAULT_LATENCY_ROUNDS}; "
        "with --replicated: perf replicated-latency's --rounds)",
    )
    p.add_argument(
        "--replicated",
        action="store_true",
        help="the replicated mode instead: produce over HTTP to a single node, "
        "a 3-node cluster with acks=1 and with acks=all, alternated "
        "(--appends records each; the same as perf replicated-latency)",
    )
    progress_flag(p)


def format_lines(report: dict[str, Any], indent: str = "") -> str:
    """A report as ``key: value`` lines, nested dicts indented (a list of dicts as one
    indented block each, ``key[i]:``)."""
    out = []
    for k, v in report.items():
        if isinstance(v, dict):
            out.append(f"{indent}{k}:")
            out.append(format_lines(v, indent + "  "))
        elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            for i, x in enumerate(v):
                out.append(f"{indent}{k}[{i}]:")
                out.append(format_lines(x, indent + "  "))
        else:
            out.append(f"{indent}{k}: {v}")
    return "\n".join(out)


def _print(report: dict[str, Any], as_json: bool) -> int:
    print(json.dumps(report, indent=2) if as_json else format_lines(report))
    return 0


@PERF.command("ship", "segment shipping to S3 vs plain boto3 uploads of the same files", _size_args)
def cmd_perf_ship(args: argparse.Namespace) -> int:
    """``tiered-log perf ship``; exit 0 whether or not the target is met."""
    from ..perf.remote import run_ship

    return _print(run_ship(args.total_mib, args.segment_mib, args.endpoint, args.repeat), args.json)


@PERF.command(
    "remote-read", "a consumer reading the archive from S3 vs plain boto3 downloads", _size_args
)
def cmd_perf_remote_read(args: argparse.Namespace) -> int:
    """``tiered-log perf remote-read``; exit 0 whether or not the target is met."""
    from ..perf.remote import run_remote_read

    return _print(
        run_remote_read(args.total_mib, args.segment_mib, args.endpoint, args.repeat), args.json
    )


def _archive_args(p: argparse.ArgumentParser) -> None:
    _endpoint_arg(p)
    p.add_argument(
        "--total-mib",
        type=positive_int,
        default=24,
        metavar="N",
        help="MiB of each corpus (JSON lines, random values) to ship (default: 24)",
    )
    p.add_argument(
        "--segment-mib", type=positive_int, default=4, metavar="N", help="segment MiB (default: 4)"
    )
    p.add_argument(
        "--repeat",
        type=positive_int,
        default=3,
        metavar="R",
        help="rounds of plain and compressed+encrypted, taking turns (default: 3)",
    )
    p.add_argument(
        "--dir",
        metavar="D",
        help="where to put the logs (a fresh subdirectory; default: the temp dir)",
    )
    p.add_argument("--keep", action="store_true", help="keep the files afterwards")
    progress_flag(p)


@PERF.command(
    "archive",
    "bucket bytes, shipping, cold reads and scrubs: zstd + encryption vs plain, two corpora",
    _archive_args,
)
def cmd_perf_archive(args: argparse.Namespace) -> int:
    """``tiered-log perf archive``; exit 0 whether or not the targets are met."""
    from ..perf.archive import format_lines as archive_lines
    from ..perf.archive import run_archive

    report = run_archive(
        args.total_mib,
        args.segment_mib,
        args.endpoint,
        args.repeat,
        directory=args.dir,
        keep=args.keep,
        progress=args.progress,
    )
    print(json.dumps(report, indent=2) if args.json else archive_lines(report))
    return 0


@PERF.command(
    "produce-latency",
    "p50/p99 of acknowledged appends: tiering off, shipping, shipping + catch-up reader",
    _latency_args,
)
def cmd_perf_produce_latency(args: argparse.Namespace) -> int:
    """``tiered-log perf produce-latency``; exit 0 whether or not the targets are met.
    ``--replicated``: the replicated mode (:func:`cmd_perf_replicated_latency`'s)."""
    if args.replicated:
        from ..perf.cluster import format_latency, run_replicated_latency

        rounds = {} if args.rounds is None else {"rounds": args.rounds}
        report = run_replicated_latency(args.appends, progress=args.progress, **rounds)
        print(json.dumps(report, indent=2) if args.json else format_latency(report))
        return 0
    from ..perf.remote import run_produce_latency

    return _print(
        run_produce_latency(
            args.appends,
            args.endpoint,
            args.backlog_mib,
            upload_bytes_per_sec=args.upload_bytes_per_sec,
            fetch_bytes_per_sec=args.fetch_bytes_per_sec,
            copies_in_flight=args.copies_in_flight,
            rounds=args.rounds or DEFAULT_LATENCY_ROUNDS,
            bucket_cpu=args.bucket_cpu,
            progress=args.progress,
        ),
        args.json,
    )


# ---- a cluster: failover, replicated-latency ---------------------------------------------------


def _failover_args(p: argparse.ArgumentParser) -> None:
    from ..perf.cluster import DEFAULT_KILLS, DEFAULT_LEASE_TTL_S, DEFAULT_NODES

    p.add_argument("--json", action="store_true", help="print one JSON object instead of lines")
    p.add_argument(
        "--kills",
        type=positive_int,
        default=DEFAULT_KILLS,
        metavar="N",
        help=f"SIGKILLs of the partition's leader (default: {DEFAULT_KILLS})",
    )
    p.add_argument(
        "--lease-ttl",
        type=positive_int,
        default=DEFAULT_LEASE_TTL_S,
        metavar="S",
        help=f"the nodes' membership lease in seconds (cluster_lease_ttl_s; "
        f"default: {DEFAULT_LEASE_TTL_S})",
    )
    p.add_argument(
        "--nodes",
        type=positive_int,
        default=DEFAULT_NODES,
        metavar="N",
        help=f"nodes of the cluster, at least 3 (default: {DEFAULT_NODES})",
    )
    p.add_argument(
        "--tiered",
        action="store_true",
        help="the topic ships 64 KiB segments and keeps 256 KiB locally (default: local "
        "only), so a new leader reads the bucket before it serves reads",
    )
    p.add_argument(
        "--dir",
        metavar="D",
        help="where to put the cluster (a fresh subdirectory; default: the temp dir)",
    )
    p.add_argument("--keep", action="store_true", help="keep the files (node logs) afterwards")
    progress_flag(p)


@PERF.command(
    "failover",
    "SIGKILL a partition's leader under acks=all load: time to the "
    "first acks=all produce on its successor, acknowledged records lost",
    _failover_args,
)
def cmd_perf_failover(args: argparse.Namespace) -> int:
    """``tiered-log perf failover``; exit 0 whether or not the target is met."""
    from ..perf.cluster import format_failover, run_failover

    if args.nodes < 3:
        raise UsageError("--nodes must be at least 3 (the partition has 3 replicas)")
    report = run_failover(
        args.kills,
        lease_ttl_s=args.lease_ttl,
        nodes=args.nodes,
        directory=args.dir,
        keep=args.keep,
        progress=args.progress,
        tiered=args.tiered,
    )
    print(json.dumps(report, indent=2) if args.json else format_failover(report))
    return 0


def _replicated_latency_args(p: argparse.ArgumentParser) -> None:
    from ..perf.cluster import DEFAULT_LATENCY_RECORDS, DEFAULT_ROUNDS, DEFAULT_VALUE_BYTES

    p.add_argument("--json", action="store_true", help="print one JSON object instead of lines")
    p.add_argument(
        "--records",
        type=positive_int,
        default=DEFAULT_LATENCY_RECORDS,
        metavar="N",
        help=f"timed single-record produces per target (default: {DEFAULT_LATENCY_RECORDS})",
    )
    p.add_argument(
        "--value-bytes",
        type=positive_int,
        default=DEFAULT_VALUE_BYTES,
        metavar="B",
        help=f"bytes of each record's value (default: {DEFAULT_VALUE_BYTES})",
    )
    p.add_argument(
        "--rounds",
        type=positive_int,
        default=DEFAULT_ROUNDS,
        metavar="R",
        help=f"turns the three targets take (default: {DEFAULT_ROUNDS})",
    )
    p.add_argument(
        "--dir",
        metavar="D",
        help="where to put the nodes (a fresh subdirectory; default: the temp dir)",
    )
    p.add_argument("--keep", action="store_true", help="keep the files afterwards")
    progress_flag(p)


@PERF.command(
    "replicated-latency",
    "p50/p99 of single-record produce over HTTP: a single "
    "node vs a 3-node cluster with acks=1 and acks=all",
    _replicated_latency_args,
)
def cmd_perf_replicated_latency(args: argparse.Namespace) -> int:
    """``tiered-log perf replicated-latency``; exit 0 (there is no target, only ratios)."""
    from ..perf.cluster import format_latency, run_replicated_latency

    report = run_replicated_latency(
        args.records,
        value_bytes=args.value_bytes,
        rounds=args.rounds,
        directory=args.dir,
        keep=args.keep,
        progress=args.progress,
    )
    print(json.dumps(report, indent=2) if args.json else format_latency(report))
    return 0


def _mb_list(text: str) -> list[int]:
    """argparse type: comma-separated positive integers (``200,2048``)."""
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected sizes like 200,2048, got {text!r}") from None
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError(f"sizes must be at least 1, got {text!r}")
    return out


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {text!r}")
    return v


def _rebuild_args(p: argparse.ArgumentParser) -> None:
    from ..perf import rebuild as rb

    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument(
        "--archive-mb",
        type=_mb_list,
        default=list(rb.DEFAULT_ARCHIVE_MB),
        metavar="N,N",
        help="archive sizes in MiB, one tiered and one untiered run "
        "each (default: " + ",".join(map(str, rb.DEFAULT_ARCHIVE_MB)) + ")",
    )
    p.add_argument(
        "--tail-mb",
        type=positive_int,
        default=rb.DEFAULT_TAIL_MB,
        metavar="N",
        help=f"MiB in the active (unshipped) segment (default: {rb.DEFAULT_TAIL_MB})",
    )
    p.add_argument(
        "--record-bytes",
        type=positive_int,
        default=rb.DEFAULT_RECORD_BYTES,
        metavar="B",
        help=f"value bytes of a fill record (default: {rb.DEFAULT_RECORD_BYTES})",
    )
    p.add_argument(
        "--request-kib",
        type=positive_int,
        default=rb.DEFAULT_REQUEST_KIB,
        metavar="K",
        help=f"KiB of records per fill request (default: {rb.DEFAULT_REQUEST_KIB})",
    )
    p.add_argument(
        "--load-rate",
        type=_positive_float,
        default=rb.DEFAULT_LOAD_RATE,
        metavar="R",
        help=f"the producers' acks=all requests per second (default: {rb.DEFAULT_LOAD_RATE})",
    )
    p.add_argument(
        "--load-records",
        type=positive_int,
        default=rb.DEFAULT_LOAD_RECORDS,
        metavar="N",
        help=f"100-byte records per load request (default: {rb.DEFAULT_LOAD_RECORDS})",
    )
    p.add_argument(
        "--before-s",
        type=_positive_float,
        default=rb.DEFAULT_BEFORE_S,
        metavar="S",
        help=f"seconds of load measured before each wipe (default: {rb.DEFAULT_BEFORE_S:g})",
    )
    p.add_argument(
        "--wipes",
        type=positive_int,
        default=rb.DEFAULT_WIPES,
        metavar="N",
        help=f"wipes (and rebuilds) per case; medians and pooled latencies "
        f"(default: {rb.DEFAULT_WIPES})",
    )
    p.add_argument(
        "--lease-ttl",
        type=positive_int,
        default=rb.DEFAULT_LEASE_TTL_S,
        metavar="S",
        help=f"the nodes' membership lease in seconds (default: {rb.DEFAULT_LEASE_TTL_S})",
    )
    p.add_argument(
        "--segments",
        type=_mb_list,
        metavar="N,N",
        help="instead: archives of this many small segments on an S3 bucket "
        "(moto's server), a follower wiped while producers write at full speed, "
        "then the leader moved (time to rejoin, resets, the new leader's bucket "
        "requests); e.g. 200,2000",
    )
    p.add_argument(
        "--segment-kib",
        type=positive_int,
        default=64,
        metavar="K",
        help="with --segments: KiB per segment (default: 64)",
    )
    p.add_argument(
        "--dir",
        metavar="D",
        help="where to put the cluster (a fresh subdirectory; default: the temp dir)",
    )
    p.add_argument("--keep", action="store_true", help="keep the files (node logs) afterwards")
    p.add_argument(
        "--replication-transport",
        choices=("auto", "http"),
        default="auto",
        help="how followers fetch: auto = the leader's Kafka listener, http = the HTTP "
        "replication route (default: auto)",
    )
    progress_flag(p)


@PERF.command(
    "rebuild",
    "wipe a follower's disk: time back to the ISR when the partition "
    "is tiered (remote end + tail) vs full re-replication, and the producers' p99",
    _rebuild_args,
)
def cmd_perf_rebuild(args: argparse.Namespace) -> int:
    """``tiered-log perf rebuild``; exit 0 whether or not the targets are met."""
    from ..perf.rebuild import format_rebuild, run_rebuild

    if args.segments:
        from ..perf.rebuild_segments import run_rebuild_segments

        seg_report = run_rebuild_segments(
            args.segments,
            segment_kib=args.segment_kib,
            wipes=args.wipes,
            lease_ttl_s=args.lease_ttl,
            directory=args.dir,
            keep=args.keep,
            progress=args.progress,
        )
        print(json.dumps(seg_report, indent=2))
        return 0
    if min(args.archive_mb) <= args.tail_mb:
        raise UsageError(
            f"--archive-mb: every archive must be larger than --tail-mb ({args.tail_mb})"
        )
    report = run_rebuild(
        args.archive_mb,
        tail_mb=args.tail_mb,
        record_bytes=args.record_bytes,
        request_kib=args.request_kib,
        load_rate=args.load_rate,
        load_records=args.load_records,
        before_s=args.before_s,
        wipes=args.wipes,
        lease_ttl_s=args.lease_ttl,
        directory=args.dir,
        keep=args.keep,
        progress=args.progress,
        replication_transport=args.replication_transport,
    )
    print(json.dumps(report, indent=2) if args.json else format_rebuild(report))
    return 0


# ---- Spark: spark-scan ------------------------------------------------------------------------


def _spark_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument(
        "--records",
        type=positive_int,
        default=DEFAULT_SPARK_RECORDS,
        metavar="N",
        help=f"1 KiB records in the archive (default: {DEFAULT_SPARK_RECORDS:,})",
    )
    p.add_argument(
        "--partitions",
        type=positive_int,
        default=2,
        metavar="P",
        help="partitions of the topic (default: 2)",
    )
    p.add_argument(
        "--segment-bytes",
        type=positive_int,
        default=64 << 20,
        metavar="B",
        help="segment size of the archive (default: 64 MiB)",
    )
    p.add_argument(
        "--repeat",
        type=positive_int,
        default=1,
        metavar="R",
        help="scans per configuration; the best counts (default: 1)",
    )
    p.add_argument("--dir", metavar="D", help="where to put the files (default: the temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the files afterwards")
    progress_flag(p)


@PERF.command(
    "spark-scan", "Spark scanning an archive: local[1] vs local[2] vs a Parquet copy", _spark_args
)
def cmd_perf_spark_scan(args: argparse.Namespace) -> int:
    """``tiered-log perf spark-scan``; exit 0 whether or not the targets are met."""
    from ..perf.spark import format_table, run_spark_scan

    report = run_spark_scan(
        args.records,
        partitions=args.partitions,
        segment_bytes=args.segment_bytes,
        repeat=args.repeat,
        directory=args.dir,
        keep=args.keep,
        progress=args.progress,
    )
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(format_table(report))
    return 0


# ---- the Kafka batch codec: kafka-codec ---------------------------------------------------


def _kafka_codec_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object instead of lines")
    p.add_argument(
        "--total-kib",
        type=positive_int,
        default=1024,
        metavar="N",
        help="KiB of record values in the buffer (default: 1024)",
    )
    p.add_argument(
        "--record-bytes",
        type=positive_int,
        default=1024,
        metavar="B",
        help="bytes of each record's value (default: 1024)",
    )
    p.add_argument(
        "--batch-records",
        type=positive_int,
        default=16,
        metavar="N",
        help="records per batch (default: 16)",
    )
    p.add_argument(
        "--compression",
        default="none",
        choices=["none", "gzip", "snappy", "lz4", "zstd"],
        help="codec of the batches (default: none)",
    )
    p.add_argument(
        "--rounds",
        type=positive_int,
        default=7,
        metavar="R",
        help="rounds of ours and the baselines, alternating (default: 7)",
    )
    progress_flag(p)


@PERF.command(
    "kafka-codec",
    "the Kafka batch walk vs crc32c alone, record decoding vs kafka-python's reader",
    _kafka_codec_args,
)
def cmd_perf_kafka_codec(args: argparse.Namespace) -> int:
    """``tiered-log perf kafka-codec``; exit 0 whatever the figures."""
    from ..perf.kafka_codec import run

    report = run(
        args.total_kib * 1024,
        record_bytes=args.record_bytes,
        batch_records=args.batch_records,
        compression=args.compression,
        rounds=args.rounds,
        progress=args.progress,
    )
    return _print(report, args.json)


# ---- Kafka clients against the Kafka listener: kafka ----------------------------------------


def _kafka_args(p: argparse.ArgumentParser) -> None:
    from ..perf.kafka import DEFAULT_KAFKA_REPEAT, DEFAULT_MIB

    p.add_argument("--json", action="store_true", help="print one JSON object instead of lines")
    p.add_argument(
        "--mib",
        type=positive_int,
        default=DEFAULT_MIB,
        metavar="N",
        help=f"MiB of 1 KiB records produced per run (default: {DEFAULT_MIB})",
    )
    p.add_argument(
        "--repeat",
        type=positive_int,
        default=DEFAULT_KAFKA_REPEAT,
        metavar="R",
        help=f"rounds of each measurement and its baseline, taking turns "
        f"(default: {DEFAULT_KAFKA_REPEAT})",
    )
    p.add_argument(
        "--dir",
        metavar="D",
        help="where to put the server's files (a fresh subdirectory; default: the temp dir)",
    )
    p.add_argument("--keep", action="store_true", help="keep the files afterwards")
    progress_flag(p)


@PERF.command(
    "kafka",
    "confluent-kafka producer vs the library's append, consumer (local and archived "
    "data) vs the loopback limit, through the Kafka listener",
    _kafka_args,
)
def cmd_perf_kafka(args: argparse.Namespace) -> int:
    """``tiered-log perf kafka``; exit 0 whether or not the targets are met."""
    from ..perf.kafka import format_lines as kafka_lines
    from ..perf.kafka import run_kafka

    report = run_kafka(
        args.mib, repeat=args.repeat, directory=args.dir, keep=args.keep, progress=args.progress
    )
    print(json.dumps(report, indent=2) if args.json else kafka_lines(report))
    return 0


__all__ = ["COMMANDS", "PERF", "format_lines"]
