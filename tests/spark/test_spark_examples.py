"""The Spark examples, run as scripts against the session's service and bucket."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tiered_log.client import Client

from .conftest import ADMIN, new_topic, wait_for
from .test_batch_read import produce

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]


def _run(
    script: str, env: dict[str, str], cwd: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    """Run an example as a user in a venv would: PYSPARK_PYTHON unset and a ``python3``
    on PATH without the package (``bare_python_env``), in ``cwd`` (outside the project,
    so no process finds the package there by accident)."""
    return subprocess.run(
        [sys.executable, str(ROOT / "examples" / script), *args],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        cwd=cwd,
    )


def _common(service: Any, spark_bucket: str, s3_target: Any, topic: str) -> list[str]:
    return [
        "--service-url",
        service.url,
        "--bucket-url",
        f"s3://{spark_bucket}/log",
        "--topic",
        topic,
        "--token",
        ADMIN,
        "--s3-endpoint-url",
        s3_target.endpoint,
        "--s3-region",
        s3_target.region,
        "--s3-access-key",
        s3_target.access_key or "x",
        "--s3-secret-key",
        s3_target.secret_key or "x",
    ]


def test_history_example(
    client: Client,
    service: Any,
    spark_bucket: str,
    s3_target: Any,
    tmp_path: Path,
    bare_python_env: dict[str, str],
) -> None:
    """The example, run as a user in a venv runs it: PYSPARK_PYTHON unset and PATH's
    ``python3`` a bare venv without the package. The read works there, its executors
    running the registering interpreter (it failed with ModuleNotFoundError inside
    PYTHON_DATA_SOURCE_ERROR): this is also the test of ``register()`` choosing the
    workers' Python when PYSPARK_PYTHON is unset (test_worker_python has the other case)."""
    topic = new_topic(client, partitions=2, segment_bytes=16384)
    day = 86_400_000
    for part in (0, 1):  # three days of records, 100 a day
        produce(client, topic, part, 300, ts=lambda i: 1_700_000_000_000 + (i // 100) * day + i)
    # Both partitions partly archived: executors read the bucket.
    wait_for(
        lambda: min(client.bounds(topic, p).local_start_offset for p in (0, 1)) > 0, "shipping"
    )
    common = _common(service, spark_bucket, s3_target, topic)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    p = _run(
        "spark_history.py", bare_python_env, run_dir, *common, "--out", str(tmp_path / "parquet")
    )
    assert p.returncode == 0, p.stdout + p.stderr
    out = p.stdout
    planned = re.search(r"planned (\d+) split\(s\)", out)
    assert planned and int(planned.group(1)) >= 2, out  # archived splits and the tails
    assert "2023-11-14: 200 records" in out and "2023-11-16: 200 records" in out
    assert "partition 0: 300 records, offsets 0..299" in out
    assert "summary: 600 records over 3 day(s)" in out
    assert out.rstrip().endswith("spark_history OK")
    dates = sorted(d.name for d in (tmp_path / "parquet").iterdir() if d.name.startswith("date="))
    assert dates == ["date=2023-11-14", "date=2023-11-15", "date=2023-11-16"]


def test_follow_example(
    spark: Any,
    client: Client,
    service: Any,
    spark_bucket: str,
    s3_target: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """spark_follow's query, run twice on the test session (a restart in between)."""
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import spark_follow
    finally:
        sys.path.pop(0)
    topic = new_topic(client, segment_bytes=16384)
    produce(client, topic, 0, 300)
    common = _common(service, spark_bucket, s3_target, topic)
    ckpt = str(tmp_path / "ckpt")
    args = spark_follow.parse_args(
        [*common, "--checkpoint", ckpt, "--available-now", "--max-offsets-per-trigger", "200"]
    )
    assert spark_follow.follow(spark, args) == 0
    out = capsys.readouterr().out
    assert "summary: 300 records in 2 batch(es)" in out
    produce(client, topic, 0, 25, start=300)
    assert spark_follow.follow(spark, args) == 0
    out = capsys.readouterr().out
    assert re.search(r"batch \d+: 25 records \(p0 300\.\.324\)", out)
    assert out.rstrip().endswith("spark_follow OK")
