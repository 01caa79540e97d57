"""Every object-store call of a partition's remote tier runs in the tier's worker
processes, never in the server's interpreter: a real ``tiered-log serve`` on moto's S3
ships segments (uploads, manifests, the metadata record, the offset reservations, the
partition snapshot) and applies retention (deletes, listings) while a hook in every Python process of the test
(a ``sitecustomize`` on ``PYTHONPATH``) notes which process each botocore request ran
in. Once the server serves, no request may come from its process: not for a new
topic's metadata object, not while it ships, snapshots and deletes (its start, before
it serves, lists the bucket's topics itself)."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from service.conftest import ServerProcess

pytestmark = pytest.mark.timeout(120)

HOOK = """
import os
_path = os.environ.get("BROKER_TEST_BOTO_CALLS")
if _path:
    import botocore.endpoint

    _send = botocore.endpoint.Endpoint._send

    def _noted(self, request):
        with open(_path, "a") as f:
            f.write(f"{os.getpid()} {request.method} {request.url}\\n")
        return _send(self, request)

    botocore.endpoint.Endpoint._send = _noted
"""


def _calls(path: Path) -> list[tuple[int, str]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        pid, rest = line.split(" ", 1)
        out.append((int(pid), rest))
    return out


@pytest.fixture
def server(
    tmp_path: Path, s3_target: Any, s3_client: Any, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[ServerProcess, Path]]:
    if not s3_target.is_moto:
        pytest.skip("counts the requests of a moto server of the test's own")
    hook_dir = tmp_path / "hook"
    hook_dir.mkdir()
    (hook_dir / "sitecustomize.py").write_text(HOOK)
    calls = tmp_path / "boto-calls.txt"
    monkeypatch.setenv("BROKER_TEST_BOTO_CALLS", str(calls))
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(hook_dir), os.environ.get("PYTHONPATH", "")])
    )
    bucket = f"off-server-{uuid.uuid4().hex[:8]}"
    s3_client.create_bucket(Bucket=bucket)
    settings = {
        "remote_url": f"s3://{bucket}",
        "s3_endpoint_url": s3_target.endpoint,
        "s3_region": s3_target.region,
        "s3_access_key": s3_target.access_key or "testing",
        "s3_secret_key": s3_target.secret_key or "testing",
        "ship_interval_ms": "100",
        "remote_worker_processes": "1",
        "topic_defaults__segment_bytes": "1024",
        "topic_defaults__local_retention_bytes": "0",
        "topic_defaults__retention_bytes": "4096",
    }
    s = ServerProcess(tmp_path / "data", tmp_path, settings).start()
    try:
        yield s, calls
    finally:
        s.stop()


def test_no_store_call_runs_in_the_server_process(server: tuple[ServerProcess, Path]) -> None:
    s, calls = server
    assert s.proc is not None
    pid = s.proc.pid
    before = len(_calls(calls))
    r = httpx.post(f"{s.url}/v1/topics", json={"name": "ship", "partitions": 1}, timeout=10)
    assert r.status_code == 201, r.text
    for i in range(40):
        r = httpx.post(
            f"{s.url}/v1/topics/ship/partitions/0/records",
            json={"records": [{"value": f"{i}-" + "x" * 200} for _ in range(4)]},
            timeout=10,
        )
        assert r.status_code == 200, r.text

    def bounds() -> dict[str, Any]:
        got: dict[str, Any] = httpx.get(
            f"{s.url}/v1/topics/ship/partitions/0/bounds", timeout=10
        ).json()
        return got

    deadline = time.monotonic() + 60
    while not bounds()["log_start_offset"] > 0:  # shipped, then deleted by retention
        assert time.monotonic() < deadline, bounds()
        time.sleep(0.2)
    seen = _calls(calls)[before:]
    assert any("delete" in call or call.startswith("DELETE") for _p, call in seen)  # retention
    assert any(call.startswith("PUT") and call.endswith(".rli") for _p, call in seen)  # copies
    assert any(call.startswith("PUT") and call.endswith("/meta.json") for _p, call in seen)
    assert any(call.startswith("PUT") and call.endswith("/snapshot.bin") for _p, call in seen)
    in_server = [call for p, call in seen if p == pid]
    assert in_server == [], in_server[:5]
