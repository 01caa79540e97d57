"""Running a ``tiered-log perf`` command as a user would, for the benchmarks' shape tests:
a subprocess through ``tiered_log.cli.main`` in its own session, so that on a timeout the
benchmark's server children are killed with it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

RUN = "import sys, tiered_log.cli as cli; sys.exit(cli.main(sys.argv[1:]))"


def run_perf(args: list[str], timeout_s: float = 240) -> tuple[str, str]:
    """``tiered-log perf ARGS``' stdout and stderr; fails the test on a timeout or a
    non-zero exit."""
    proc = subprocess.Popen(
        [sys.executable, "-c", RUN, "perf", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"perf {args[0]} did not finish in {timeout_s:g} s: {err[-3000:]}")
    assert proc.returncode == 0, err[-3000:]
    return out, err
