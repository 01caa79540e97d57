"""``tiered-log cluster status`` (every partition's replicas as their leaders see them)
``tiered-log cluster reassign`` (move a node's replicas to another) and ``tiered-log
cluster restore`` (a new cluster recreates the bucket's topics; the offsets never shipped
are reported lost, per partition).

::

    tiered-log cluster status [--url URL,...] [--topic T] [--wait] [--timeout S] [--json]
    tiered-log cluster reassign --from N --to M [--wait] [--timeout S] [--url URL,...]
    tiered-log cluster restore [--topic T] [--replication-factor N] [--to-timestamp TS]
                               [--wait] [--json]

Asks every live node for ``GET /v1/cluster`` (each reports the partitions it leads:
their high watermark and each replica's state, log end, lag and catch-up rate) and
prints one line per partition: ``topic-p leader=N epoch=E hw=H`` and each replica as
``node:state`` (``in_sync``, ``rebuilding``: a replica restarted at the remote end and
copying the unshipped tail, ``catching_up``, ``offline``) with its lag (offsets and
bytes). ``--wait`` polls until every replica of every partition is in sync, showing
progress on stderr (replicas not in sync, offsets and bytes left, rate, estimated time); it exits 0 then, 1 on
``--timeout``. A single node (no cluster) is an error. One command per process.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from ..errors import TieredLogError
from .registry import CommandGroup, UsageError, timestamp_ms
from .service import _client, _client_options, _guard, _try_get

COMMANDS = CommandGroup()
"""``cluster status``."""

CLUSTER = COMMANDS.group("cluster", "a cluster's state: replicas, leaders, catch-up progress")
"""``tiered-log cluster ...``."""


def _status_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--wait", action="store_true", help="wait until every replica is in sync, showing progress"
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="longest --wait (default 600)",
    )
    p.add_argument("--json", action="store_true", help="print the merged state as JSON")
    p.add_argument(
        "--topic",
        action="append",
        metavar="TOPIC",
        help="only this topic's partitions (repeatable; default: all)",
    )
    _client_options(p)


def gather(urls: list[str], headers: dict[str, str]) -> list[dict[str, Any]]:
    """The ``replication`` sections of every node that answers, merged: one entry per
    partition (from its leader), sorted."""
    import httpx

    parts: dict[tuple[str, int], dict[str, Any]] = {}
    with httpx.Client(timeout=5, headers=headers) as http:
        for url in urls:
            r = _try_get(http, url.rstrip("/") + "/v1/cluster")
            if r is None or r.status_code != 200:
                continue  # a dead node: its partitions have (or will have) other leaders
            body = r.json()
            for part in body.get("replication", ()):
                part["leader"] = body.get("node_id")
                parts[(part["topic"], part["partition"])] = part
    return [parts[k] for k in sorted(parts)]


def _left(parts: list[dict[str, Any]]) -> tuple[int, int, float, int]:
    """Replicas not in sync, offsets they lack, their summed catch-up rate (offsets/s),
    and the bytes they lack."""
    n = lag = nbytes = 0
    rate = 0.0
    for part in parts:
        for r in part["replicas"]:
            if r["state"] not in ("leader", "in_sync"):
                n += 1
                lag += int(r["lag_offsets"])
                nbytes += int(r.get("lag_bytes") or 0)
                rate += float(r["rate_offsets_s"])
    return n, lag, rate, nbytes


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def _line(part: dict[str, Any]) -> str:
    reps = " ".join(
        f"{r['node_id']}:{r['state']}"
        + (
            f"(lag {r['lag_offsets']}, {_mib(int(r.get('lag_bytes') or 0))})"
            if r["lag_offsets"]
            else ""
        )
        + (f"(sent back to the remote end {r['resets']}x)" if r.get("resets", 0) > 1 else "")
        for r in part["replicas"]
    )
    return (
        f"{part['topic']}-{part['partition']} leader={part['leader']} "
        f"epoch={part['leader_epoch']} hw={part['high_watermark']} {reps}"
    )


@CLUSTER.command(
    "status", "each partition's replicas: in sync, rebuilding, catching up", _status_args
)
@_guard
def cmd_cluster_status(args: argparse.Namespace) -> int:
    """Print (and with ``--wait`` follow) the replicas' state; see the module docstring."""
    if args.timeout <= 0:
        raise UsageError("--timeout must be > 0")
    with _client(args) as client:
        info = client.cluster()
        if info is None:
            raise TieredLogError(
                f"not a cluster: the service at {client.base_url} is a single node"
            )
        headers = {"Authorization": f"Bearer {args.token}"} if args.token else {}
    deadline = time.monotonic() + args.timeout
    shown = False
    while True:
        urls = [n["url"] for n in info["nodes"] if n.get("alive") and n.get("url")]
        parts = gather(urls, headers)
        if args.topic:
            parts = [p for p in parts if p["topic"] in args.topic]
        n, lag, rate, nbytes = _left(parts)
        if not args.wait or (n == 0 and parts):
            break
        if time.monotonic() >= deadline:
            print(
                f"tiered-log: {n} replica(s) still not in sync after {args.timeout:g}s "
                f"({lag} offsets, {_mib(nbytes)} behind)",
                file=sys.stderr,
            )
            return 1
        eta = f", about {lag / rate:.0f}s left" if rate > 0 else ""
        sys.stderr.write(
            f"\r{n} replica(s) not in sync, {lag} offsets ({_mib(nbytes)}) "
            f"behind, {rate:.0f} offsets/s{eta}   "
        )
        sys.stderr.flush()
        shown = True
        time.sleep(1.0)
        with _client(args) as client:
            info = client.cluster() or info
    if shown:
        sys.stderr.write("\n")
    if args.json:
        print(json.dumps({"partitions": parts}, indent=2))
    elif not parts:
        only = f" of topic(s) {', '.join(args.topic)}" if args.topic else ""
        print(
            f"no partitions{only}: the cluster has no topics"
            if not only
            else f"no partitions{only}"
        )
    else:
        for part in parts:
            print(_line(part))
    return 0


def _reassign_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--from",
        dest="from_node",
        type=int,
        required=True,
        metavar="NODE",
        help="the node whose replicas move (a dead one, say)",
    )
    p.add_argument(
        "--to",
        dest="to_node",
        type=int,
        required=True,
        metavar="NODE",
        help="the live node that takes them",
    )
    p.add_argument(
        "--wait",
        action="store_true",
        help="wait until the partitions started no longer hold the old node, showing progress",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="longest --wait (default 600)",
    )
    _client_options(p)


@CLUSTER.command(
    "reassign",
    "move every replica of one node to another (it rebuilds from the bucket plus the tail)",
    _reassign_args,
)
@_guard
def cmd_cluster_reassign(args: argparse.Namespace) -> int:
    """``POST /v1/cluster/reassign``; with ``--wait``, follow it until ``--from`` holds
    no replica (the controller drops it once the new replicas are in sync)."""
    if args.from_node < 0 or args.to_node < 0 or args.timeout <= 0:
        raise UsageError("--from and --to are node ids >= 0; --timeout must be > 0")
    with _client(args) as client:
        body = client.reassign(args.from_node, args.to_node)
        print(
            f"reassigning {len(body['partitions'])} partition(s) from node "
            f"{args.from_node} to node {args.to_node}"
        )
        if not args.wait:
            return 0
        deadline = time.monotonic() + args.timeout
        moving = {(p["topic"], p["partition"]) for p in body["partitions"]}
        while True:
            info = client.cluster() or {}
            left = [
                p
                for p in info.get("partitions", ())
                if (p["topic"], p["partition"]) in moving and args.from_node in p["replicas"]
            ]
            if not left:
                print(f"done: node {args.from_node} holds none of those replicas any more")
                return 0
            if time.monotonic() >= deadline:
                print(
                    f"tiered-log: {len(left)} partition(s) still on node {args.from_node} "
                    f"after {args.timeout:g}s",
                    file=sys.stderr,
                )
                return 1
            sys.stderr.write(f"\r{len(left)} partition(s) still on node {args.from_node}   ")
            sys.stderr.flush()
            time.sleep(1.0)


def _restore_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--topic",
        action="append",
        metavar="TOPIC",
        help="only this topic (repeatable; default: every topic in the bucket)",
    )
    p.add_argument(
        "--replication-factor",
        type=int,
        metavar="N",
        help="replicas of each partition (default: min(3, live nodes))",
    )
    p.add_argument(
        "--min-insync-replicas",
        type=int,
        metavar="N",
        help="as for a new topic (default: min(2, replication factor))",
    )
    p.add_argument(
        "--to-timestamp",
        metavar="TS",
        type=timestamp_ms,
        help="restore each topic to this time (ms since the epoch or ISO 8601): only its "
        "records up to the last one at or before TS, in new logs",
    )
    p.add_argument(
        "--wait",
        action="store_true",
        help="wait until every restored partition is led and in sync, then "
        "print what each kept and lost",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="longest --wait (default 600)",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    _client_options(p)


def _restore_line(part: dict[str, Any]) -> str:
    lost = ", ".join(f"[{a}, {b})" for a, b in part.get("lost_offsets", ())) or "none"
    return (
        f"{part['topic']}-{part['partition']}: archived up to "
        f"{part.get('remote_end_offset')}, lost {lost}, continues at "
        f"{part.get('log_end_offset')}"
    )


@CLUSTER.command(
    "restore",
    "recreate the bucket's topics in a new cluster (fresh etcd, "
    "empty disks) and report the offsets never shipped",
    _restore_args,
)
@_guard
def cmd_cluster_restore(args: argparse.Namespace) -> int:
    """``POST /v1/cluster/restore``; with ``--wait``, follow the restored partitions
    until each is led and in sync and print, per partition, how far the bucket held it
    and which offsets were lost. Exit 1 when a topic asked for is not in the bucket or
    on ``--timeout``."""
    for flag in ("replication_factor", "min_insync_replicas"):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            raise UsageError(f"--{flag.replace('_', '-')} must be >= 1")
    if args.timeout <= 0:
        raise UsageError("--timeout must be > 0")
    with _client(args) as client:
        body = client.restore(
            args.topic,
            replication_factor=args.replication_factor,
            min_insync_replicas=args.min_insync_replicas,
            to_timestamp=args.to_timestamp,
        )
        info = client.cluster() or {}
    for t in body["restored"]:
        print(f"restored {t['name']} ({t['partitions']} partition(s))", file=sys.stderr)
    for t in body["skipped"]:
        print(f"skipped {t['name']}: {t['reason']}", file=sys.stderr)
    for name in body["missing"]:
        print(f"tiered-log: topic {name} is not in the bucket", file=sys.stderr)
    report: dict[str, Any] = dict(body)
    if args.wait and body["restored"]:
        names = {t["name"] for t in body["restored"]}
        want = sum(int(t["partitions"]) for t in body["restored"])
        headers = {"Authorization": f"Bearer {args.token}"} if args.token else {}
        deadline = time.monotonic() + args.timeout
        while True:
            urls = [n["url"] for n in info.get("nodes", ()) if n.get("alive") and n.get("url")]
            parts = [p for p in gather(urls, headers) if p["topic"] in names]
            n, lag, _rate, nbytes = _left(parts)
            if len(parts) == want and n == 0:
                break
            if time.monotonic() >= deadline:
                print(
                    f"tiered-log: {want - len(parts)} partition(s) without a leader and "
                    f"{n} replica(s) not in sync after {args.timeout:g}s",
                    file=sys.stderr,
                )
                return 1
            sys.stderr.write(
                f"\r{len(parts)}/{want} partition(s) led, {n} replica(s) "
                f"rebuilding, {lag} offsets ({_mib(nbytes)}) behind   "
            )
            sys.stderr.flush()
            time.sleep(1.0)
            with _client(args) as client:
                info = client.cluster() or info
        sys.stderr.write("\n")
        report["partitions"] = [
            {
                k: p.get(k)
                for k in (
                    "topic",
                    "partition",
                    "remote_end_offset",
                    "lost_offsets",
                    "log_end_offset",
                    "high_watermark",
                )
            }
            for p in parts
        ]
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for part in report.get("partitions", ()):
            print(_restore_line(part))
    return 1 if body["missing"] else 0


__all__ = [
    "COMMANDS",
    "cmd_cluster_reassign",
    "cmd_cluster_restore",
    "cmd_cluster_status",
    "gather",
]
