"""A DevCluster whose start fails stops what it had started (etcd, the nodes that came
up) instead of leaving them running after the test or the command that started them.
Real etcd from the wheel, a real ``tiered-log serve`` that refuses its settings."""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path

import pytest

from tiered_log.cluster.dev import DevCluster, DevNode
from tiered_log.cluster.etcd_process import EtcdProcess

from .test_dev_cluster_cli import _running

pytestmark = pytest.mark.timeout(120)


def _processes_under(root: Path) -> list[int]:
    """Pids of live processes whose command line names a path under ``root``."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if str(root) in cmd and _running(int(entry.name)):
            out.append(int(entry.name))
    return out


def test_a_node_that_cannot_start_leaves_no_process_behind(tmp_path: Path) -> None:
    cluster = DevCluster(tmp_path / "c", 1, settings={"TIERED_LOG_NO_SUCH_SETTING": "1"})
    try:
        with pytest.raises(RuntimeError, match="node 1 exited"):
            cluster.start()
        assert cluster.etcd.client_url  # etcd had started
        assert _processes_under(tmp_path) == []
    finally:
        for pid in _processes_under(tmp_path):
            os.kill(pid, signal.SIGKILL)


def test_a_node_whose_port_was_taken_starts_on_new_ports(tmp_path: Path, etcd: EtcdProcess) -> None:
    """The OS may give a port picked as free to another socket before the node binds it
    (a suite's other worker, any outgoing connection): the node exits saying so, and a
    first start picks new ports and launches it again (what DevCluster.start does)."""
    env = {"TIERED_LOG_REMOTE_URL": str(tmp_path / "remote"), "TIERED_LOG_ACCESS_LOG": "false"}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        node = DevNode(1, tmp_path, taken.getsockname()[1], etcd.client_url, env)
        try:
            node.launch()
            with pytest.raises(RuntimeError, match="exited"):
                node.wait_ready()
            assert node.lost_its_port()
            node.new_ports()
            assert node.port != taken.getsockname()[1] and node.kafka_port
            node.launch()
            node.wait_ready()
            assert not node.lost_its_port()
        finally:
            node.stop()
