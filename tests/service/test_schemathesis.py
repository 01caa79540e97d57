"""Property-based run of schemathesis over the server's own OpenAPI document.

``st run`` generates requests (valid and invalid) for every operation, with the admin
token, plus stateful sequences (create a topic, then use it). The checks: no request
produces a 5xx, every answer's status is one the document lists for its operation, and
every request is answered within the request timeout (no hang).
Afterwards the server is still healthy and logged no unexpected error.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from .conftest import ADMIN, ServerProcess

HERE = Path(__file__).parent


def _st() -> list[str]:
    exe = Path(sys.executable).with_name("st")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("st")
    assert found, "schemathesis's st command is not installed"
    return [found]


def test_no_5xx_and_no_hang(server_factory: Any, tmp_path: Path) -> None:
    import json

    srv: ServerProcess = server_factory(
        auth_tokens=json.dumps({ADMIN: {"*": ["admin"]}}),
        max_total_partitions="300",  # generated topics may ask for up to 1000 partitions
        max_request_bytes=str(4 << 20),
    )
    with srv.client() as c:  # data for the generated requests to find
        assert c.post("/v1/topics", json={"name": "orders", "partitions": 2}).status_code == 201
        c.post(
            "/v1/topics/orders/partitions/0/records",
            json={"records": [{"value": f"r{i}"} for i in range(20)]},
        )
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIERED_LOG_")}
    env["PYTHONPATH"] = str(HERE) + os.pathsep + env.get("PYTHONPATH", "")
    env["SCHEMATHESIS_HOOKS"] = "schemathesis_hooks"
    cmd = [
        *_st(),
        "run",
        f"{srv.url}/openapi.json",
        "--header",
        f"Authorization: Bearer {ADMIN}",
        "--checks",
        "not_a_server_error,status_code_conformance",
        "--max-examples",
        "20",
        "--request-timeout",
        "15",
        "--workers",
        "1",  # CPython 3.11's ast.parse is not thread-safe (hypothesis uses it)
        "--seed",
        "20240601",
        "--no-color",
        "--report",
        "junit",
        "--report-dir",
        str(tmp_path / "report"),
    ]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-2000:]
    assert "Network Error" not in p.stdout and "Read timed out" not in p.stdout
    # Still healthy; nothing failed unexpectedly inside.
    assert httpx.get(srv.url + "/healthz", timeout=5).json()["status"] == "ok"
    log = srv.log()
    assert "failed unexpectedly" not in log and "Traceback" not in log, log[-4000:]
