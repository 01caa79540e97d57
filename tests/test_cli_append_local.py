"""``tiered-log append NAME`` writes a local log directory, not a service topic, and says
so: a Kafka user mixing ``append`` and ``produce`` took ``append orders`` for a produce to
topic ``orders`` (it silently created ``./orders``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(60)


def run(cwd: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIERED_LOG_")}
    env["COLUMNS"] = "200"  # help text unwrapped
    return subprocess.run(
        [sys.executable, "-m", "tiered_log.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=30,
        cwd=cwd,
        env=env,
    )


def test_append_to_a_new_name_says_it_made_a_local_directory(tmp_path: Path) -> None:
    p = run(tmp_path, "append", "orders", stdin="hello\n")
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("appended 1 record at offsets 0..0")
    assert (tmp_path / "orders").is_dir()
    lines = p.stderr.strip().splitlines()
    assert lines == [
        "tiered-log: created the local log directory orders (append writes a log directory "
        "on this machine, it does not send to a service; to produce to a service's topic, "
        "use: tiered-log produce orders)"
    ]
    # The directory exists now: no note the second time.
    p = run(tmp_path, "append", "orders", stdin="again\n")
    assert p.returncode == 0 and p.stderr == "", p.stderr
    assert p.stdout.startswith("appended 1 record at offsets 1..1")


def test_append_help_points_to_produce(tmp_path: Path) -> None:
    p = run(tmp_path, "append", "--help")
    assert p.returncode == 0
    text = " ".join(p.stdout.split())
    assert "local log in directory DIR" in text and "talks to no service" in text
    assert "'tiered-log produce TOPIC'" in text
    p = run(tmp_path, "--help")
    summary = " ".join(p.stdout.split())
    assert "to a local log directory (not a topic: see produce)" in summary
