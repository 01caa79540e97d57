"""EtcdProcess: a real etcd comes up healthy on free ports, logs to its file, keeps its
data across stop/kill and restart on the same ports, and a paused (SIGSTOP) etcd makes
every MetaStore call fail within the request timeout, then work again on resume."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tiered_log.cluster.etcd_process import EtcdProcess, EtcdStartError
from tiered_log.errors import MetadataUnavailableError

from .conftest import new_store

pytestmark = pytest.mark.timeout(60)


def test_starts_healthy_and_logs_to_its_file(etcd: EtcdProcess) -> None:
    assert etcd.healthy()
    assert etcd.client_url.startswith("http://127.0.0.1:")
    assert etcd.client_port != etcd.peer_port
    assert etcd.log_path.parent == etcd.work_dir
    assert '"msg"' in etcd.log_path.read_text()  # etcd's JSON log lines, not the terminal
    assert (etcd.data_dir / "member").is_dir()


@pytest.mark.parametrize("kill", [False, True], ids=["stop", "kill"])
def test_restart_keeps_ports_and_data(etcd: EtcdProcess, kill: bool) -> None:
    url = etcd.client_url
    with new_store(etcd) as store:
        assert store.create("k", {"n": 1})
        before = store.get("k")
        etcd.restart(kill=kill)
        assert etcd.client_url == url
        after = store.get("k")  # the same store: its pooled connection was cut
    assert after == before


def test_stopped_etcd_is_metadata_unavailable(etcd: EtcdProcess) -> None:
    with new_store(etcd, timeout_s=1.0) as store:
        store.get("k")
        etcd.stop()
        assert etcd.pid is None
        t0 = time.monotonic()
        with pytest.raises(MetadataUnavailableError) as err:
            store.get("k")
        assert time.monotonic() - t0 < 1.5
        assert err.value.retriable and err.value.status == 503
        assert "\n" not in str(err.value) and etcd.client_url in str(err.value)
        etcd.start()
        assert store.get("k") is None


def test_paused_etcd_times_out_then_resumes(etcd: EtcdProcess) -> None:
    with new_store(etcd, timeout_s=1.0) as store:
        assert store.create("k", {"v": 1})
        etcd.pause()
        try:
            for call in (
                lambda: store.get("k"),
                lambda: store.put_if("k", {"v": 2}, 0),
                lambda: store.grant(5),
            ):
                t0 = time.monotonic()
                with pytest.raises(MetadataUnavailableError):
                    call()
                elapsed = time.monotonic() - t0
                assert 0.9 < elapsed < 2.5, elapsed  # bounded by the 1 s timeout
        finally:
            etcd.resume()
        v = store.get("k")
        assert v is not None and v.value == {"v": 1}


def test_binary_that_fails_reports_its_log(tmp_path: Path) -> None:
    proc = EtcdProcess(tmp_path, binary="/bin/false", start_timeout_s=5)
    with pytest.raises(EtcdStartError, match="exited with status 1"):
        proc.start()
    assert proc.pid is None


def test_missing_binary(tmp_path: Path) -> None:
    with pytest.raises(EtcdStartError, match="cannot run"):
        EtcdProcess(tmp_path, binary=str(tmp_path / "no-etcd")).start()
