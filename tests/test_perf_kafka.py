"""``tiered-log perf kafka`` on a tiny input: the report's shape and that every record
produced was read back, locally and from the archive; never speed (a loaded CI machine
says nothing about the code).

The command runs in a subprocess through ``tiered_log.cli.main``; it starts a real server
process with its Kafka listener on loopback ports and drives it with confluent-kafka.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from perf_cli import run_perf

MIB = 2
RECORDS = MIB * 1024


def test_perf_kafka_json(tmp_path: Path) -> None:
    out, err = run_perf(
        ["kafka", "--json", "--mib", str(MIB), "--repeat", "2", "--dir", str(tmp_path)]
    )
    report = json.loads(out)
    assert "[perf] kafka" in err  # progress notes on stderr, not in the JSON
    assert report["benchmark"] == "kafka"
    params = report["params"]
    assert params["records"] == RECORDS and params["record_bytes"] == 1024
    assert params["repeat"] == 2 and params["producer_config"]["acks"] == 1

    produce = report["produce"]
    assert produce["records"] == RECORDS
    cpu = produce["cpu_s_per_mb"]
    assert set(cpu) == {"server", "client", "library"}
    assert all(len(v) == 2 and all(x >= 0 for x in v) for v in cpu.values())
    assert any(x > 0 for x in cpu["library"])  # the append itself takes CPU
    assert len(produce["server_cpu_vs_library"]) == 2
    consume = report["consume"]
    # Every record produced was read back: the local topic whole (a warm-up read and
    # one per round), the archived range likewise.
    archived = consume["records"]["archived"]
    assert consume["records"]["local"] == RECORDS
    assert 0 < archived < RECORDS  # the active segment stays local
    assert consume["records_read"] == {"local": [RECORDS] * 3, "archived": [archived] * 3}
    assert consume["bytes"]["local"] > RECORDS * 1024
    assert consume["bytes"]["archived"] > archived * 1024
    assert isinstance(consume["archived_remote_fetches_while_timed"], int)
    for name in ("local", "archived"):
        sides = consume["cpu_s_per_mb"][name]
        assert set(sides) == {"server", "client"}
        assert all(len(v) == 2 and all(x >= 0 for x in v) for v in sides.values())

    for section, names in (
        ("produce", ("kafka", "library")),
        ("consume", ("loopback", "local", "archived")),
    ):
        for name in names:
            f = report[section][name]
            assert len(f["runs_mb_per_s"]) == 2 and min(f["runs_mb_per_s"]) > 0
            assert f["mb_per_s"] == max(f["runs_mb_per_s"])

    keys = {"produce_vs_library", "consume_local_vs_loopback", "consume_archived_vs_loopback"}
    assert set(report["ratios"]) == set(report["ranges"]) == set(report["targets"]) == keys
    mins = {"produce_vs_library": 0.5, "consume_local_vs_loopback": 0.5}
    for key, t in report["targets"].items():
        rounds = report["per_round"][key]
        assert len(rounds) == 2 and all(r > 0 for r in rounds)
        assert t["ratio"] == report["ratios"][key] == pytest.approx(sum(rounds) / 2, abs=0.001)
        assert t["range"] == [min(rounds), max(rounds)]
        assert t["min_ratio"] == mins.get(key, 0.4)
        assert t["met"] == (t["ratio"] >= t["min_ratio"])
    assert report["met"] == all(t["met"] for t in report["targets"].values())
