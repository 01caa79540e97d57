"""Crash tests: a real writer process (crash_writer.py) is killed with SIGKILL, the log
is reopened in this process, and everything it holds is checked.

After every kill: the log's next offset is at least the last offset the writer saw
flushed (and recorded, only after flush returned, in the ``acked`` file); every record
in ``[log_start, next)`` reads back with exactly the content the writer derived from its
offset, so nothing corrupt or misplaced is returned. The same directory is reused across
kills, so recovery runs again and again on top of earlier crashes.
"""

from __future__ import annotations

import itertools
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tiered_log import Log, RecoveryReport

from .crash_writer import TS_BASE, config, expected_record
from .helpers import read_all

WRITER = Path(__file__).with_name("crash_writer.py")

pytestmark = pytest.mark.slow


def spawn(
    directory: Path, seed: int, segment_bytes: int, kill_at: str | None = None
) -> subprocess.Popen[bytes]:
    args = [sys.executable, str(WRITER), str(directory), str(seed), str(segment_bytes)]
    if kill_at:
        args.append(kill_at)
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def wait_ready(proc: subprocess.Popen[bytes]) -> int:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith(b"ready"):
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"writer did not start: {line!r}\n{err.decode(errors='replace')}")
    return int(line.split()[1])


def kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        _, err = proc.communicate()
        pytest.fail(f"writer exited by itself ({proc.returncode}):\n{err.decode(errors='replace')}")
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert proc.returncode == -signal.SIGKILL


def verify(directory: Path, segment_bytes: int) -> tuple[RecoveryReport, int, int]:
    """Reopen the log after a kill and check every record; returns the recovery report
    and the log's bounds."""
    acked_path = directory.parent / "acked"
    acked = int(acked_path.read_text()) if acked_path.exists() else 0
    with Log.open(directory, config(segment_bytes)) as log:
        start, nxt = log.log_start_offset, log.next_offset
        assert nxt >= acked, f"flushed records lost: next offset {nxt} < acked {acked}"
        recs = read_all(log, max_records=97, max_bytes=20_000)
        assert [r.offset for r in recs] == list(range(start, nxt))
        for r in recs:
            want = expected_record(r.offset)
            assert (r.value, r.key, r.headers, r.timestamp) == (
                want.value,
                want.key,
                want.headers,
                want.timestamp,
            ), f"offset {r.offset}"
        for off in range(start, nxt, max(1, (nxt - start) // 5)):
            assert log.offset_for_timestamp(TS_BASE + off) == off
        infos = log.segments()
        for a, b in itertools.pairwise(infos):
            assert a.next_offset == b.base_offset and a.sealed
        return log.recovery, start, nxt


@pytest.mark.timeout(90)
@pytest.mark.parametrize(
    "segment_bytes",
    [
        pytest.param(16_384, id="small-segments"),
        # Each batch rolls: most of the writer's time goes into rolls (fsync, index files
        # written and renamed, a new store), so most kills land in the middle of one.
        pytest.param(64, id="tiny-segments"),
    ],
)
def test_sigkill_at_random_points(tmp_path: Path, segment_bytes: int) -> None:
    directory = tmp_path / "log"
    iterations = 25
    last_next = 0
    for it in range(iterations):
        rng = random.Random(9_000 + it)
        proc = spawn(directory, seed=it, segment_bytes=segment_bytes)
        try:
            if rng.random() < 0.2:
                # time the kill from the spawn: it may land in the writer's own open
                delay = rng.uniform(0.02, 0.3)
            else:
                start_next = wait_ready(proc)
                assert start_next == last_next
                delay = rng.uniform(0.02, 0.3)
            time.sleep(delay)  # how long the writer runs, not an assertion about speed
            kill(proc)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        _, _, last_next = verify(directory, segment_bytes)
    assert last_next > 0, "the writer never appended anything"
    acked = int((tmp_path / "acked").read_text())
    assert acked > 0, "the writer never flushed"


KILL_POINTS = [
    pytest.param("index-rename:1", "*.index.tmp", id="first-seal-index-tmp-written"),
    pytest.param("index-rename:4", "*.index.tmp", id="later-seal-index-tmp-written"),
    pytest.param("timeindex-rename:3", "*.timeindex.tmp", id="index-renamed-timeindex-tmp"),
    pytest.param("create-store:2", None, id="sealed-but-no-new-store"),
    pytest.param("unlink-index:1", None, id="retention-store-deleted-index-left"),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("kill_at", "leftover"), KILL_POINTS)
def test_sigkill_in_the_middle_of_a_roll(
    tmp_path: Path, kill_at: str, leftover: str | None
) -> None:
    """The writer kills itself at an exact point of a roll (or of a retention delete);
    the file state it leaves is checked to be the intended one, then recovered."""
    segment_bytes = 2_048
    directory = tmp_path / "log"
    proc = spawn(directory, seed=1, segment_bytes=segment_bytes, kill_at=kill_at)
    wait_ready(proc)
    _, err = proc.communicate(timeout=45)
    assert proc.returncode == -signal.SIGKILL, err.decode(errors="replace")

    stores = sorted(directory.glob("*.log"))
    if leftover:
        assert list(directory.glob(leftover)), sorted(p.name for p in directory.iterdir())
    if kill_at.startswith("create-store"):
        # the last segment was sealed (both index files in place), its successor not made
        last = stores[-1]
        assert last.with_suffix(".index").exists() and last.with_suffix(".timeindex").exists()
    if kill_at.startswith("unlink-index"):
        orphans = [p for p in directory.glob("*.index") if not p.with_suffix(".log").exists()]
        assert orphans

    report, start, nxt = verify(directory, segment_bytes)
    assert nxt > 0
    if leftover or kill_at.startswith("unlink-index"):
        assert report.removed_files >= 1
    assert not list(directory.glob("*.tmp"))
    if kill_at.startswith("unlink-index"):
        assert start > 0  # the deleted segment stays deleted

    # the recovered log carries on: another writer appends, is killed, all still right
    proc = spawn(directory, seed=2, segment_bytes=segment_bytes)
    assert wait_ready(proc) == nxt
    time.sleep(0.1)
    kill(proc)
    _, _, nxt2 = verify(directory, segment_bytes)
    assert nxt2 >= nxt


_CUT_CHILD = r'''
import os, signal, sys
import tiered_log.local.segment as segmod
from tiered_log import Log, LogConfig

directory, stage = sys.argv[1], sys.argv[2]
real_open = open

def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)

class Dying:
    """The store opened for the cut; dies at the asked stage (a real SIGKILL)."""
    def __init__(self, f):
        self.f = f
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        self.f.close()
    def truncate(self, n):
        self.f.truncate(n)
        self.f.flush()
        if stage == "after-cut":
            die()
    def seek(self, n):
        self.f.seek(n)
    def write(self, b):
        if stage == "mid-write":
            self.f.write(b[: len(b) // 2])
            self.f.flush()
            die()
        return self.f.write(b)
    def flush(self):
        self.f.flush()
    def fileno(self):
        return self.f.fileno()

def store_open(path, mode="r", *args, **kwargs):
    if mode == "r+b" and str(path).endswith(".log"):
        if stage == "before-cut":
            die()
        return Dying(real_open(path, mode, *args, **kwargs))
    return real_open(path, mode, *args, **kwargs)

segmod.open = store_open  # the segment module's view of the builtin
log = Log.open(directory, LogConfig(segment_bytes=1 << 20))
log.truncate(int(sys.argv[3]))
print("not killed")
'''


@pytest.mark.parametrize("stage", ["before-cut", "after-cut", "mid-write"])
def test_kill_during_a_truncation_inside_a_batch_loses_nothing_below_it(
    tmp_path: Path, stage: str
) -> None:
    """SIGKILL while a truncation inside a batch rewrites that batch (after the cut was
    saved, at the store's cut, halfway through writing the kept records): reopening
    finishes the cut, so every record below the truncation offset is still there."""
    from tiered_log import LogConfig, ProducerRecord
    from tiered_log.format import naming

    cfg = LogConfig(segment_bytes=1 << 20)
    with Log.open(tmp_path, cfg) as log:
        log.append_batch(
            [ProducerRecord(b"a%d" % i, key=b"k", timestamp=1_000 + i) for i in range(3)]
        )
        log.append_batch([ProducerRecord(b"v%d" % i * 40, timestamp=2_000 + i) for i in range(10)])
    proc = subprocess.run(
        [sys.executable, "-c", _CUT_CHILD, str(tmp_path), stage, "7"],
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode(errors="replace")
    assert list(tmp_path.glob("*" + naming.CUT_SUFFIX))  # the cut was saved before dying
    with Log.open(tmp_path, cfg) as log:
        assert log.next_offset == 7
        got = read_all(log)
        assert [r.value for r in got] == [b"a%d" % i for i in range(3)] + [
            b"v%d" % i * 40 for i in range(4)
        ]
        assert [r.timestamp for r in got[3:]] == [2_000 + i for i in range(4)]
        assert log.append(b"next") == 7
    assert not list(tmp_path.glob("*" + naming.CUT_SUFFIX))
