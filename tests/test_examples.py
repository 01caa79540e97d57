"""Run every script in examples/ as a subprocess and check what it reports.

Each example starts the service (``python -m tiered_log.service``) as a real process on
a loopback port; the MinIO one starts moto's S3 server unless
``TIERED_LOG_TEST_S3_ENDPOINT`` names a real endpoint (MinIO, AWS), in which case it runs
against that. Two runs use ``--url`` against a server this test starts, with
authentication on.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
TOKEN = "examples-admin-token"

sys.path.insert(0, str(EXAMPLES))
from _service import LocalService  # noqa: E402


def run_example(name: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIERED_LOG_")}
    env["PYTHONUNBUFFERED"] = "1"
    return subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
    )


@pytest.fixture(scope="module")
def auth_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalService]:
    """A service with authentication on (one admin token), shipping every 100 ms."""
    base = tmp_path_factory.mktemp("examples-service")
    tokens = json.dumps({TOKEN: {"*": ["admin"]}})
    with LocalService(base / "data", auth_tokens=tokens, ship_interval_ms="100") as svc:
        yield svc


def test_quickstart_starts_its_own_service() -> None:
    p = run_example("quickstart.py", "--records", "50")
    assert p.returncode == 0, p.stdout + p.stderr
    out = p.stdout
    assert re.search(r"service listening on http://127\.0\.0\.1:\d+", out)
    assert "produced 50 records to partition 0: offsets 0..49" in out
    assert "produced 50 records to partition 1: offsets 0..49" in out
    assert "produced one raw binary record to partition 0 at offset 50" in out
    assert "consumed 51 records from partition 0" in out
    assert "consumed 50 records from partition 1" in out
    assert "record 0: key=b'k0' value=b'partition 0 record 0'" in out
    assert "service stopped" in out
    assert out.rstrip().endswith("quickstart OK")


def test_quickstart_against_a_running_service(auth_service: LocalService) -> None:
    p = run_example(
        "quickstart.py",
        "--url",
        auth_service.url,
        "--token",
        TOKEN,
        "--topic",
        "qs-url",
        "--partitions",
        "1",
        "--records",
        "20",
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert "starting the service" not in p.stdout
    assert "created topic 'qs-url' with 1 partition(s)" in p.stdout
    assert "consumed 21 records from partition 0" in p.stdout
    assert "deleted topic 'qs-url'" in p.stdout


def test_quickstart_wrong_token_fails_cleanly(auth_service: LocalService) -> None:
    p = run_example("quickstart.py", "--url", auth_service.url, "--token", "not-a-token")
    assert p.returncode == 1
    assert p.stderr.startswith("quickstart.py: error: AuthenticationError:"), p.stderr
    assert "Traceback" not in p.stderr
    assert "not-a-token" not in p.stderr + p.stdout
    assert "quickstart OK" not in p.stdout


def _bounds(out: str, label: str) -> dict[str, int]:
    m = re.search(label + r"\s+log_start=(\d+) local_start=(\d+) next=(\d+)", out)
    assert m, out
    return dict(zip(("log_start", "local_start", "next"), map(int, m.groups()), strict=True))


def test_long_retention_archive_reads_old_offsets_from_the_remote_tier() -> None:
    p = run_example("long_retention_archive.py", "--records", "600")
    assert p.returncode == 0, p.stdout + p.stderr
    out = p.stdout
    b = _bounds(out, "bounds after shipping:")
    assert b["log_start"] == 0 < b["local_start"] < b["next"] == 600
    assert "read offset 0 (from the remote tier): b'00000000|'" in out
    assert "read all 600 records back from offset 0" in out
    # The archived part really came from the remote tier.
    fetched = re.search(r"tiered_log_remote_fetch_bytes_total = (\d+)", out)
    assert fetched and int(fetched.group(1)) > 0, out
    copied = re.search(r"tiered_log_remote_copy_segments_total = (\d+)", out)
    assert copied and int(copied.group(1)) >= 2, out
    assert out.rstrip().endswith("long-retention archive OK")


def test_long_retention_archive_against_a_running_service(auth_service: LocalService) -> None:
    p = run_example(
        "long_retention_archive.py",
        "--url",
        auth_service.url,
        "--token",
        TOKEN,
        "--records",
        "300",
        "--topic",
        "archive-url",
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert _bounds(p.stdout, "bounds after shipping:")["local_start"] > 0
    assert "deleted topic 'archive-url'" in p.stdout


def test_minio_example_without_moto_says_what_it_needs() -> None:
    """No --endpoint and no moto (imports of it fail, as without the dev extra): one line
    naming moto, the dev extra and --endpoint; no traceback."""
    code = (
        "import runpy, sys\n"
        "sys.modules['moto'] = None  # import moto raises ModuleNotFoundError\n"
        f"sys.path.insert(0, {str(EXAMPLES)!r})\n"
        f"sys.argv = [{str(EXAMPLES / 'minio_local_testing.py')!r}]\n"
        f"runpy.run_path(sys.argv[0], run_name='__main__')\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIERED_LOG_")}
    p = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env
    )
    assert p.returncode == 2, p.stdout + p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert "moto is not installed" in lines[0] and "'.[dev]'" in lines[0]
    assert "--endpoint" in lines[0]


def test_minio_example_with_minio_down_says_what_to_do() -> None:
    """--endpoint where nothing listens: one line naming the endpoint and how to start
    MinIO (it printed a 29-frame botocore traceback)."""
    with socket.socket() as s:  # a port nothing listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"
    p = run_example("minio_local_testing.py", "--endpoint", endpoint, timeout=90)
    assert p.returncode == 2, p.stdout + p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert f"cannot reach the S3 endpoint {endpoint}" in lines[0]
    assert "docker compose -f infra/docker-compose.yml up -d minio" in lines[0]
    assert "Traceback" not in p.stdout + p.stderr


def test_minio_local_testing() -> None:
    args = ["--records", "500"]
    endpoint = os.environ.get("TIERED_LOG_TEST_S3_ENDPOINT")
    if endpoint:
        args += ["--endpoint", endpoint]
        for opt, var in (
            ("--access-key", "TIERED_LOG_TEST_S3_ACCESS_KEY"),
            ("--secret-key", "TIERED_LOG_TEST_S3_SECRET_KEY"),
            ("--region", "TIERED_LOG_TEST_S3_REGION"),
            ("--bucket", "TIERED_LOG_TEST_S3_BUCKET"),
        ):
            if os.environ.get(var):
                args += [opt, os.environ[var]]
    p = run_example("minio_local_testing.py", *args, timeout=180)
    assert p.returncode == 0, p.stdout + p.stderr
    out = p.stdout
    if not endpoint:
        assert "started moto's S3 server on http://127.0.0.1:" in out
    assert re.search(r"TIERED_LOG_REMOTE_URL=s3://[a-z0-9.-]+/example-[0-9a-f]{8}", out)
    m = re.search(r"by kind: (.*)", out)
    assert m and ".log" in m.group(1) and ".json" in m.group(1), out
    assert "read all 500 records back" in out
    assert "topics restored from the bucket: ['orders']" in out
    assert "offset 0 read from the bucket: b'record 000000'" in out
    assert "removed the example's objects" in out
    assert out.rstrip().endswith("MinIO/moto local testing OK")
    # Secrets are not printed.
    assert "testing" not in out.replace("local testing", "")
