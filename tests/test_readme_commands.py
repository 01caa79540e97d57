"""Every shell command of the README, run in order as a user runs them after the first
command, each in a fresh ``bash`` in one temporary directory, with its output checked
against what the README shows.

"After the first command" means: the venv active (its ``bin`` first on ``PATH``, no
other ``TIERED_LOG_*`` variable) and ``tiered-log serve`` running from the temporary
directory (the first command's last step; its set-up steps are
``test_readme_setup.py``'s). Two changes make it runnable on a shared test machine,
both substitutions rather than edits of the commands: the service listens on a free
port instead of 8080 (every ``8080`` of a command and its shown output becomes that
port, and ``TIERED_LOG_URL`` names it for commands that rely on the default URL), and
its Kafka listener is on a free port too (9092 may be taken; ``consume --group`` finds
it through the service, as the README says).

Commands that cannot run here are in :data:`SKIPPED`, each with the reason; a
long-running foreground command (``dev-cluster``) runs in the background until its
shown output is there, then is stopped by its pid. A README command not listed there
runs, so a new command is checked as soon as it is written.

Shown output: in the curl session, the lines after a ``$ `` command, compared with
whitespace ignored (the README wraps long JSON), ``...`` (with the characters of a
truncated word before it) standing for anything and 13-digit numbers (timestamps) for
any; after ``dev-cluster``, its ``# `` lines, line by line, any number for a port or pid and a
``# ...`` line for any lines.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parent.parent

SKIPPED: dict[str, str] = {
    "python3 -m venv .venv && . .venv/bin/activate && pip install -q -e . && tiered-log "
    "serve": "the first command: its last step, tiered-log serve, is run by the test in "
    "the background (the set-up steps are test_readme_setup.py's)",
    "python3 -m venv .venv && . .venv/bin/activate && pip install -q --upgrade pip": "the "
    "test command: the whole test suite (35+ minutes), which this test is part of",
    "docker compose": "needs Docker (no engine on the test machines)",
    "python examples/quickstart.py --url http://127.0.0.1:8080": "part of the Docker "
    "Compose walkthrough (its service ships to MinIO); test_examples.py runs the example",
    "python examples/long_retention_archive.py --url http://127.0.0.1:8080": "part of the "
    "Docker Compose walkthrough; test_examples.py runs the example",
    "python examples/minio_local_testing.py --endpoint http://127.0.0.1:9000": "needs "
    "MinIO on 127.0.0.1:9000; test_examples.py runs the example against moto",
    "TIERED_LOG_TEST_S3_ENDPOINT=http://127.0.0.1:9000": "needs MinIO, and runs test "
    "suites of their own",
    "TIERED_LOG_NODE_ID=1 TIERED_LOG_ADVERTISED_URL=http://10.0.0.1:8080": "a node on "
    "other machines (10.0.0.x) and an etcd there",
    "TIERED_LOG_READ_ONLY_REMOTE=true": "a foreground server mounting another cluster's "
    "S3 bucket (tests/remote/test_read_only_mount.py runs the story)",
    "tiered-log cluster restore": "needs a new cluster started on an old cluster's "
    "bucket (test_restore.py runs the story)",
}
"""Command prefix -> why the command does not run here."""

BACKGROUND = ("tiered-log dev-cluster",)
"""Long-running foreground commands: run in the background, stopped by pid once their
shown output is there."""


@dataclass
class Command:
    text: str
    shown: list[str]
    session: bool  # from the curl session (``$ `` lines): output shown below it


def readme_commands(text: str) -> list[Command]:
    """The shell commands of the README's ``sh`` and ``bash`` blocks, in order."""
    out: list[Command] = []
    for m in re.finditer(r"^```(?:sh|bash)\n(.*?)^```", text, re.S | re.M):
        lines = m.group(1).splitlines()
        session = any(ln.startswith("$ ") for ln in lines)
        i = 0
        while i < len(lines):
            line = lines[i]
            if not line.strip() or (line.startswith("#") and not session):
                i += 1
                continue
            if session and not line.startswith("$ "):
                i += 1
                continue
            cmd = [line[2:] if session else line]
            while cmd[-1].rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                cmd.append(lines[i])
            i += 1
            shown: list[str] = []
            while i < len(lines) and lines[i].strip():
                if session and lines[i].startswith("$ "):
                    break
                if not session and not lines[i].startswith("#"):
                    break
                shown.append(lines[i] if session else lines[i][1:].strip())
                i += 1
            out.append(Command("\n".join(cmd), shown, session))
    return out


def _session_pattern(shown: list[str], port: int) -> re.Pattern[str]:
    text = "".join("".join(line.split()) for line in shown).replace("8080", str(port))
    parts = re.split(r"[0-9A-Za-z]*\.\.\.", text)
    rx = ".*?".join(re.sub(r"\\d\{13\}|\d{13}", r"\\d{13}", re.escape(p)) for p in parts)
    return re.compile(rx, re.S)


def session_output_matches(shown: list[str], got: str, port: int) -> bool:
    return _session_pattern(shown, port).fullmatch("".join(got.split())) is not None


def lines_match(shown: list[str], got: list[str]) -> bool:
    """``got`` against the shown lines (any number for a number of 3 digits or more:
    ports, pids; ``...`` for any lines)."""
    rx = "\n".join(
        r"(?:.*\n)*?.*" if s == "..." else re.sub(r"\d{3,}", r"\\d+", re.escape(s)) for s in shown
    )
    return re.fullmatch(rx, "\n".join(got)) is not None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _shell_env(port: int) -> dict[str, str]:
    venv_bin = str(Path(sys.executable).parent)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TIERED_LOG_", "VIRTUAL_ENV", "PYTHONPATH"))
    }
    env["PATH"] = os.pathsep.join([venv_bin, env.get("PATH", "")])
    env["VIRTUAL_ENV"] = str(Path(sys.executable).parent.parent)
    env["TIERED_LOG_URL"] = f"http://127.0.0.1:{port}"
    return env


def _skip_reason(cmd: str) -> str | None:
    return next((why for prefix, why in SKIPPED.items() if cmd.startswith(prefix)), None)


def _run_background(cmd: str, shown: list[str], cwd: Path, env: dict[str, str]) -> None:
    """Start ``cmd``, wait until its output has as many lines as shown (at most 180 s),
    check them, stop it by its pid (SIGTERM) and check it ends cleanly."""
    out_path = cwd / "background.out"
    with open(out_path, "wb") as out, open(cwd / "background.err", "wb") as err:
        proc = subprocess.Popen(
            ["bash", "-c", f"exec {cmd}"], cwd=cwd, env=env, stdout=out, stderr=err
        )
    try:
        want = [s for s in shown if s != "..."][-1].split()[0]
        deadline = time.monotonic() + 180
        while not any(ln.startswith(want + " ") for ln in out_path.read_text().splitlines()):
            assert proc.poll() is None, (cmd, (cwd / "background.err").read_text())
            assert time.monotonic() < deadline, (cmd, out_path.read_text())
            time.sleep(0.5)
        got = out_path.read_text().splitlines()
        assert lines_match(shown, got), (cmd, shown, got)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(90) == 0, (cwd / "background.err").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_parsing_the_readme_blocks() -> None:
    """The parser itself: session commands with their output, continuations, comments."""
    text = (
        '```sh\n$ curl -s a \\\n    -d x\n{"a":1,\n "b":"c..."}\n\n$ curl b\nok\n```\n'
        "```bash\nrun --this   # note\n# out 1\n# ...\n\nnext \\\n  --flag\n```\n"
    )
    cmds = readme_commands(text)
    assert [c.text for c in cmds] == [
        "curl -s a \\\n    -d x",
        "curl b",
        "run --this   # note",
        "next \\\n  --flag",
    ]
    assert cmds[0].shown == ['{"a":1,', ' "b":"c..."}'] and cmds[2].shown == ["out 1", "..."]
    assert session_output_matches(cmds[0].shown, '{"a": 1, "b": "cde"}', 1)
    assert not session_output_matches(cmds[0].shown, '{"a": 2, "b": "cde"}', 1)
    assert lines_match(
        ["node 1 http://h:41234 pid 5001", "..."], ["node 1 http://h:999 pid 777", "x"]
    )
    assert not lines_match(["node 1 x"], ["node 2 x"])


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.skipif(
    shutil.which("bash") is None or shutil.which("curl") is None, reason="bash, curl"
)
def test_every_readme_command_runs_as_shown(tmp_path: Path) -> None:
    commands = readme_commands((ROOT / "README.md").read_text(encoding="utf-8"))
    assert len(commands) > 10
    port = _free_port()
    env = _shell_env(port)
    (tmp_path / "picture.jpg").write_bytes(bytes(range(256)) * 40)  # the file a command sends
    serve_env = {**env, "TIERED_LOG_PORT": str(port), "TIERED_LOG_KAFKA_PORT": str(_free_port())}
    serve_log = open(tmp_path / "serve.log", "wb")  # noqa: SIM115 - closed below
    server = subprocess.Popen(
        ["tiered-log", "serve"], cwd=tmp_path, env=serve_env, stdout=serve_log, stderr=serve_log
    )
    ran: list[str] = []
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, (tmp_path / "serve.log").read_text()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
            time.sleep(0.2)
        for c in commands:
            if _skip_reason(c.text) is not None:
                continue
            cmd = c.text.replace("8080", str(port))
            if cmd.startswith(BACKGROUND):
                _run_background(cmd, c.shown, tmp_path, env)
                ran.append(c.text)
                continue
            p = subprocess.run(
                ["bash", "-c", cmd],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert p.returncode == 0, (c.text, p.stdout, p.stderr)
            assert "Traceback" not in p.stderr, (c.text, p.stderr)
            if c.session and c.shown:
                assert session_output_matches(c.shown, p.stdout, port), (c.text, c.shown, p.stdout)
            ran.append(c.text)
    finally:
        server.send_signal(signal.SIGINT)  # the user's Ctrl-C
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        serve_log.close()
    assert server.returncode == 0, (tmp_path / "serve.log").read_text()
    assert any(r.startswith("curl") for r in ran) and any(r.startswith(BACKGROUND) for r in ran)
    for prefix in SKIPPED:  # every skipped command is still in the README
        assert any(c.text.startswith(prefix) for c in commands), prefix
