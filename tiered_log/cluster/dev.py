"""A cluster on one machine: etcd and N ``tiered-log serve`` processes on loopback ports
(``tiered-log dev-cluster``, and the cluster tests' fixture).

Layout under ``work_dir``::

    etcd/            the etcd server's data and log (:class:`EtcdProcess`)
    node-<i>/        node i's data directory; node-<i>.log its output
    remote/          the remote tier the nodes share (a local directory)

Each node is a real process (``python -m tiered_log.service``) started with
``TIERED_LOG_*`` settings: node id i, its advertised URL, the etcd URL and a Kafka
listener on a port of its own (:attr:`DevCluster.bootstrap` lists them). A node can be
killed (SIGKILL), stopped (SIGTERM), paused (SIGSTOP), resumed (SIGCONT) and started
again on the same port and data directory, which is what the failover tests and
``perf failover`` do to it.

Not thread-safe: one owner drives a DevCluster.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO

import httpx

from .etcd_process import EtcdProcess, free_port, wait_until_stopped


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
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.kafka_port = free_port() if kafka_port is None else kafka_port
        """Its Kafka listener's port (kept across restarts)."""
        self.kafka_address = f"127.0.0.1:{self.kafka_port}"
        self.data_dir = work_dir / f"node-{node_id}"
        self.log_path = work_dir / f"node-{node_id}.log"
        self._etcd_url = etcd_url
        self._env = dict(env)
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def start(self, wait_s: float = 30.0) -> DevNode:
        """Start the process and wait until it answers ``/healthz``."""
        env = {
            **os.environ,
            **self._env,
            "TIERED_LOG_NODE_ID": str(self.node_id),
            "TIERED_LOG_HOST": "127.0.0.1",
            "TIERED_LOG_PORT": str(self.port),
            "TIERED_LOG_KAFKA_PORT": str(self.kafka_port),
            "TIERED_LOG_ADVERTISED_URL": self.url,
            "TIERED_LOG_CLUSTER_ETCD": self._etcd_url,
            "TIERED_LOG_DATA_DIR": str(self.data_dir),
        }
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in _reap
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tiered_log.service"],
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
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
    ``progress``: told what is starting (the CLI prints it)."""

    def __init__(
        self,
        work_dir: str | os.PathLike[str],
        nodes: int = 3,
        *,
        settings: Mapping[str, str] | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        if nodes < 1:
            raise ValueError("a cluster needs at least one node")
        self.work_dir = Path(work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self._progress = progress or (lambda _m: None)
        self.etcd = EtcdProcess(self.work_dir / "etcd")
        remote = self.work_dir / "remote"
        env = {
            "TIERED_LOG_REMOTE_URL": str(remote),
            "TIERED_LOG_ACCESS_LOG": "false",
            **(settings or {}),
        }
        self._env = env
        self._count = nodes
        self.nodes: dict[int, DevNode] = {}

    def start(self) -> DevCluster:
        self._progress(f"starting etcd in {self.work_dir / 'etcd'}")
        self.etcd.start()
        for i in range(1, self._count + 1):
            node = DevNode(i, self.work_dir, free_port(), self.etcd.client_url, self._env)
            self.nodes[i] = node
            self._progress(f"starting node {i} on {node.url}")
            node.start()
        return self

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


__all__ = ["DevCluster", "DevNode"]
