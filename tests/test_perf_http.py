"""``tiered-log perf http-produce`` / ``perf http-fetch`` on tiny inputs: the report's
shape, never speed (a loaded CI machine says nothing about the code).

The commands run in a subprocess through ``tiered_log.cli.main`` (the ``perf`` group of
``tiered_log.cli`` declares them); each starts a real server process on a loopback port.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tiered_log.perf.http import latency_figures, percentile

RUN = "import sys, tiered_log.cli as cli, tiered_log.perf.http; sys.exit(cli.main(sys.argv[1:]))"


def perf(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", RUN, "perf", *args], capture_output=True, text=True, timeout=300
    )


def check_common(
    report: dict[str, Any], kind: str, records: int, target: str, limits: tuple[str, ...] = ()
) -> None:
    assert report["benchmark"] == kind
    p = report["params"]
    assert p["records"] == records and p["record_bytes"] == 1024 and p["repeat"] == 1
    assert p["topic_config"] == {"flush_messages": None, "remote_enabled": False}
    assert set(report["results"]) == {"http", "library"}
    for r in report["results"].values():
        for field in ("seconds", "mb_per_s", "records_per_s"):
            assert isinstance(r[field], int | float) and r[field] > 0, r
        assert len(r["runs_seconds"]) == 1
        assert r["records_per_s"] == pytest.approx(records / r["seconds"], rel=0.01)
    want = (
        report["results"]["http"]["records_per_s"] / report["results"]["library"]["records_per_s"]
    )
    assert set(report["targets"]) == {target, *limits}
    t = report["targets"][target]
    assert t["baseline"] == "library" and t["min_ratio"] == 0.5
    assert t["ratio"] == pytest.approx(want, rel=0.01, abs=0.001)  # rounded to 3 places
    assert t["met"] == (t["ratio"] >= t["min_ratio"])
    assert report["met"] == all(x["met"] for x in report["targets"].values())
    assert report["ratios"] == {k: x["ratio"] for k, x in report["targets"].items()}
    assert report["environment"]["python"]


def test_http_produce_json(tmp_path: Path) -> None:
    p = perf(
        "http-produce",
        "--json",
        "--records",
        "3000",
        "--batch",
        "500",
        "--repeat",
        "1",
        "--single",
        "50",
        "--dir",
        str(tmp_path),
    )
    assert p.returncode == 0, p.stderr
    report = json.loads(p.stdout)
    check_common(report, "http-produce", 3000, "produce_vs_library")
    assert report["params"]["batch"] == 500
    lat = report["latency"]["single_record_produce"]
    assert set(lat) == {"http", "library"}
    for f in lat.values():
        assert f["count"] == 50
        assert 0 < f["p50_ms"] <= f["p99_ms"] <= f["max_ms"]
    # Progress notes go to stderr, never into the JSON on stdout.
    assert "[perf] http-produce" in p.stderr
    assert list(tmp_path.iterdir()) == [], "the benchmark's files are removed afterwards"


def test_http_fetch_json_and_table(tmp_path: Path) -> None:
    p = perf("http-fetch", "--json", "--records", "2500", "--repeat", "1", "--dir", str(tmp_path))
    assert p.returncode == 0, p.stderr
    report = json.loads(p.stdout)
    check_common(
        report,
        "http-fetch",
        2500,
        "fetch_vs_library",
        ("local_vs_loopback", "archived_vs_loopback"),
    )
    assert "latency" not in report
    # The batches-only fetch next to the loopback limit, local and archived, one round.
    b = report["batches"]
    assert set(b["figures"]) == {"loopback", "local", "archived"}
    for f in b["figures"].values():
        assert f["mb_per_s"] > 0 and len(f["runs_mb_per_s"]) == 1
    assert b["bytes"]["local"] > 2500 * 1024 and 0 < b["bytes"]["archived"] < b["bytes"]["local"]
    assert b["archived_remote_fetches_while_timed"] == 0  # the chunk cache was warm
    for key, minimum in (("local_vs_loopback", 0.8), ("archived_vs_loopback", 0.7)):
        t = report["targets"][key]
        assert t["baseline"] == "loopback" and t["min_ratio"] == minimum
        assert t["range"][0] <= t["ratio"] <= t["range"][1]
        assert t["met"] == (t["ratio"] >= minimum)
    assert list(tmp_path.iterdir()) == []

    p = perf("http-fetch", "--records", "1200", "--batch", "500", "--repeat", "1", "--no-progress")
    assert p.returncode == 0, p.stderr
    assert "perf http-fetch: 1,200 records of 1024 bytes, 500 a batch" in p.stdout
    assert "fetch_vs_library: ratio" in p.stdout
    assert "fetch_batches vs loopback" in p.stdout and "local_vs_loopback: median" in p.stdout


def test_http_produce_durable_flag_and_no_latency(tmp_path: Path) -> None:
    p = perf(
        "http-produce",
        "--json",
        "--records",
        "1000",
        "--repeat",
        "1",
        "--single",
        "0",
        "--durable",
        "--dir",
        str(tmp_path),
    )
    assert p.returncode == 0, p.stderr
    report = json.loads(p.stdout)
    assert report["params"]["durable"] is True
    assert report["params"]["topic_config"]["flush_messages"] == 1
    assert "latency" not in report


def test_bad_arguments_are_usage_errors() -> None:
    p = perf("http-produce", "--records", "0")
    assert p.returncode == 2
    assert p.stderr.startswith("tiered-log: error:") and "--records" in p.stderr
    p = perf("http-produce", "--single", "-1")
    assert p.returncode == 2 and "--single" in p.stderr


def test_percentiles() -> None:
    values = [float(i) for i in range(1, 101)]
    assert percentile(values, 0.5) == 50.0
    assert percentile(values, 0.99) == 99.0
    assert percentile(values, 1.0) == 100.0
    assert percentile([3.0], 0.99) == 3.0
    assert percentile([], 0.5) == 0.0
    f = latency_figures([0.001, 0.002, 0.003])
    assert f == {"count": 3, "p50_ms": 2.0, "p99_ms": 3.0, "max_ms": 3.0, "mean_ms": 2.0}
