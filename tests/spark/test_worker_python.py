"""The source works when registered from a venv whose ``python3`` is not on PATH.

Spark's Python workers run ``PYSPARK_PYTHON``, or ``python3`` from PATH: in a venv that
is not activated (or a PATH where another ``python3`` comes first) that interpreter lacks
this package. Each test runs a driver script in its own process (one SparkContext per
process, created with the environment under test), with a bare venv's ``python3`` first
on PATH and the working directory outside the project, so nothing finds the package by
accident.

The other case, PYSPARK_PYTHON unset with a ``python3`` on PATH that lacks the package
(the read works: the workers run the interpreter that registered the source), is
``test_spark_examples.py::test_history_example``: it runs an example script as such a
user, its executors reading archived segments, and checks every record read."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tiered_log.client import Client

from .conftest import ADMIN, new_topic, wait_for
from .test_batch_read import produce

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

DRIVER = """
import json, sys
from pyspark.sql import SparkSession
import tiered_log.spark

spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
try:
    tiered_log.spark.register(spark)
    df = spark.read.format("tiered_log").options(**json.loads(sys.argv[1])).load()
    print("ROWS", df.count(), df.rdd.getNumPartitions())
except Exception as exc:
    print("ERROR", type(exc).__name__, str(exc))
finally:
    spark.stop()
"""


def run_driver(
    tmp_path: Path, env: dict[str, str], options: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    return subprocess.run(
        [sys.executable, str(script), json.dumps(options)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )


@pytest.fixture(scope="module")
def archived_topic(service: Any) -> str:
    """One partition of 200 records, most of them archived."""
    with Client(service.url, ADMIN) as c:
        topic = new_topic(c, segment_bytes=16384)
        produce(c, topic, 0, 200)
        wait_for(lambda: c.bounds(topic, 0).local_start_offset > 0, "shipping")
    return topic


def test_chosen_python_without_the_package_fails_in_one_line(
    bare_python_env: dict[str, str],
    archived_topic: str,
    read_options: Callable[..., dict[str, str]],
    tmp_path: Path,
) -> None:
    """PYSPARK_PYTHON set to an interpreter that cannot import the source: register()
    says so in one line naming PYSPARK_PYTHON and the interpreter that would do."""
    bare = bare_python_env["PATH"].split(":")[0] + "/python3"
    env = {**bare_python_env, "PYSPARK_PYTHON": bare}
    p = run_driver(tmp_path, env, read_options(archived_topic))
    assert p.returncode == 0, p.stdout + p.stderr
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith(("ROWS", "ERROR"))]
    assert len(lines) == 1 and lines[0].startswith("ERROR InvalidArgumentError "), p.stdout
    msg = lines[0]
    assert f"PYSPARK_PYTHON={bare}" in msg
    assert "No module named" in msg and sys.executable in msg
    assert "Traceback" not in p.stdout
