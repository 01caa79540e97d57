"""A command starts without importing what it does not use: ``tiered-log --version`` and
the client commands do not import the log, the tier or the HTTP service; the tier's worker
process does not import the broker or the partition log; ``import tiered_log`` imports
its public classes on first use; a single node's server loads neither boto3 nor httpx.
Checked in a fresh interpreter (what ``sys.modules``
holds after the command), never by time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tiered_log.cluster.etcd_process import free_port

pytestmark = pytest.mark.timeout(60)

SERVER_SIDE = (
    "tiered_log.local.log",
    "tiered_log.partition",
    "tiered_log.broker.broker",
    "tiered_log.service.wire",
    "tiered_log.service.server",
    "tiered_log.config",
    "boto3",
    "fastapi",
)


def last_line(code: str) -> str:
    """The last line ``code`` prints in a fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=50, check=True
    )
    return done.stdout.strip().splitlines()[-1]


def loaded_after(code: str) -> list[str]:
    """Which of :data:`SERVER_SIDE` (and httpx, the client) a fresh interpreter holds
    after running ``code``."""
    loaded: list[str] = json.loads(
        last_line(
            f"{code}\nimport json, sys\n"
            f"print(json.dumps([m for m in {[*SERVER_SIDE, 'httpx', 'tiered_log.client']!r} "
            "if m in sys.modules]))"
        )
    )
    return loaded


def test_version_imports_nothing_heavy() -> None:
    code = "import contextlib, io\nfrom tiered_log.cli import main\n" + (
        "with contextlib.redirect_stdout(io.StringIO()): assert main(['--version']) == 0"
    )
    assert loaded_after(code) == []


def test_a_client_command_imports_the_client_and_not_the_service() -> None:
    code = (
        "import contextlib, io\nfrom tiered_log.cli import main\n"
        "with contextlib.redirect_stderr(io.StringIO()):\n"
        "    assert main(['topics', 'list', '--url', 'http://127.0.0.1:9', "
        "'--retry-timeout', '0']) == 1"
    )
    assert loaded_after(code) == ["httpx", "tiered_log.client"]


def test_the_tier_worker_does_not_import_the_broker_or_the_log() -> None:
    loaded = loaded_after("from tiered_log.remote.worker import main")
    assert not {"tiered_log.partition", "tiered_log.broker.broker", "fastapi"} & set(loaded)


def test_the_package_imports_its_classes_on_first_use() -> None:
    code = (
        "import tiered_log\nassert 'tiered_log.local.log' not in __import__('sys').modules\n"
        "assert 'Log' in dir(tiered_log) and 'TieredLog' in tiered_log.__all__"
    )
    assert loaded_after(code) == []
    code = "from tiered_log import Log, TieredLog\nassert Log.__name__ == 'Log'"
    assert {"tiered_log.local.log", "tiered_log.partition"} <= set(loaded_after(code))
    with pytest.raises(subprocess.CalledProcessError):
        loaded_after("import tiered_log\ntiered_log.NoSuchName")


def test_the_kafka_listener_does_not_import_hypothesis() -> None:
    """kio registers test-data strategies whenever hypothesis is importable (it is here:
    the dev extra installs it); the listener hides it while kio loads. A process that
    imported hypothesis first keeps kio's strategies."""
    pytest.importorskip("hypothesis")
    code = "import sys\nimport tiered_log.kafka\nimport kio.schema.produce.v9\n"
    assert last_line(code + "print('hypothesis' in sys.modules)") == "False"
    code = "import hypothesis.strategies as st\nimport tiered_log.kafka\n"
    code += "from kio.static.primitive import i32\nprint(st.from_type(i32).example() is not None)"
    assert last_line(code) == "True"


def test_a_single_node_server_loads_neither_boto3_nor_httpx(tmp_path: Path) -> None:
    """A server whose tier is a local directory, serving a produce and a fetch over
    HTTP, holds neither boto3 (the S3 tier's) nor httpx (a cluster's forwarding and
    scrubbing, and the client's): checked inside the serving process once it answered."""
    port = free_port()
    code = f"""
import json, os, sys, threading, urllib.request
os.environ.update(TIERED_LOG_DATA_DIR={str(tmp_path / "data")!r}, TIERED_LOG_PORT="{port}",
                  TIERED_LOG_KAFKA_PORT="0", TIERED_LOG_ACCESS_LOG="false")
url = "http://127.0.0.1:{port}"

def call(path, body=None):
    req = urllib.request.Request(url + path, data=body and json.dumps(body).encode(),
                                 headers={{"Content-Type": "application/json"}})
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.status

def check():
    import time
    for _ in range(400):
        try:
            call("/healthz")
            break
        except OSError:
            time.sleep(0.05)
    call("/v1/topics", {{"name": "t", "partitions": 1}})
    call("/v1/topics/t/records", {{"records": [{{"key": "k", "value": "v"}}]}})
    call("/v1/topics/t/partitions/0/records?offset=0")
    print(json.dumps([m for m in ("boto3", "httpx") if m in sys.modules]), flush=True)
    os._exit(0)

threading.Thread(target=check, daemon=True).start()
from tiered_log.service.server import serve_main
serve_main([])
"""
    assert last_line(code) == "[]"
