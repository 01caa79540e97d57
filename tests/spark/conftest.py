"""Fixtures for the Spark data source tests: one local SparkSession, one service.

The SparkSession (``local[2]``, ``PYSPARK_PYTHON`` = this interpreter, ``SPARK_LOCAL_IP``
= 127.0.0.1, the ``tiered_log`` source registered) and the service (a real process on a
loopback port, its remote tier in a bucket on moto's S3 server) are shared by the whole
session; each test uses its own topics. Segments are tiny (4 KiB, 4 KiB chunks... the
service's minimum) and shipped within ~50 ms, so a few hundred records span both tiers.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from service.conftest import ServerProcess  # tests/service/conftest.py

from tiered_log.client import Client

ADMIN = "spark-admin-token"
READER = "spark-reader-token"
TOKENS = {ADMIN: {"*": ["admin"]}, READER: {"ro.*": ["read"]}}


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """A local[2] SparkSession with the tiered_log source registered."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession

    from tiered_log.spark import register

    session = (
        SparkSession.builder.master("local[2]")
        .appName("tiered-log-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def bare_python_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment of a user in a venv who has not set ``PYSPARK_PYTHON``: the
    ``python3`` on PATH is a bare venv without this package, ``SPARK_LOCAL_IP`` is
    127.0.0.1 and no ``TIERED_LOG_*`` setting leaks in."""
    bare = tmp_path_factory.mktemp("bare-venv")
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True, timeout=120
    )
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TIERED_LOG_", "PYSPARK_")) and k not in ("VIRTUAL_ENV", "PYTHONPATH")
    }
    env["PATH"] = os.pathsep.join([str(bare / "bin"), "/usr/bin", "/bin"])
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    env["PYTHONUNBUFFERED"] = "1"
    return env


@pytest.fixture(scope="session")
def spark_bucket(s3_target: Any, s3_client: Any) -> Iterator[str]:
    """A bucket (on moto's server) for the session's service."""
    name = f"tiered-log-spark-{uuid.uuid4().hex[:10]}"
    s3_client.create_bucket(Bucket=name)
    yield name
    with contextlib.suppress(Exception):
        for page in s3_client.get_paginator("list_objects_v2").paginate(Bucket=name):
            objs = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            if objs:
                s3_client.delete_objects(Bucket=name, Delete={"Objects": objs})
        s3_client.delete_bucket(Bucket=name)


@pytest.fixture(scope="session")
def s3_options(s3_target: Any) -> dict[str, str]:
    """The Spark options that reach the test bucket's endpoint."""
    return {
        "s3.endpointUrl": s3_target.endpoint,
        "s3.region": s3_target.region,
        "s3.accessKey": s3_target.access_key or "",
        "s3.secretKey": s3_target.secret_key or "",
    }


@pytest.fixture(scope="session")
def service(
    tmp_path_factory: pytest.TempPathFactory, s3_target: Any, spark_bucket: str
) -> Iterator[ServerProcess]:
    """The service, remote tier in ``spark_bucket``, auth on (see TOKENS)."""
    base = tmp_path_factory.mktemp("spark-service")
    settings = {
        "auth_tokens": json.dumps(TOKENS),
        "remote_url": f"s3://{spark_bucket}/log",
        "s3_endpoint_url": s3_target.endpoint,
        "s3_region": s3_target.region,
        "s3_access_key": s3_target.access_key or "",
        "s3_secret_key": s3_target.secret_key or "",
        "ship_interval_ms": "50",
        "remote_chunk_bytes": "4096",
        "maintenance_interval_ms": "100",
    }
    srv = ServerProcess(base / "data", base, settings)
    srv.start()
    yield srv
    with contextlib.suppress(Exception):
        srv.stop(timeout=15)
    srv.kill()


@pytest.fixture
def client(service: ServerProcess) -> Iterator[Client]:
    with Client(service.url, ADMIN) as c:
        yield c


@pytest.fixture
def read_options(
    service: ServerProcess, spark_bucket: str, s3_options: dict[str, str]
) -> Callable[..., dict[str, str]]:
    """Options of a read of ``topic`` (plus ``extra``)."""

    def make(topic: str, **extra: str) -> dict[str, str]:
        return {
            "serviceUrl": service.url,
            "token": ADMIN,
            "topic": topic,
            "bucketUrl": f"s3://{spark_bucket}/log",
            **s3_options,
            **extra,
        }

    return make


def wait_for(cond: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


_n = iter(range(1_000_000))


def new_topic(client: Client, partitions: int = 1, **config: Any) -> str:
    """A fresh topic with tiny segments that leave local disk once shipped."""
    name = f"sp{next(_n)}-{uuid.uuid4().hex[:6]}"
    cfg = {"segment_bytes": 4096, "local_retention_bytes": 0, **config}
    client.create_topic(name, partitions, cfg)
    return name


__all__ = ["ADMIN", "READER", "new_topic", "wait_for"]
