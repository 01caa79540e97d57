"""``tiered-log dev-cluster`` as a user runs it: a real subprocess
(``python -m tiered_log.cli dev-cluster``) with etcd from the wheel and real nodes.

- With ``--nodes 3 --dir D``: it prints the etcd URL, each node's URL (with the pids of
  exactly the processes it started) and a ready line naming the nodes; the real :class:`~tiered_log.client.Client`, given those URLs, creates
  a topic with 3 replicas (min_insync_replicas 2), gets a full ISR, produces with
  ``acks=all`` and reads every record back at its offset; ``GET /v1/cluster`` lists the
  three nodes alive at the printed URLs. SIGTERM then ends it with exit status 0 and no
  traceback, every process it started (etcd and the three nodes) is gone, and ``D`` is
  kept with their data and logs.
- Bad input is one line on stderr, no traceback, nothing left running: ``--nodes 0``
  and a ``--dir`` that is a file exit 2; no etcd binary exits 1; nodes that cannot
  start (invalid settings in the environment) exit 1 naming the node's log, with etcd
  stopped.

Every wait is bounded; the tests that run etcd skip (as the other cluster tests) when
the etcd binary cannot run here.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka_listener.conftest import KafkaWire
from kafka_listener.test_protocol import metadata_body

from tiered_log.client import Client
from tiered_log.kafka.messages import METADATA

from .conftest import _skip_unless_etcd_runs
from .helpers import wait_until

pytestmark = pytest.mark.timeout(180)

ROOT = Path(__file__).resolve().parents[2]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIERED_LOG_")}
    env.update(extra)
    return env


def _start(args: list[str], out: Path, err: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with open(out, "wb") as o, open(err, "wb") as e:
        return subprocess.Popen(
            [sys.executable, "-m", "tiered_log.cli", "dev-cluster", *args],
            cwd=ROOT,
            stdout=o,
            stderr=e,
            env=env,
        )


def _commands(parent: int | None = None) -> dict[int, str]:
    """Live processes (children of ``parent`` if given): their command lines."""
    out: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            state, ppid = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:2]
            if state != "Z" and parent in (None, int(ppid)):
                out[int(entry.name)] = (
                    (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                )
        except (OSError, ValueError, IndexError):
            continue
    return out


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (not gone, not a zombie)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@pytest.fixture
def dev_cluster(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path, Path]]:
    """The command running with 3 nodes in ``tmp_path/cluster``; killed (with its
    process group's children) if a test leaves it running."""
    _skip_unless_etcd_runs()
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    proc = _start(
        ["--nodes", "3", "--dir", str(tmp_path / "cluster"), "--lease-ttl", "2"], out, err, _env()
    )
    children: dict[int, str] = {}
    try:
        yield proc, out, err
    finally:
        if proc.poll() is None:
            children = _commands(proc.pid)
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        for pid in children:
            if _running(pid):
                os.kill(pid, signal.SIGKILL)


def test_dev_cluster_serves_a_replicated_topic_and_stops_on_sigterm(
    dev_cluster: tuple[subprocess.Popen[bytes], Path, Path], tmp_path: Path
) -> None:
    proc, out, err = dev_cluster

    def ready() -> bool:
        assert proc.poll() is None, f"exited {proc.returncode}: {err.read_text()}"
        return any(ln.startswith("ready ") for ln in out.read_text().splitlines())

    took = wait_until(ready, 90, "the ready line", interval_s=0.1)
    lines = out.read_text().splitlines()
    assert lines[0].startswith("etcd http://127.0.0.1:")
    nodes = {int(ln.split()[1]): ln.split()[2] for ln in lines if ln.startswith("node ")}
    assert sorted(nodes) == [1, 2, 3]
    pids = {int(ln.split()[-1]) for ln in lines if ln.startswith(("etcd ", "node "))}
    urls = lines[-1].split()[1].split(",")
    assert urls == [nodes[1], nodes[2], nodes[3]]
    assert "starting node 3" in err.read_text()  # progress on stderr
    print(f"ready after {took:.1f}s")

    children = _commands(proc.pid)
    assert set(children) == pids, (children, pids)  # the pids printed are its processes
    assert sum("etcd" in cmd for cmd in children.values()) == 1, children
    assert sum("tiered_log.service" in cmd for cmd in children.values()) == 3, children

    with Client(urls, retry_timeout_s=20) as c:

        def all_seen() -> bool:  # a node reads the others' registrations every 100 ms
            info = c.cluster()
            assert info is not None
            return {(n["node_id"], n["url"], n["alive"]) for n in info["nodes"]} == {
                (i, u, True) for i, u in nodes.items()
            }

        wait_until(all_seen, 10, "every node in the cluster's view")
        c.create_topic("cli-demo", 1, replication_factor=3, min_insync_replicas=2)

        def full_isr() -> bool:
            got = c.cluster()
            assert got is not None
            return any(p["topic"] == "cli-demo" and len(p["isr"]) == 3 for p in got["partitions"])

        wait_until(full_isr, 20, "a full ISR")
        acked: list[tuple[int, bytes]] = []
        for i in range(4):
            values = [f"r{i}-{j}".encode() for j in range(5)]
            acked += zip(c.produce("cli-demo", 0, values, acks="all"), values, strict=True)
        got = [(r.offset, r.value) for page in c.consume("cli-demo", 0, 0) for r in page.records]
    assert got == acked and [o for o, _ in got] == list(range(20))
    (kafka_line,) = [ln for ln in lines if ln.startswith("kafka ")]
    bootstrap = kafka_line.split()[1].split(",")
    with KafkaWire(bootstrap[0]) as w:  # each node's Kafka listener, as printed
        brokers = w.call(METADATA, 12, metadata_body("cli-demo")).brokers
    assert sorted(f"{b.host}:{b.port}" for b in brokers) == sorted(bootstrap)
    assert len(set(bootstrap)) == 3

    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0, err.read_text()
    print(f"stopped {time.monotonic() - started:.1f}s after SIGTERM")
    text = err.read_text()
    assert "Traceback" not in text and "error" not in text, text
    assert "stopping" in text
    wait_until(lambda: not any(_running(pid) for pid in children), 10, "etcd and every node gone")
    kept = tmp_path / "cluster"
    assert {"etcd", "node-1", "node-2", "node-3", "node-1.log"} <= {p.name for p in kept.iterdir()}


def _run(args: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tiered_log.cli", "dev-cluster", *args],
        cwd=ROOT,
        env=_env(**env),
        capture_output=True,
        text=True,
        timeout=120,
    )


def _one_error_line(p: subprocess.CompletedProcess[str]) -> str:
    lines = p.stderr.strip().splitlines()
    assert "Traceback" not in p.stderr, p.stderr
    errors = [ln for ln in lines if ln.startswith("tiered-log: error: ")]
    assert len(errors) == 1, p.stderr
    assert p.stdout == ""  # nothing announced as ready
    return errors[0]


def test_bad_input_is_one_line_and_nothing_is_left_running(tmp_path: Path) -> None:
    p = _run(["--nodes", "0"], tmp_path)
    assert p.returncode == 2 and "--nodes" in _one_error_line(p)
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    p = _run(["--dir", str(a_file)], tmp_path)
    assert p.returncode == 2 and "not a directory" in _one_error_line(p)
    p = _run(
        ["--dir", str(tmp_path / "x")], tmp_path, TIERED_LOG_ETCD_BIN=str(tmp_path / "no-etcd")
    )
    assert p.returncode == 1 and "no etcd binary" in _one_error_line(p)

    _skip_unless_etcd_runs()
    work = tmp_path / "bad-settings"
    p = _run(
        ["--nodes", "2", "--dir", str(work)], tmp_path, TIERED_LOG_REPLICATION_TIMEOUT_MS="1"
    )  # below its bound: serve refuses to start
    line = _one_error_line(p)
    assert p.returncode == 1, p.stderr
    assert "node 1 did not start" in line and str(work / "node-1.log") in line, line
    assert "replication_timeout_ms" in line, line
    # etcd was stopped: no process of this run is left (etcd names its data dir)
    leftover = [cmd for cmd in _commands().values() if str(work) in cmd]
    assert not leftover, leftover
