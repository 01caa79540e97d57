"""``tiered-log perf append`` / ``perf read`` on tiny inputs: the report's shape, not speed.

No speed assertions here: a loaded CI machine says nothing about the code. The figures
are checked to be positive numbers and the ratios to be consistent with them.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tiered_log.perf.common import Progress

SYSTEMS = {"tiered_log", "plain_file", "sqlite_wal"}


def perf(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tiered_log.cli", "perf", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def check_report(report: dict[str, Any], kind: str, targets: set[str], records: int) -> None:
    assert report["benchmark"] == kind
    assert report["params"]["repeat"] == 1
    assert set(report["workloads"]) == {"1KiB", "100B"}
    for name, w in report["workloads"].items():
        assert w["records"] == records
        assert w["record_bytes"] == (1024 if name == "1KiB" else 100)
        assert set(w["results"]) == SYSTEMS
        for r in w["results"].values():
            for field in ("seconds", "mb_per_s", "records_per_s"):
                assert isinstance(r[field], int | float) and r[field] > 0, (name, r)
            assert len(r["runs_seconds"]) == 1
        ours = w["results"]["tiered_log"]["records_per_s"]
        assert set(w["ratios"]) == {"vs_plain_file", "vs_sqlite_wal"}
        for base in ("plain_file", "sqlite_wal"):
            got = w["ratios"][f"vs_{base}"]
            assert got > 0
            assert got == pytest.approx(
                ours / w["results"][base]["records_per_s"], rel=0.01, abs=0.001
            )  # ratios are rounded to 3 places
    assert set(report["targets"]) == targets
    for name, t in report["targets"].items():
        assert t["workload"] == "1KiB" and t["min_ratio"] > 0 and t["ratio"] > 0
        assert isinstance(t["met"], bool) and t["met"] == (t["ratio"] >= t["min_ratio"])
        assert report["ratios"][name] == t["ratio"]
    assert report["met"] == all(t["met"] for t in report["targets"].values())
    assert report["environment"]["python"]


def test_perf_append_json(tmp_path: Path) -> None:
    p = perf("append", "--json", "--records", "5000", "--repeat", "1", "--dir", str(tmp_path))
    assert p.returncode == 0, p.stderr
    check_report(
        json.loads(p.stdout), "append", {"append_vs_plain_file", "append_vs_sqlite_wal"}, 5000
    )
    assert list(tmp_path.iterdir()) == [], "the benchmark's files are removed afterwards"


def test_perf_read_json(tmp_path: Path) -> None:
    p = perf(
        "read",
        "--json",
        "--records",
        "3000",
        "--small-records",
        "3000",
        "--repeat",
        "1",
        "--dir",
        str(tmp_path),
    )
    assert p.returncode == 0, p.stderr
    report = json.loads(p.stdout)
    check_report(report, "read", {"read_vs_sqlite_wal"}, 3000)
    for w in report["workloads"].values():  # each reader's CPU time, and ours against it
        cpu = w["cpu_seconds"]
        assert set(cpu) == SYSTEMS and all(isinstance(c, float) and c >= 0 for c in cpu.values())
        assert set(w["cpu_ratios"]) == {"vs_plain_file", "vs_sqlite_wal"}
        if cpu["tiered_log"] > 0:
            assert w["cpu_ratios"]["vs_sqlite_wal"] == pytest.approx(
                cpu["sqlite_wal"] / cpu["tiered_log"], rel=0.01, abs=0.002
            )
    assert list(tmp_path.iterdir()) == []


def test_perf_table() -> None:
    p = perf("read", "--records", "1000", "--repeat", "1", "--no-progress")
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("perf read (")
    assert "sqlite_wal" in p.stdout and "read_vs_sqlite_wal" in p.stdout
    assert p.stderr == ""  # --no-progress: nothing on stderr


def test_progress_is_rate_limited_and_silent_off_a_terminal() -> None:
    now = [0.0]
    out = io.StringIO()
    pr = Progress(100, "job", enabled=True, stream=out, clock=lambda: now[0])
    for _ in range(50):
        pr.advance(1)  # no time passes: no redraw
    assert out.getvalue() == ""
    now[0] = 1.0
    pr.advance(10)
    assert out.getvalue() == "\rjob: 60/100 records (60%) 60/s"
    pr.close()
    assert out.getvalue().endswith("\n")

    quiet = io.StringIO()  # StringIO is not a terminal: off unless forced
    with Progress(None, "x", stream=quiet, clock=lambda: now[0]) as p2:
        now[0] = 5.0
        p2.advance(5)
    assert quiet.getvalue() == ""
