"""``tiered-log perf ship|remote-read|produce-latency`` and ``tiered-log describe``, run as
real subprocesses (``python -m tiered_log.cli``). The benchmarks run with tiny sizes: the
tests check the report's shape and that every figure is a positive number, never speed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from tiered_log import LogConfig, ProducerRecord
from tiered_log.format import naming
from tiered_log.partition import TieredLog
from tiered_log.perf.remote import moto_server_process
from tiered_log.remote.fs import LocalDirStorage
from tiered_log.remote.storage import RemoteStorage
from tiered_log.remote.tier import TierConfig


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tiered_log.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).parents[2],
    )


def run_json(*args: str) -> dict[str, Any]:
    proc = cli(*args)
    assert proc.returncode == 0, proc.stderr
    report: dict[str, Any] = json.loads(proc.stdout)
    return report


def positive(*values: Any) -> bool:
    return all(isinstance(v, int | float) and not isinstance(v, bool) and v > 0 for v in values)


# ---- perf ------------------------------------------------------------------------------


def test_perf_ship_json() -> None:
    r = run_json(
        "perf", "ship", "--json", "--total-mib", "2", "--segment-mib", "1", "--repeat", "2"
    )
    assert r["benchmark"] == "ship" and r["endpoint"] == "moto" and r["repeat"] == 2
    for runs in r["runs_seconds"].values():
        assert len(runs) == 2 and positive(*runs)
    assert r["segments"] >= 2 and r["bytes"] >= 2 << 20
    assert positive(r["ship_mb_s"], r["baseline_boto3_upload_mb_s"], r["ratio_vs_boto3"])
    assert r["ratio_vs_boto3"] == pytest.approx(
        r["ship_mb_s"] / r["baseline_boto3_upload_mb_s"], rel=0.1, abs=0.01
    )
    assert r["target"] == 0.8 and r["met"] == (r["ratio_vs_boto3"] >= 0.8)
    assert positive(r["baseline_boto3_two_at_a_time_mb_s"], r["ratio_vs_boto3_two_at_a_time"])


def test_perf_remote_read_json_and_lines(s3_endpoint: str) -> None:
    r = run_json(
        "perf",
        "remote-read",
        "--json",
        "--total-mib",
        "2",
        "--segment-mib",
        "1",
        "--repeat",
        "1",
        "--endpoint",
        s3_endpoint,
    )
    assert set(r["runs_seconds"]) == {"remote_read", "ranges_read", "records_read", "baseline"}
    assert positive(r["ranges_read_mb_s"], r["ranges_ratio_vs_boto3"])
    assert r["benchmark"] == "remote-read" and r["endpoint"] == s3_endpoint
    assert r["records"] * 1024 >= 2 << 20 and r["bytes"] == r["baseline_bytes"]
    assert positive(
        r["remote_read_mb_s"],
        r["remote_read_records_s"],
        r["baseline_boto3_download_mb_s"],
        r["ratio_vs_boto3"],
        r["remote_fetch_requests"],
    )
    assert positive(
        r["records_read_mb_s"], r["records_read_records_s"], r["records_ratio_vs_boto3"]
    )
    assert r["target"] == 0.7 and r["met"] == (r["ratio_vs_boto3"] >= 0.7)
    assert r["records_met"] == (r["records_ratio_vs_boto3"] >= 0.7)
    # Without --json: one "key: value" line per figure on stdout, progress on stderr.
    proc = cli(
        "perf",
        "remote-read",
        "--total-mib",
        "1",
        "--segment-mib",
        "1",
        "--repeat",
        "1",
        "--endpoint",
        s3_endpoint,
    )
    assert proc.returncode == 0, proc.stderr
    assert "benchmark: remote-read" in proc.stdout.splitlines()
    assert "[perf]" in proc.stderr and "[perf]" not in proc.stdout


def test_perf_produce_latency_json() -> None:
    r = run_json(
        "perf",
        "produce-latency",
        "--json",
        "--appends",
        "100",
        "--backlog-mib",
        "3",
        "--copies-in-flight",
        "1",
        "--upload-bytes-per-sec",
        "100000000",
        "--fetch-bytes-per-sec",
        "100000000",
    )
    assert r["benchmark"] == "produce-latency" and r["appends_per_phase"] == 100
    assert r["settings"] == {
        "upload_bytes_per_sec": 100_000_000,
        "fetch_bytes_per_sec": 100_000_000,
        "copies_in_flight": 1,
    }
    assert r["catchup_records_per_s"] > 0
    assert set(r["phases"]) == {"off", "shipping", "shipping_and_catchup_reader"}
    for p in r["phases"].values():
        assert set(p) == {"p50_ms", "p99_ms", "mean_ms"}
        assert positive(*p.values()) and p["p50_ms"] <= p["p99_ms"]
    assert positive(r["p99_ratio_shipping_vs_off"], r["p99_ratio_catchup_vs_off"])
    assert r["catchup_records_read"] > 0  # the reader really read remote data meanwhile
    assert r["targets"] == {"shipping": 1.5, "catchup": 2.0}
    assert r["met"] == {
        "shipping": r["p99_ratio_shipping_vs_off"] <= 1.5,
        "catchup": r["p99_ratio_catchup_vs_off"] <= 2.0,
    }
    assert r["bucket_cpu"] == "idle"  # the default: moto stands in for another machine
    # Where the slowest appends' time went: the parts the OS tells add up to the latency.
    assert set(r["slowest_1pct"]) == set(r["phases"])
    for tail in r["slowest_1pct"].values():
        assert set(tail) == {"latency_ms", "on_cpu_ms", "waiting_for_cpu_ms", "blocked_ms"}
        assert tail["latency_ms"] > 0 and min(tail.values()) >= 0
        parts = tail["on_cpu_ms"] + tail["waiting_for_cpu_ms"] + tail["blocked_ms"]
        assert parts >= tail["latency_ms"] * 0.99


def test_perf_produce_latency_bucket_cpu() -> None:
    """``--bucket-cpu normal`` says so in the report; a priority that does not exist is a
    usage error naming the option."""
    r = run_json(
        "perf", "produce-latency", "--json", "--appends", "20", "--backlog-mib", "1",
        "--rounds", "1", "--bucket-cpu", "normal",
    )  # fmt: skip
    assert r["bucket_cpu"] == "normal" and r["rounds"] == 1
    proc = cli("perf", "produce-latency", "--bucket-cpu", "high")
    assert proc.returncode == 2 and "--bucket-cpu" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="SCHED_IDLE is Linux's")
def test_an_idle_bucket_server_runs_at_sched_idle() -> None:
    """moto's server started with ``cpu="idle"`` runs under ``SCHED_IDLE``, every thread
    of it (its request threads too), and answers requests."""
    import boto3

    def server_pid(url: str) -> int:
        """This thread's child serving ``url`` (other tests may have left children too:
        a shared tier worker)."""
        port = url.rsplit(":", 1)[1]
        children = Path(f"/proc/self/task/{threading.get_native_id()}/children")
        args = {c: Path(f"/proc/{c}/cmdline").read_bytes() for c in children.read_text().split()}
        (pid,) = [int(c) for c, a in args.items() if a.endswith(b"\0-p\0" + port.encode() + b"\0")]
        return pid

    with moto_server_process("idle") as url:
        pid = server_pid(url)
        s3 = boto3.client(
            "s3",
            endpoint_url=url,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        s3.create_bucket(Bucket="idle")  # a request: the server starts a thread for it
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        assert tids and all(os.sched_getscheduler(t) == os.SCHED_IDLE for t in tids)
    with moto_server_process("normal") as url:
        assert os.sched_getscheduler(server_pid(url)) == os.SCHED_OTHER


def test_perf_produce_latency_rounds() -> None:
    """``--rounds``: the three phases that many times in turn, each round's figures, and
    the targets judged on the median of the rounds' p99 ratios; progress on stderr."""
    proc = cli(
        "perf",
        "produce-latency",
        "--json",
        "--appends",
        "40",
        "--backlog-mib",
        "2",
        "--rounds",
        "3",
    )
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    assert r["rounds"] == 3 and [x["round"] for x in r["round_figures"]] == [1, 2, 3]
    for x in r["round_figures"]:
        assert set(x["phases"]) == {"off", "shipping", "shipping_and_catchup_reader"}
        for p in x["phases"].values():
            assert positive(*p.values()) and p["p50_ms"] <= p["p99_ms"]
        off = x["phases"]["off"]["p99_ms"]
        assert x["p99_ratio_shipping_vs_off"] == pytest.approx(
            x["phases"]["shipping"]["p99_ms"] / off, rel=0.01, abs=0.002
        )
        assert x["p99_ratio_catchup_vs_off"] == pytest.approx(
            x["phases"]["shipping_and_catchup_reader"]["p99_ms"] / off, rel=0.01, abs=0.002
        )
    for kind in ("shipping", "catchup"):
        ratios = sorted(x[f"p99_ratio_{kind}_vs_off"] for x in r["round_figures"])
        assert r[f"median_p99_ratio_{kind}_vs_off"] == ratios[1]
        assert r[f"p99_ratio_{kind}_vs_off"] == ratios[1]  # the judged ratio is the median
        assert r["met"][kind] == (ratios[1] <= r["targets"][kind])
        assert positive(r[f"pooled_p99_ratio_{kind}_vs_off"])
    assert r["catchup_records_read"] > 0
    for i in (1, 2, 3):
        assert f"round {i}/3: phase 3/3" in proc.stderr
    assert "[perf]" not in proc.stdout
    proc = cli("perf", "produce-latency", "--rounds", "0")
    assert proc.returncode == 2 and "--rounds" in proc.stderr


def test_perf_bad_arguments() -> None:
    proc = cli("perf", "ship", "--total-mib", "0")
    assert proc.returncode == 2 and "must be at least 1" in proc.stderr


# ---- describe --------------------------------------------------------------------------


def make_log(directory: Path, storage: RemoteStorage, log_id: str) -> TieredLog:
    """A log with shipped, unshipped and active segments; left open for inspection."""
    tlog = TieredLog(
        directory,
        log_id=log_id,
        storage=storage,
        config=LogConfig(segment_bytes=4096, index_interval_bytes=512),
        tier=TierConfig(chunk_bytes=1024, local_retention_bytes=5000),
        start_shipper=False,
    )
    for i in range(0, 200, 20):  # segments of about 20 records
        tlog.append_batch([ProducerRecord(b"x" * 100, timestamp=1000 + i + j) for j in range(20)])
    tlog.flush()
    tlog.roll()
    tlog.tier_once()  # ships these, drops some locally
    tlog.append_batch([ProducerRecord(b"y" * 100, timestamp=5000 + i) for i in range(60)])
    tlog.flush()
    tlog.roll()  # sealed, not shipped: copy lag
    tlog.append(b"z")
    tlog.flush()
    return tlog


def test_describe_a_data_directory(tmp_path: Path) -> None:
    storage = LocalDirStorage(tmp_path / "bucket")
    data = tmp_path / "data"
    t1 = make_log(data / "topics" / "orders" / "0", storage, "orders-0")
    want = t1.describe()
    t1.close()
    TieredLog(data / "topics" / "plain" / "0", config=LogConfig()).close()  # local only
    (data / "trash").mkdir()

    r = run_json("describe", str(data), "--json")
    logs = {d["log_id"]: d for d in r["logs"]}
    assert set(logs) == {"orders-0", "0"}
    d = logs["orders-0"]
    assert d["directory"] == str(data / "topics" / "orders" / "0")
    assert d["remote_url"] == storage.url and d["remote_enabled"] is True
    assert d["bounds"] == want["bounds"]
    assert d["local_segments"] == want["local_segments"]
    assert d["remote_segments"] == want["remote_segments"]
    b = d["bounds"]
    assert 0 < b["local_start_offset"] <= b["remote_end_offset"] == 200 < b["next_offset"] == 261
    remote = d["remote_segments"]
    assert remote[0]["base_offset"] == 0 and remote[-1]["next_offset"] == 200
    assert all(s["state"] == "COPY_FINISHED" and s["size"] > 0 for s in remote)
    assert d["remote_bytes"] == sum(s["size"] for s in remote)
    assert len(remote) > 1
    unshipped = [s for s in d["local_segments"] if s["sealed"] and not s["copied"]]
    assert [s["base_offset"] for s in unshipped] == [200]
    assert d["copy_lag_segments"] == 1 and d["copy_lag_bytes"] == unshipped[0]["size"] > 0
    assert d["local_bytes"] == sum(s["size"] for s in d["local_segments"])
    assert d["cache_hit_rate"] is None  # this process read nothing
    assert logs["0"]["remote_enabled"] is False

    proc = cli("describe", str(data / "topics" / "orders" / "0"))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "orders-0" in out and storage.url in out and "copy lag: 1 segment, " in out
    assert "not copied" in out and "COPY_FINISHED" in out and "active" in out


def test_describe_needs_a_remote_location(tmp_path: Path) -> None:
    storage = LocalDirStorage(tmp_path / "bucket")
    log_dir = tmp_path / "log"
    make_log(log_dir, storage, "orders-0").close()
    (log_dir / naming.REMOTE_DIR / "location.json").unlink()
    proc = cli("describe", str(log_dir))
    assert proc.returncode == 2
    assert "location is not recorded" in proc.stderr and "--remote" in proc.stderr
    r = run_json(
        "describe", str(log_dir), "--json", "--remote", storage.url, "--log-id", "orders-0"
    )
    assert r["logs"][0]["log_id"] == "orders-0"
    assert r["logs"][0]["bounds"]["remote_end_offset"] == 200
    assert cli("describe", str(tmp_path / "missing")).returncode == 2
    (tmp_path / "empty").mkdir()
    proc = cli("describe", str(tmp_path / "empty"))
    assert proc.returncode == 2 and "no log directories" in proc.stderr


def test_describe_s3_log_uses_the_recorded_endpoint(tmp_path: Path, s3_storage: Any) -> None:
    make_log(tmp_path / "log", s3_storage, "events-3").close()
    r = run_json("describe", str(tmp_path / "log"), "--json")
    d = r["logs"][0]
    assert d["log_id"] == "events-3" and d["remote_url"] == s3_storage.url
    assert d["bounds"]["remote_end_offset"] == 200 and d["copy_lag_segments"] == 1
