"""Shared pytest fixtures.

S3: by default the tests run against moto's S3 server, started once per session on
127.0.0.1 (a real HTTP endpoint, so botocore's whole stack is exercised). To run them
against a real S3-compatible endpoint (MinIO, AWS) instead, set::

    TIERED_LOG_TEST_S3_ENDPOINT=http://127.0.0.1:9000
    TIERED_LOG_TEST_S3_ACCESS_KEY=...   TIERED_LOG_TEST_S3_SECRET_KEY=...   (optional)
    TIERED_LOG_TEST_S3_REGION=us-east-1                                    (optional)
    TIERED_LOG_TEST_S3_BUCKET=existing-bucket  (optional: use unique prefixes in it
                                                instead of creating a bucket per test)
"""

from __future__ import annotations

import compileall
import contextlib
import logging
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config

import tiered_log
from tiered_log.remote.s3 import S3Storage

# Tests that run a whole cluster (etcd and several nodes) or a SparkSession: under
# pytest-xdist (``-n``, ``--dist loadgroup``) each group runs on one worker, one test at a
# time, so two clusters never compete for the cores and a group's session-scoped
# fixtures (one JVM, one etcd per module) start once. The paths are relative to tests/.
#
# "readme": the README's commands, run as a new user would (a fresh venv, pip from the
# index: the suite's longest test outside the two big groups). xdist hands out its work
# units largest first, groups before single tests, which go in collection order; these
# files come last in it, so as single tests one worker ran them alone at the very end
# (the other one idle for half a minute). As a group they start right after the others.
SERIAL_GROUPS: dict[str, tuple[str, ...]] = {
    "cluster": (
        "cluster/",
        "kafka_listener/test_admin.py",
        "kafka_listener/test_cluster.py",
        "kafka_listener/test_groups_cluster.py",
        "kafka_listener/test_idempotent_cluster.py",
        "remote/test_cluster_shipping.py",
        "test_cli_tables.py",
        "test_perf_cluster.py",
        "test_perf_rebuild.py",
    ),
    "spark": ("spark/",),
    "readme": ("test_readme_commands.py", "test_readme_setup.py"),
}


def pytest_configure(config: pytest.Config) -> None:
    """Compile the package's modules to bytecode once, before any test starts a process.

    The suite starts some six hundred Python processes (servers, tier workers, cluster
    nodes, ``tiered-log`` commands), each importing most of :mod:`tiered_log`. Where
    ``PYTHONDONTWRITEBYTECODE`` is set (as in some CI images) no import writes a
    ``.pyc``, and every one of those processes compiled the same modules from source
    again; a ``.pyc`` that exists is read all the same. In the xdist controller (or a run
    without xdist) only: the workers start after it."""
    if hasattr(config, "workerinput"):
        return
    compileall.compile_dir(Path(tiered_log.__file__).parent, quiet=1)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Put each test of :data:`SERIAL_GROUPS` in its xdist group (a no-op without xdist).
    First among the hooks: xdist's worker reads the groups in a hook of its own, which is
    registered after this file and so would otherwise run before it."""
    here = Path(__file__).parent
    for item in items:
        try:
            where = item.path.relative_to(here).as_posix()
        except ValueError:
            continue
        for group, prefixes in SERIAL_GROUPS.items():
            if where.startswith(prefixes):
                item.add_marker(pytest.mark.xdist_group(group))
                break


@dataclass(frozen=True)
class S3TestTarget:
    """The S3 endpoint the tests use, and how to reach it."""

    endpoint: str
    access_key: str | None
    secret_key: str | None
    region: str
    shared_bucket: str | None  # a real bucket to use prefixes in, instead of new buckets
    is_moto: bool


@dataclass(frozen=True)
class S3Location:
    """Where one test's objects go: a bucket and a key prefix ("" for a fresh bucket)."""

    bucket: str
    prefix: str


_FAKE_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SECURITY_TOKEN": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@pytest.fixture(scope="session")
def s3_target() -> Iterator[S3TestTarget]:
    """The S3 endpoint for the session: ``TIERED_LOG_TEST_S3_ENDPOINT``, else moto's
    server on 127.0.0.1 (with fake credentials in the environment while it runs)."""
    endpoint = os.environ.get("TIERED_LOG_TEST_S3_ENDPOINT")
    if endpoint:
        yield S3TestTarget(
            endpoint=endpoint,
            access_key=os.environ.get("TIERED_LOG_TEST_S3_ACCESS_KEY"),
            secret_key=os.environ.get("TIERED_LOG_TEST_S3_SECRET_KEY"),
            region=os.environ.get("TIERED_LOG_TEST_S3_REGION", "us-east-1"),
            shared_bucket=os.environ.get("TIERED_LOG_TEST_S3_BUCKET") or None,
            is_moto=False,
        )
        return
    from moto.server import ThreadedMotoServer

    with pytest.MonkeyPatch.context() as mp:
        for name, value in _FAKE_AWS_ENV.items():
            mp.setenv(name, value)
        werkzeug_log = logging.getLogger("werkzeug")
        old_level = werkzeug_log.level
        werkzeug_log.setLevel(logging.WARNING)  # no line per request
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        try:
            host, port = server.get_host_and_port()
            yield S3TestTarget(
                f"http://{host}:{port}", "testing", "testing", "us-east-1", None, is_moto=True
            )
        finally:
            server.stop()
            werkzeug_log.setLevel(old_level)


@pytest.fixture(scope="session")
def s3_endpoint(s3_target: S3TestTarget) -> str:
    """The S3 endpoint URL, e.g. ``http://127.0.0.1:PORT`` (moto's server by default)."""
    return s3_target.endpoint


@pytest.fixture(scope="session")
def s3_client(s3_target: S3TestTarget) -> Any:
    """A raw boto3 S3 client on the test endpoint, for looking behind S3Storage's back."""
    return boto3.session.Session().client(
        "s3",
        endpoint_url=s3_target.endpoint,
        region_name=s3_target.region,
        aws_access_key_id=s3_target.access_key,
        aws_secret_access_key=s3_target.secret_key,
        config=Config(s3={"addressing_style": "path"}, retries={"total_max_attempts": 3}),
    )


def _empty(client: Any, bucket: str, prefix: str) -> None:
    """Delete every object and multipart upload under ``prefix`` (best effort)."""
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        objects = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        if objects:
            client.delete_objects(Bucket=bucket, Delete={"Objects": objects, "Quiet": True})
    uploads = client.list_multipart_uploads(Bucket=bucket, Prefix=prefix).get("Uploads", [])
    for u in uploads:
        client.abort_multipart_upload(Bucket=bucket, Key=u["Key"], UploadId=u["UploadId"])


@pytest.fixture
def s3_location(s3_target: S3TestTarget, s3_client: Any) -> Iterator[S3Location]:
    """A fresh, empty place for one test: a new uniquely named bucket, or a unique prefix
    in ``TIERED_LOG_TEST_S3_BUCKET``. Emptied (and the bucket deleted) afterwards."""
    if s3_target.shared_bucket:
        loc = S3Location(s3_target.shared_bucket, f"tiered-log-test-{uuid.uuid4().hex[:12]}")
    else:
        loc = S3Location(f"tiered-log-test-{uuid.uuid4().hex[:12]}", "")
        kwargs: dict[str, Any] = {"Bucket": loc.bucket}
        if s3_target.region != "us-east-1":
            kwargs["CreateBucketConfiguration"] = {"LocationConstraint": s3_target.region}
        s3_client.create_bucket(**kwargs)
    try:
        yield loc
    finally:
        with contextlib.suppress(Exception):
            _empty(s3_client, loc.bucket, f"{loc.prefix}/" if loc.prefix else "")
            if not s3_target.shared_bucket:
                s3_client.delete_bucket(Bucket=loc.bucket)


@pytest.fixture
def s3_bucket(s3_location: S3Location) -> str:
    """The name of this test's bucket (fresh, unless a shared real bucket is configured;
    then use :func:`s3_location`'s prefix too, as :func:`s3_storage` does)."""
    return s3_location.bucket


@pytest.fixture
def s3_storage_factory(
    s3_target: S3TestTarget, s3_location: S3Location
) -> Iterator[Callable[..., S3Storage]]:
    """Make S3Storage instances on this test's location; keyword arguments override the
    defaults (``prefix`` is appended to the location's prefix). All closed afterwards."""
    made: list[S3Storage] = []

    def make(**overrides: Any) -> S3Storage:
        prefix = "/".join(p for p in (s3_location.prefix, overrides.pop("prefix", "")) if p)
        options: dict[str, Any] = {
            "endpoint_url": s3_target.endpoint,
            "region": s3_target.region,
            "access_key": s3_target.access_key,
            "secret_key": s3_target.secret_key,
        }
        options.update(overrides)
        storage = S3Storage(s3_location.bucket, prefix=prefix, **options)
        made.append(storage)
        return storage

    yield make
    for storage in made:
        storage.close()


@pytest.fixture
def s3_storage(s3_storage_factory: Callable[..., S3Storage]) -> S3Storage:
    """A ready S3Storage on this test's fresh bucket (or unique prefix)."""
    return s3_storage_factory()
