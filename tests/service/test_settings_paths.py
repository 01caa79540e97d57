"""Where the service keeps its data and its archive, as a user sets them.

The default remote tier lives beside the data directory, so the disk-loss story holds
without settings: wipe the data directory, start again, the topics and their archived
records come back. Relative paths are relative to the working directory wherever they
are set, and the server logs them absolute. Each test runs real server processes."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from .conftest import ServerProcess, free_port, service_env

pytestmark = pytest.mark.timeout(120)

TINY = {"segment_bytes": 4096, "local_retention_bytes": 0}


def _fill(srv: ServerProcess, topic: str, n: int = 200) -> None:
    """Create ``topic`` with tiny segments, append ``n`` records, wait until shipped."""
    with httpx.Client(base_url=srv.url, timeout=10) as c:
        r = c.post("/v1/topics", json={"name": topic, "partitions": 1, "config": TINY})
        assert r.status_code == 201, r.text
        for lo in range(0, n, 20):
            recs = [{"value": f"record-{i:04d}-" + "x" * 100} for i in range(lo, lo + 20)]
            r = c.post(f"/v1/topics/{topic}/partitions/0/records", json={"records": recs})
            assert r.status_code == 200, r.text
        deadline = time.monotonic() + 30
        while c.get(f"/v1/topics/{topic}/partitions/0/bounds").json()["local_start_offset"] < 100:
            assert time.monotonic() < deadline, "segments were not shipped"
            time.sleep(0.05)


def _settings_line(log: str) -> dict[str, Any]:
    m = re.search(r"settings: (\{.*\})", log)
    assert m, log
    out: dict[str, Any] = json.loads(m.group(1))
    return out


def test_default_archive_survives_a_wiped_data_directory(
    server_factory: Callable[..., ServerProcess],
) -> None:
    srv = server_factory(ship_interval_ms="50")
    _fill(srv, "orders")
    assert srv.stop() == 0
    shown = _settings_line(srv.log())
    archive = srv.data_dir.parent / f"{srv.data_dir.name}-remote"
    assert shown["data_dir"] == str(srv.data_dir)
    assert shown["remote_url"] == archive.as_uri()
    assert archive.is_dir() and any(archive.rglob("*.rli"))
    shutil.rmtree(srv.data_dir)  # the disk is lost
    srv.start()
    with httpx.Client(base_url=srv.url, timeout=10) as c:
        assert c.get("/v1/topics/orders").status_code == 200
        r = c.get("/v1/topics/orders/partitions/0/records", params={"offset": 0})
        assert r.status_code == 200, r.text
        assert r.json()["records"][0]["value"].startswith("record-0000-")


def test_an_archive_inside_the_data_directory_is_kept_with_a_warning(
    server_factory: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    """A data directory from before (its archive in ``<data_dir>/remote``) goes on
    using it, and the log says it is lost with the data directory."""
    data = tmp_path / "old" / "data"
    (data / "remote").mkdir(parents=True)
    srv = server_factory(data_dir=data, ship_interval_ms="50")
    _fill(srv, "legacy")
    assert any((data / "remote").rglob("*.rli"))
    assert not (data.parent / "data-remote").exists()
    log = srv.log()
    assert "inside the data directory" in log and "TIERED_LOG_REMOTE_URL" in log
    assert _settings_line(log)["remote_url"] == (data / "remote").as_uri()


def test_relative_paths_are_relative_to_the_working_directory(tmp_path: Path) -> None:
    """``remote_url = "rel-remote"`` in a config file: the server starts (it said
    'cannot open the data directory: ... has no scheme'), its archive is ``rel-remote``
    in the working directory and the settings line shows both paths absolute."""
    work = tmp_path / "work"
    work.mkdir()
    cfg = tmp_path / "conf" / "tiered.toml"
    cfg.parent.mkdir()
    cfg.write_text('data_dir = "d"\nremote_url = "rel-remote"\nship_interval_ms = 50\n')
    port = free_port()
    env = service_env(port=str(port), host="127.0.0.1", access_log="false")
    log_path = tmp_path / "server.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tiered_log.cli", "serve", "--config", str(cfg)],
            cwd=work,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    srv = ServerProcess(work / "d", tmp_path, {})
    srv.port = port
    srv.proc = proc
    srv.log_path = log_path
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, log_path.read_text()
            try:
                if httpx.get(srv.url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.05)
        _fill(srv, "rel")
        assert any((work / "rel-remote").rglob("*.rli"))
        shown = _settings_line(log_path.read_text())
        assert shown["data_dir"] == str(work / "d")
        assert shown["remote_url"] == str(work / "rel-remote")
        assert os.path.isabs(shown["data_dir"])
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
