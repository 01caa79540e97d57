"""``tiered-log perf spark-scan`` with a tiny archive: the report's shape and its counts."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.spark

RUN = "import sys, tiered_log.cli as cli, tiered_log.perf.spark; sys.exit(cli.main(sys.argv[1:]))"


def test_perf_spark_scan_small() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIERED_LOG_")}
    env.update(PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    p = subprocess.run(
        [
            sys.executable,
            "-c",
            RUN,
            "perf",
            "spark-scan",
            "--json",
            "--progress",
            "--records",
            "4000",
            "--segment-bytes",
            "1048576",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    report = json.loads(p.stdout)
    assert report["benchmark"] == "spark-scan"
    assert report["params"]["records"] == 4000 and report["params"]["record_bytes"] == 1024
    assert set(report["results"]) == {"local[1]", "local[2]", "parquet"}
    for r in report["results"].values():
        assert r["rows_per_s"] > 0 and r["seconds"] > 0 and r["splits"] >= 1
    assert report["results"]["local[1]"]["splits"] >= 4  # one per ~1 MiB segment
    assert set(report["targets"]) == {"scaling_local2_vs_local1", "local2_vs_parquet"}
    for t in report["targets"].values():
        assert t["met"] == (t["measured"] >= t["target"])
    assert "[perf] building an archive of 4,000" in p.stderr
    assert "scanning the archive" in p.stderr
