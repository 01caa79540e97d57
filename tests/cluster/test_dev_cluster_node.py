"""``tiered-log dev-cluster`` pointed at S3 and driven from another shell: ``--remote-url``
(and ``$TIERED_LOG_REMOTE_URL``, which it ignored) with the S3 endpoint and credentials
from the environment, and ``dev-cluster node N stop|wipe|start --dir D`` acting on node N
of the running cluster (restarting a node it started took copying its environment from
``/proc``). A real dev-cluster subprocess, etcd from the wheel, moto's S3 server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tiered_log.client import Client

from .conftest import _skip_unless_etcd_runs
from .test_dev_cluster_cli import ROOT, _env, _running, _start

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]


def wait_for(what: str, fn: Any, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = fn()
        if got:
            return got
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def node_cmd(work: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tiered_log.cli", "dev-cluster", "node", *args, "--dir", str(work)],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def objects(s3_client: Any, bucket: str, prefix: str) -> list[str]:
    r = s3_client.list_objects_v2(Bucket=bucket, Prefix=prefix)
    return [o["Key"] for o in r.get("Contents", [])]


def test_remote_url_from_the_environment_and_node_restart(
    tmp_path: Path, s3_target: Any, s3_client: Any
) -> None:
    _skip_unless_etcd_runs()
    bucket = s3_target.shared_bucket or f"dev-{uuid.uuid4().hex[:12]}"
    if s3_target.shared_bucket is None:
        s3_client.create_bucket(Bucket=bucket)
    prefix = f"dc-{uuid.uuid4().hex[:8]}"
    work = tmp_path / "cluster"
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    env = _env(
        TIERED_LOG_REMOTE_URL=f"s3://{bucket}/{prefix}",  # as a laptop user sets it
        TIERED_LOG_S3_ENDPOINT_URL=s3_target.endpoint,
        TIERED_LOG_S3_ACCESS_KEY=s3_target.access_key or "",
        TIERED_LOG_S3_SECRET_KEY=s3_target.secret_key or "",
        TIERED_LOG_S3_REGION=s3_target.region,
    )
    proc = _start(["--nodes", "2", "--dir", str(work), "--lease-ttl", "2"], out, err, env)
    try:
        ready = wait_for("ready", lambda: "ready " in out.read_text(), 120)
        assert ready, err.read_text()
        state = json.loads((work / "dev-cluster.json").read_text())
        assert state["pid"] == proc.pid and state["remote_url"] == f"s3://{bucket}/{prefix}"
        settings = state["nodes"]["1"]["settings"]
        assert settings["TIERED_LOG_S3_SECRET_KEY"] == "<set>"  # no credentials on disk
        assert settings["TIERED_LOG_S3_ENDPOINT_URL"] == s3_target.endpoint
        n2 = state["nodes"]["2"]
        urls = [state["nodes"][k]["url"] for k in ("1", "2")]
        with Client(urls) as c:
            c.create_topic("t", 1, {"segment_bytes": 4096}, replication_factor=2)
            for i in range(0, 300, 30):
                c.produce("t", 0, [b"v%04d-" % k + b"x" * 100 for k in range(i, i + 30)])
        wait_for(
            "a segment shipped to the bucket",
            lambda: any(k.endswith(".log") for k in objects(s3_client, bucket, prefix)),
        )
        assert not (work / "remote").exists()  # the environment's bucket, not D/remote

        p = node_cmd(work, "2", "wipe")  # a running node is not wiped
        assert p.returncode == 1 and "stop it first" in p.stderr, p.stderr
        old_pid = n2["pid"]
        p = node_cmd(work, "2", "stop")
        assert p.returncode == 0 and f"pid {old_pid}" in p.stdout, p.stderr
        assert not _running(old_pid)
        p = node_cmd(work, "2", "wipe")
        assert p.returncode == 0, p.stderr
        assert not Path(n2["data_dir"]).exists()
        p = node_cmd(work, "2", "start")
        assert p.returncode == 0 and n2["url"] in p.stdout, p.stderr
        state = json.loads((work / "dev-cluster.json").read_text())
        new_pid = state["nodes"]["2"]["pid"]
        assert new_pid not in (None, old_pid) and _running(new_pid)
        assert httpx.get(n2["url"] + "/healthz", timeout=5).status_code == 200

        def back_in_isr() -> bool:
            got = httpx.get(urls[0] + "/v1/cluster", timeout=5).json()
            return any(p["topic"] == "t" and sorted(p["isr"]) == [1, 2] for p in got["partitions"])

        wait_for("node 2 rebuilt and in sync", back_in_isr, 60)
        assert Path(n2["data_dir"]).is_dir()  # rebuilt from the leader and the bucket
        assert node_cmd(work, "7", "stop").returncode == 1
        assert node_cmd(work, "2", "start").returncode == 1  # already running
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        for node in json.loads((work / "dev-cluster.json").read_text())["nodes"].values():
            if node["pid"] and _running(node["pid"]):
                os.kill(node["pid"], signal.SIGKILL)
    assert proc.returncode == 0, err.read_text()
    assert "Traceback" not in err.read_text()
    p = node_cmd(work, "2", "stop")  # the dev-cluster is gone
    assert p.returncode == 1 and "not running" in p.stderr
