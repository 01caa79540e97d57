"""Fixtures that run the service as a real process on a free loopback port.

``ServerProcess`` starts ``python -m tiered_log.service`` with settings in its
environment (a temporary data directory, a free port on 127.0.0.1), waits until
``/healthz`` answers, and stops it with a signal. Every test talks to it over HTTP.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

ADMIN = "admin-token-0123"
READER = "reader-token-4567"
WRITER = "writer-token-89ab"
TOKENS: dict[str, dict[str, list[str]]] = {
    ADMIN: {"*": ["admin"]},
    READER: {"ro.*": ["read"]},
    WRITER: {"ro.*": ["write"]},
}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def service_env(**settings: str) -> dict[str, str]:
    """The test process's environment without TIERED_LOG_* variables, plus ``settings``;
    no Kafka listener unless ``settings`` names a ``kafka_port`` (the default, 9092,
    would collide between the servers tests run at once)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIERED_LOG_")}
    settings = {"kafka_port": "0", **settings}
    env.update({f"TIERED_LOG_{k.upper()}": v for k, v in settings.items()})
    env["PYTHONUNBUFFERED"] = "1"
    return env


class PortTakenError(RuntimeError):
    """The server exited because a port it was given is in use."""


class ServerProcess:
    """One server process; restartable on the same data directory and port."""

    def __init__(
        self, data_dir: Path, log_dir: Path, settings: dict[str, str], scheme: str = "http"
    ) -> None:
        self.data_dir = data_dir
        self.log_dir = log_dir
        self.settings = dict(settings)
        self.port = free_port()
        self.kafka_port = free_port()
        """Its Kafka listener's port (unless ``settings`` names one; off with auth)."""
        self.scheme = scheme
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.log_path = log_dir / "server-0.log"

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    @property
    def kafka_bootstrap(self) -> str:
        """``host:port`` of its Kafka listener."""
        return f"127.0.0.1:{self.settings.get('kafka_port', self.kafka_port)}"

    def start(self, timeout: float = 30.0, verify: Any = True) -> ServerProcess:
        """Start the server and wait until it answers ``/healthz``. Its ports were free
        when picked, but another process (the other xdist worker's connections) may take
        one before the server binds it: a first start that exits saying so is tried again
        on new ports, up to three times (a restart keeps its ports)."""
        first = self.starts == 0
        for attempt in range(3):
            try:
                return self._start(timeout, verify)
            except PortTakenError:
                if not first or attempt == 2:
                    raise
                self.port, self.kafka_port = free_port(), free_port()
        raise AssertionError("unreachable")

    def _start(self, timeout: float, verify: Any) -> ServerProcess:
        settings = {"kafka_port": str(self.kafka_port), **self.settings}
        env = service_env(
            data_dir=str(self.data_dir),
            port=str(self.port),
            host="127.0.0.1",
            access_log="false",
            **settings,
        )
        self.log_path = self.log_dir / f"server-{self.starts}.log"
        self.starts += 1
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tiered_log.service"],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        if isinstance(verify, str):
            import ssl

            verify = ssl.create_default_context(cafile=verify)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                out = self.log()
                error = PortTakenError if "Address already in use" in out else RuntimeError
                raise error(f"server exited with {self.proc.returncode}:\n{out}")
            try:
                r = httpx.get(self.url + "/healthz", timeout=1.0, verify=verify)
                if r.status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"server did not become healthy:\n{self.log()}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        """Signal the server and wait for it; returns its exit status."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def restart(self) -> ServerProcess:
        self.stop()
        return self.start()

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def all_logs(self) -> str:
        return "".join(
            p.read_text(errors="replace") for p in sorted(self.log_dir.glob("server-*.log"))
        )

    def client(self, token: str | None = ADMIN, **kw: Any) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30.0, **kw)


def timeouts_server(factory: pytest.TempPathFactory, name: str) -> Iterator[ServerProcess]:
    """A module's server without auth, with 1 s header and body timeouts (the HTTP
    hardening tests); stopped after the module."""
    base: Path = factory.mktemp(name)
    s = ServerProcess(base / "data", base, {"header_timeout_s": "1", "body_timeout_s": "1"})
    s.start()
    yield s
    with contextlib.suppress(Exception):
        s.stop(timeout=15)
    s.kill()


def new_topic(srv: ServerProcess, name: str, partitions: int = 1) -> str:
    """Create topic ``name`` on ``srv`` (no auth); its name."""
    r = httpx.post(
        srv.url + "/v1/topics", json={"name": name, "partitions": partitions}, timeout=10
    )
    assert r.status_code == 201, r.text
    return name


@pytest.fixture
def server_factory(tmp_path: Path) -> Iterator[Any]:
    """Start servers on demand (``server_factory(**settings)``); all stopped at the end."""
    started: list[ServerProcess] = []
    counter = [0]

    def make(start: bool = True, data_dir: Path | None = None, **settings: str) -> ServerProcess:
        counter[0] += 1
        base = tmp_path / f"srv{counter[0]}"
        base.mkdir()
        srv = ServerProcess(data_dir or base / "data", base, settings)
        started.append(srv)
        if start:
            srv.start()
        return srv

    yield make
    for srv in started:
        with contextlib.suppress(Exception):
            srv.stop(timeout=15)
        srv.kill()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server with authentication on (see TOKENS), shared by a test module."""
    import json

    base = tmp_path_factory.mktemp("server")
    srv = ServerProcess(
        base / "data", base, {"auth_tokens": json.dumps(TOKENS), "max_request_bytes": str(1 << 20)}
    )
    srv.start()
    yield srv
    with contextlib.suppress(Exception):
        srv.stop(timeout=15)
    srv.kill()


@pytest.fixture
def admin(server: ServerProcess) -> Iterator[httpx.Client]:
    with server.client(ADMIN) as c:
        yield c


_names = iter(range(1_000_000))


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    """A fresh topic name per test (tests share the module's server)."""
    import re

    return f"t{next(_names)}-" + re.sub(r"[^A-Za-z0-9._-]", "-", request.node.name[:40])
