"""A cluster on one machine: etcd and N ``tiered-log serve`` processes on loopback ports
(``tiered-log dev-cluster``, and the cluster tests' fixture).

Layout under ``work_dir``::

    etcd/            the etcd server's data and log (:class:`EtcdProcess`)
    node-<i>/        node i's data directory; node-<i>.log its output
    remote/          the remote tier the nodes share (a local directory), unless
                     ``remote_url`` (or ``$TIERED_LOG_REMOTE_URL``) names another
    dev-cluster.json the state file: the owner's pid, etcd's and each node's pid, URLs,
                     Kafka address, data directory, log and settings (secrets left out)
    control/         requests to the owner: ``<id>.req`` (``{"node", "action"}``) in,
                     ``<id>.done`` (``{"ok", "message"}``) out

Each node is a real process (``python -m tiered_log.service``) started with
``TIERED_LOG_*`` settings: node id i, its advertised URL, the etcd URL and a Kafka
listener on a port of its own (:attr:`DevCluster.bootstrap` lists them). A node can be
killed (SIGKILL), stopped (SIGTERM), paused (SIGSTOP), resumed (SIGCONT) and started
again on the same port and data directory, which is what the failover tests and
``perf failover`` do to it.

Another process changes a running cluster's node through the owner
(:func:`request_node_action`: ``stop``, ``kill``, ``start``, ``wipe``): it writes a request
into ``control/``, and the owner, which polls it (:meth:`DevCluster.serve_requests`),
acts on its own node objects (signals by pid, never by name) and answers. So a node is
restarted with exactly the environment, ports and data directory it had, and only the
owner ever starts or reaps the processes.

Not thread-safe: one owner drives a DevCluster.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

import httpx

from ..local.files import write_atomic
from .etcd_process import EtcdProcess, free_port, wait_until_stopped

STATE_FILE = "dev-cluster.json"
"""In the work directory: what :meth:`DevCluster.write_state` records."""
CONTROL_DIR = "control"
"""In the work directory: node requests to the owner and its answers."""
NODE_ACTIONS = ("stop", "kill", "start", "wipe")
"""What :func:`request_node_action` asks: SIGTERM (then SIGKILL), SIGKILL, start it
again as it was, delete its data directory (a stopped node only: a lost disk)."""
_SECRET_WORDS = ("SECRET", "TOKEN", "PASSWORD", "AUTH", "KEY")
"""Settings whose values the state file leaves out (credentials)."""


class DevClusterError(Exception):
    """A node request that could not be made or was refused (the message says why)."""


class DevNode:
    """One ``tiered-log serve`` process of a :class:`DevCluster`."""

    def __init__(
        self,
        node_id: int,
        work_dir: Path,
        port: int,
        etcd_url: str,
        env: Mapping[str, str],
        kafka_port: int | None = None,
    ) -> None:
        self.node_id = node_id
        self._use_ports(port, free_port() if kafka_port is None else kafka_port)
        self.data_dir = work_dir / f"node-{node_id}"
        self.log_path = work_dir / f"node-{node_id}.log"
        self._etcd_url = etcd_url
        self._env = dict(env)
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def _use_ports(self, port: int, kafka_port: int) -> None:
        self.port = port
        """Its HTTP port (kept across restarts)."""
        self.url = f"http://127.0.0.1:{port}"
        self.kafka_port = kafka_port
        """Its Kafka listener's port (kept across restarts; 0: no listener)."""
        self.kafka_address = f"127.0.0.1:{kafka_port}"

    def lost_its_port(self) -> bool:
        """Whether the process exited because a port picked for it was taken when it
        bound it (another socket on the machine got it from the OS meanwhile)."""
        return not self.alive and "Address already in use" in self.log_tail()

    def new_ports(self) -> None:
        """Pick new free ports (for a first start whose port was taken: see
        :meth:`lost_its_port`); a node without a Kafka listener keeps none."""
        self._reap(10)
        self._use_ports(free_port(), free_port() if self.kafka_port else 0)

    def env(self) -> dict[str, str]:
        """The node's own ``TIERED_LOG_*`` settings (over the cluster's and the
        inherited environment)."""
        return {
            "TIERED_LOG_NODE_ID": str(self.node_id),
            "TIERED_LOG_HOST": "127.0.0.1",
            "TIERED_LOG_PORT": str(self.port),
            "TIERED_LOG_KAFKA_PORT": str(self.kafka_port),
            "TIERED_LOG_ADVERTISED_URL": self.url,
            "TIERED_LOG_CLUSTER_ETCD": self._etcd_url,
            "TIERED_LOG_DATA_DIR": str(self.data_dir),
        }

    def start(self, wait_s: float = 30.0) -> DevNode:
        """Start the process and wait until it answers ``/healthz``."""
        self.launch()
        return self.wait_ready(wait_s)

    def launch(self) -> None:
        """Start the process, not waiting for it (:meth:`wait_ready`)."""
        env = {**os.environ, **self._env, **self.env()}
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in _reap
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tiered_log.service"],
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def wait_ready(self, wait_s: float = 30.0) -> DevNode:
        """Wait until the launched process answers ``/healthz`` (RuntimeError with its
        log's tail when it exits or does not answer within ``wait_s``)."""
        assert self.proc is not None, "launch() first"
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"node {self.node_id} exited with {self.proc.returncode}: {self.log_tail()}"
                )
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(
            f"node {self.node_id} did not answer within {wait_s}s: {self.log_tail()}"
        )

    def log_tail(self, n: int = 2000) -> str:
        try:
            return self.log_path.read_bytes()[-n:].decode("utf-8", "replace")
        except OSError:
            return ""

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def kill(self) -> None:
        """SIGKILL: a crash (no flush, no goodbye to etcd: its lease runs out)."""
        self._signal(signal.SIGKILL)
        self._reap(10)

    def stop(self, timeout_s: float = 20.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout_s``."""
        if self.proc is None:
            return
        self._signal(signal.SIGCONT)  # a paused node cannot handle SIGTERM
        self._signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self._signal(signal.SIGKILL)
        self._reap(10)

    def pause(self) -> None:
        """SIGSTOP (a hung node); returns once every thread of it has stopped."""
        self._signal(signal.SIGSTOP)
        if self.proc is not None:
            wait_until_stopped(self.proc.pid)

    def resume(self) -> None:
        self._signal(signal.SIGCONT)

    def _reap(self, timeout_s: float) -> None:
        if self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout_s)
        if self._log is not None:
            self._log.close()
            self._log = None


class DevCluster:
    """etcd plus ``nodes`` nodes under ``work_dir`` (see the module docstring).

    ``settings``: extra ``TIERED_LOG_*`` variables for every node (e.g. a short lease).
    ``progress``: told what is starting (the CLI prints it). ``remote_url``: the remote
    tier the nodes share (default: ``$TIERED_LOG_REMOTE_URL``, else ``work_dir/remote``);
    its S3 settings (``TIERED_LOG_S3_*``) reach the nodes from the environment.
    ``kafka``: False starts every node without its Kafka listener (``kafka_port`` 0)."""

    def __init__(
        self,
        work_dir: str | os.PathLike[str],
        nodes: int = 3,
        *,
        settings: Mapping[str, str] | None = None,
        progress: Callable[[str], None] | None = None,
        remote_url: str | None = None,
        kafka: bool = True,
    ) -> None:
        if nodes < 1:
            raise ValueError("a cluster needs at least one node")
        self.work_dir = Path(work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self._progress = progress or (lambda _m: None)
        self.etcd = EtcdProcess(self.work_dir / "etcd")
        remote = (
            remote_url or os.environ.get("TIERED_LOG_REMOTE_URL") or str(self.work_dir / "remote")
        )
        env = {
            "TIERED_LOG_REMOTE_URL": remote,
            "TIERED_LOG_ACCESS_LOG": "false",
            **(settings or {}),
        }
        self._env = env
        self._count = nodes
        self._kafka = kafka
        self.nodes: dict[int, DevNode] = {}
        self.failed_node: DevNode | None = None
        """The node that did not answer when :meth:`start` failed (None: none did)."""

    def start(self) -> DevCluster:
        """Start etcd, then the nodes all at once, and wait until each answers. If any
        fails, what was started is stopped before the error propagates: no etcd or node
        outlives a failed start."""
        self._progress(f"starting etcd in {self.work_dir / 'etcd'}")
        try:
            self.etcd.start()
            for i in range(1, self._count + 1):
                node = DevNode(
                    i,
                    self.work_dir,
                    free_port(),
                    self.etcd.client_url,
                    self._env,
                    kafka_port=None if self._kafka else 0,
                )
                self.nodes[i] = node
                self._progress(f"starting node {i} on {node.url}")
                node.launch()
            for node in self.nodes.values():
                self.failed_node = node
                self._wait_ready(node)
            self.failed_node = None
            self.write_state()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self, node: DevNode, attempts: int = 3) -> None:
        """Wait for a node just launched. Its ports were free when picked, but the OS may
        hand one to any other socket before the node binds it (another process's
        outgoing connection): a node that exits for that starts again on new ports, up
        to ``attempts`` times in all."""
        for attempt in range(1, attempts + 1):
            try:
                node.wait_ready()
                return
            except RuntimeError:
                if attempt == attempts or not node.lost_its_port():
                    raise
            node.new_ports()
            self._progress(f"node {node.node_id}'s port was taken: starting it on {node.url}")
            node.launch()

    @property
    def remote_url(self) -> str:
        """The remote tier every node ships to."""
        return self._env["TIERED_LOG_REMOTE_URL"]

    # ---- the state file and node requests from other processes -------------------------

    def write_state(self) -> None:
        """Record the owner's, etcd's and each node's pid, addresses and settings in
        :data:`STATE_FILE` (atomically; credentials left out)."""

        def shown(k: str, v: str) -> str:
            return "<set>" if any(w in k.upper() for w in _SECRET_WORDS) else v

        settings = {
            k: shown(k, v)
            for k, v in {**os.environ, **self._env}.items()
            if k.startswith("TIERED_LOG_")
        }
        state = {
            "pid": os.getpid(),
            "remote_url": self.remote_url,
            "etcd": {"url": self.etcd.client_url, "pid": self.etcd.pid},
            "nodes": {
                str(n.node_id): {
                    "pid": n.proc.pid if n.alive and n.proc is not None else None,
                    "url": n.url,
                    "kafka": n.kafka_address,
                    "data_dir": str(n.data_dir),
                    "log": str(n.log_path),
                    "settings": {**settings, **{k: shown(k, v) for k, v in n.env().items()}},
                }
                for n in self.nodes.values()
            },
        }
        write_atomic(self.work_dir / STATE_FILE, json.dumps(state, indent=2).encode())

    def serve_requests(self) -> list[str]:
        """Carry out the node requests waiting in :data:`CONTROL_DIR` (the owner calls
        this from its wait loop); returns what was done, one line each."""
        control = self.work_dir / CONTROL_DIR
        done: list[str] = []
        try:
            requests = sorted(control.glob("*.req"))
        except OSError:
            return done
        for req in requests:
            try:
                ask = json.loads(req.read_bytes())
                ok, message = True, self.node_action(int(ask["node"]), str(ask["action"]))
            except (ValueError, KeyError, TypeError) as exc:
                ok, message = False, f"bad request: {exc}"
            except DevClusterError as exc:
                ok, message = False, str(exc)
            except (OSError, RuntimeError) as exc:
                ok, message = False, " ".join(str(exc).split())[:500]
            write_atomic(
                req.with_suffix(".done"), json.dumps({"ok": ok, "message": message}).encode()
            )
            req.unlink(missing_ok=True)
            done.append(message)
        if done:
            self.write_state()
        return done

    def node_action(self, node_id: int, action: str) -> str:
        """Do ``action`` (:data:`NODE_ACTIONS`) to node ``node_id``; what was done.
        DevClusterError when it cannot be done (no such node, a wipe of a live node)."""
        node = self.nodes.get(node_id)
        if node is None:
            raise DevClusterError(f"no node {node_id}: the nodes are {sorted(self.nodes)}")
        if action == "stop":
            was = node.proc.pid if node.alive and node.proc is not None else None
            node.stop()
            return f"node {node_id} stopped" + (f" (pid {was})" if was else " (was not running)")
        if action == "kill":
            was = node.proc.pid if node.alive and node.proc is not None else None
            node.kill()
            return f"node {node_id} killed" + (f" (pid {was})" if was else " (was not running)")
        if action == "start":
            if node.alive:
                raise DevClusterError(f"node {node_id} is running (pid {node.proc.pid})")  # type: ignore[union-attr]
            node.start()
            pid = node.proc.pid if node.proc is not None else None
            return f"node {node_id} started: {node.url} pid {pid}"
        if action == "wipe":
            if node.alive:
                raise DevClusterError(
                    f"node {node_id} is running (pid {node.proc.pid}): stop it first"  # type: ignore[union-attr]
                )
            shutil.rmtree(node.data_dir, ignore_errors=True)
            return f"node {node_id}'s data directory {node.data_dir} deleted"
        raise DevClusterError(f"unknown action {action!r}: one of {', '.join(NODE_ACTIONS)}")

    @property
    def urls(self) -> list[str]:
        return [n.url for n in self.nodes.values()]

    @property
    def bootstrap(self) -> str:
        """The nodes' Kafka listeners, ``host:port,...`` (a Kafka client's bootstrap)."""
        return ",".join(n.kafka_address for n in self.nodes.values())

    def stop(self) -> None:
        for node in self.nodes.values():
            node.stop()
        self.etcd.stop()

    def __enter__(self) -> DevCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def request_node_action(
    work_dir: str | os.PathLike[str], node_id: int, action: str, timeout_s: float = 90.0
) -> str:
    """Ask the DevCluster running in ``work_dir`` (another process) to ``action`` node
    ``node_id`` and wait for its answer; what it did. DevClusterError when no cluster
    runs there, it refused, or it did not answer within ``timeout_s``."""
    wd = Path(work_dir)
    try:
        state: dict[str, Any] = json.loads((wd / STATE_FILE).read_bytes())
    except (OSError, ValueError):
        raise DevClusterError(
            f"no dev-cluster state in {wd} (give the --dir a running dev-cluster was started with)"
        ) from None
    owner = int(state.get("pid") or 0)
    if owner <= 0 or not _pid_alive(owner):
        raise DevClusterError(f"the dev-cluster of {wd} (pid {owner}) is not running")
    control = wd / CONTROL_DIR
    control.mkdir(exist_ok=True)
    rid = uuid.uuid4().hex
    write_atomic(control / f"{rid}.req", json.dumps({"node": node_id, "action": action}).encode())
    answer = control / f"{rid}.done"
    deadline = time.monotonic() + timeout_s
    while not answer.exists():
        if time.monotonic() > deadline or not _pid_alive(owner):
            (control / f"{rid}.req").unlink(missing_ok=True)
            raise DevClusterError(
                f"the dev-cluster of {wd} (pid {owner}) did not answer within {timeout_s:.0f} s"
            )
        time.sleep(0.1)
    reply = json.loads(answer.read_bytes())
    answer.unlink(missing_ok=True)
    if not reply.get("ok"):
        raise DevClusterError(str(reply.get("message")))
    return str(reply.get("message"))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


__all__ = [
    "CONTROL_DIR",
    "NODE_ACTIONS",
    "STATE_FILE",
    "DevCluster",
    "DevClusterError",
    "DevNode",
    "request_node_action",
]
