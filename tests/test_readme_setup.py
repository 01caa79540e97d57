"""The README's first two commands: what a new user runs on a fresh clone.

The first sets everything up and starts the service; every later shell command of the
README must then run as written in the same shell (``tiered-log ...``, ``python
examples/...``). The second sets everything up and runs the whole test suite, and is
exactly what ``.ci/run`` runs.
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
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _sh_blocks(text: str) -> list[str]:
    """The contents of the README's ```sh blocks, in order."""
    return [m.group(1).strip() for m in re.finditer(r"^```sh\n(.*?)^```", text, re.S | re.M)]


def _readme_commands() -> tuple[str, str]:
    blocks = _sh_blocks((ROOT / "README.md").read_text(encoding="utf-8"))
    assert len(blocks) >= 2, "the README starts with the run and the test command"
    return blocks[0], blocks[1]


def test_ci_runs_exactly_the_readme_test_command() -> None:
    _, test_command = _readme_commands()
    lines = [
        ln
        for ln in (ROOT / ".ci/run").read_text().splitlines()
        if ln.strip() and not ln.startswith("#")
    ]
    assert lines[-1] == test_command


def test_readme_test_command_leaves_the_venv_active() -> None:
    """Both set-up commands activate the venv, so whichever a user ran first, the later
    commands (``tiered-log``, ``python examples/...``) find the project."""
    run, test = _readme_commands()
    for cmd in (run, test):
        steps = [s.strip() for s in cmd.split("&&")]
        assert steps[0] == "python3 -m venv .venv"
        assert steps[1] == ". .venv/bin/activate", cmd


def _fresh_shell_env(port: int) -> dict[str, str]:
    """A shell's environment on a machine with Python and pip only: no venv on PATH, no
    service settings, the service on ``port`` (8080 may be taken on a test machine) and no
    Kafka listener (9092 may be taken too)."""
    venv_bin = str(Path(sys.prefix) / "bin")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TIERED_LOG_", "VIRTUAL_ENV", "PYTHON"))
    }
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if p and Path(p) != Path(venv_bin)
    )
    env["TIERED_LOG_PORT"] = str(port)
    env["TIERED_LOG_KAFKA_PORT"] = "0"
    return env


def _copy_clone(dest: Path) -> None:
    """The project's files as a fresh clone has them (tracked and new, not ignored)."""
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in files:
        if not name:
            continue
        src = ROOT / os.fsdecode(name)
        if src.is_file():
            (dest / os.fsdecode(name)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / os.fsdecode(name))


def _serve_child(shell_pid: int) -> int | None:
    """The pid of the shell's child process (the service the first command started)."""
    try:
        kids = Path(f"/proc/{shell_pid}/task/{shell_pid}/children").read_text().split()
    except OSError:
        return None
    return int(kids[0]) if kids else None


@pytest.mark.slow
@pytest.mark.skipif(
    not sys.platform.startswith("linux") or shutil.which("git") is None,
    reason="needs /proc and git",
)
@pytest.mark.timeout(900)
def test_first_command_then_later_commands_in_the_same_shell(tmp_path: Path) -> None:
    """Run the README's first command verbatim in a fresh copy of the project (a new venv,
    pip install from the index), stop the service with Ctrl-C once it answers, and run
    README commands after it in the same shell."""
    run, _ = _readme_commands()
    clone = tmp_path / "clone"
    clone.mkdir()
    _copy_clone(clone)
    port = free_port()
    script = "\n".join(
        [
            run,
            'echo "first command ended: $?"',
            "tiered-log --version",
            'python -c "import sys, tiered_log; print(sys.prefix)"',
            'tiered-log topics list --url http://127.0.0.1:1 2>/dev/null; echo "topics: $?"',
        ]
    )
    proc = subprocess.Popen(
        ["bash", "-c", script],
        cwd=clone,
        env=_fresh_shell_env(port),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 600
        up = False
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                up = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
            except httpx.TransportError:
                up = False
            if up:
                break
            time.sleep(0.5)
        assert up, f"the service never answered: {proc.communicate(timeout=60)}"
        child = _serve_child(proc.pid)
        assert child is not None
        os.kill(child, signal.SIGINT)  # the user's Ctrl-C
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = out.decode()
    assert "first command ended:" in text, (text, err.decode())
    assert "tiered-log 0.1.0" in text, err.decode()
    assert str(clone / ".venv") in text, err.decode()
    assert "topics: 1" in text, err.decode()  # the command ran (no server there): not 127
    # pip printed no setuptools deprecation (``project.license`` as a table)
    assert "project.license" not in err.decode() and "Deprecat" not in err.decode(), err.decode()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_building_the_project_prints_no_deprecation(tmp_path: Path) -> None:
    """pip builds the project (its metadata from pyproject.toml, with the setuptools the
    build-system table asks for) without a setuptools deprecation warning."""
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, tmp_path / name)
    (tmp_path / "tiered_log").mkdir()
    (tmp_path / "tiered_log" / "__init__.py").write_text("")
    (tmp_path / "tiered_log" / "py.typed").write_text("")
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "-w",
            str(tmp_path / "wheels"),
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    output = p.stdout + p.stderr
    assert "deprecated" not in output.lower(), output
    assert list((tmp_path / "wheels").glob("tiered_log-*.whl"))


def test_spark_extra_keeps_pandas_below_3() -> None:
    """pyspark 4 warns that it does not support pandas 3: the extra must not resolve it."""
    import tomllib

    from packaging.requirements import Requirement

    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]["spark"]
    pandas = next(Requirement(r) for r in extra if Requirement(r).name == "pandas")
    assert not pandas.specifier.contains("3.0.0") and pandas.specifier.contains("2.3.3")
