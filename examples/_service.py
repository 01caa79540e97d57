"""Helpers shared by the examples: run ``python -m tiered_log.service`` as a child process.

:class:`LocalService` starts the service on a free loopback port with the settings given
(as ``TIERED_LOG_*`` environment variables), waits for ``GET /healthz`` and stops it with
SIGTERM (a graceful shutdown: every acknowledged record is flushed). Its output goes to
a log file in the data directory's parent, printed if the service fails to start.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

import httpx


def free_port() -> int:
    """A TCP port that is free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalService:
    """The tiered-log service as a child process on ``127.0.0.1:<free port>``."""

    def __init__(self, data_dir: Path, **settings: str) -> None:
        self.data_dir = Path(data_dir)
        self.port = free_port()
        self.kafka_port = free_port()  # its Kafka listener (9092 may be taken)
        self.settings = settings
        self.log_path = self.data_dir.parent / f"{self.data_dir.name}-server.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> LocalService:
        """Start the process and wait until ``/healthz`` answers 200."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("TIERED_LOG_")}
        env.update(
            {
                "TIERED_LOG_DATA_DIR": str(self.data_dir),
                "TIERED_LOG_HOST": "127.0.0.1",
                "TIERED_LOG_PORT": str(self.port),
                "TIERED_LOG_KAFKA_PORT": str(self.kafka_port),
                "TIERED_LOG_ACCESS_LOG": "false",
                "PYTHONUNBUFFERED": "1",
            }
        )
        env.update({f"TIERED_LOG_{k.upper()}": v for k, v in self.settings.items()})
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tiered_log.service"],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"the service exited with status {self.proc.returncode}:\n" + self.log_text()
                )
            try:
                if httpx.get(self.url + "/healthz", timeout=1.0).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("the service did not become healthy:\n" + self.log_text())

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM and wait (SIGKILL after ``timeout``); returns the exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def __enter__(self) -> LocalService:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def wait_until(
    what: str, check: Callable[[], object], timeout: float = 30.0, interval: float = 0.1
) -> None:
    """Call ``check()`` until it returns true; RuntimeError naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(interval)
    raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")


def run_main(main: Callable[[], int], script: str) -> None:
    """Exit with ``main()``'s status; a library error (the service unreachable, a refused
    token, ...) becomes one line on stderr and exit status 1, never a traceback."""
    from tiered_log.errors import TieredLogError

    try:
        sys.exit(main())
    except TieredLogError as exc:
        print(f"{Path(script).name}: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(1)
