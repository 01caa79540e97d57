"""RateLimiter, the token bucket behind the upload limit and the remote fetch quota, on a
clock of the test's own (so what is checked is the arithmetic, not the machine's speed),
and the fetch quota end to end on a real remote tier."""

from __future__ import annotations

import itertools
import random
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from tiered_log import InvalidArgumentError
from tiered_log.partition import TieredLog
from tiered_log.remote.fs import LocalDirStorage
from tiered_log.remote.tier import RateLimiter, TierConfig, TierLimits

from .test_tiered_log import SMALL, produce, read_all_checked, remote_end


class Clock:
    """A clock that moves only when the limiter sleeps or the test says so."""

    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.now += s


def test_unlimited_never_waits() -> None:
    clock = Clock()
    lim = RateLimiter(None, clock=clock, sleep=clock.sleep)
    assert lim.consume(1 << 40) == 0.0
    assert clock.slept == []


def test_a_second_of_burst_then_the_rate() -> None:
    clock = Clock()
    lim = RateLimiter(1000, clock=clock, sleep=clock.sleep)
    assert lim.consume(1000) == 0.0  # the burst: one second's worth
    assert lim.consume(500) == pytest.approx(0.5)
    assert lim.consume(2000) == pytest.approx(2.0)  # larger than the burst: waits it out
    clock.now += 10  # idle: the bucket refills to one second's worth, not ten
    assert lim.consume(1000) == 0.0
    assert lim.consume(1) == pytest.approx(0.001)


def test_any_sequence_keeps_to_the_rate() -> None:
    """Whatever the sizes and the pauses between them, the bytes taken by time t never
    exceed rate * t + one second's burst, and the limiter never waits longer than needed
    (the waits add up to at most the bytes over the burst, at the rate)."""
    rng = random.Random(7)
    clock = Clock()
    rate = 10_000
    lim = RateLimiter(rate, clock=clock, sleep=clock.sleep)
    start, taken, waited = clock.now, 0, 0.0
    for _ in range(2000):
        if rng.random() < 0.3:
            clock.now += rng.random() * 0.5
        n = rng.randrange(1, 3 * rate)
        waited += lim.consume(n)
        taken += n
        assert taken <= rate * (clock.now - start) + rate + 1e-6
    assert waited <= (taken - rate) / rate + 1e-6


def test_the_fetch_quota_throttles_remote_reads(tmp_path: Path) -> None:
    """With ``fetch_bytes_per_sec`` set, a cold reader of the archive still gets every
    record, the fetches beyond the first second's burst waited for the quota, and reading
    the archive took at least as long as the quota allows."""
    storage = LocalDirStorage(tmp_path / "bucket")
    tier = TierConfig(
        chunk_bytes=2048,
        fetch_bytes=8192,
        prefetch_bytes=8192,
        local_retention_bytes=0,
        fetch_bytes_per_sec=64 * 1024,
        compression="none",  # the quota counts bucket bytes: here the log's own
    )
    tlog = TieredLog(
        tmp_path / "log",
        log_id="q-0",
        storage=storage,
        config=SMALL,
        tier=tier,
        start_shipper=False,
    )
    produce(tlog, 1200)
    tlog.roll()
    tlog.tier_once()
    assert tlog.remote_tier is not None
    archived = tlog.remote_tier.size_bytes
    assert archived > 2 * 64 * 1024
    t0 = time.monotonic()
    read_all_checked(tlog, 1200, max_records=100)
    elapsed = time.monotonic() - t0
    st = tlog.remote_tier.stats
    assert st.remote_fetch_bytes == archived
    assert st.remote_fetch_throttled_ms > 0
    # The quota held: what was fetched beyond the first second's burst took its time.
    # (A lower bound only: a slow machine takes longer, never shorter.)
    assert elapsed >= (archived - 64 * 1024) / (64 * 1024) * 0.99
    assert tlog.describe()["remote_fetch_throttled_ms"] == st.remote_fetch_throttled_ms
    tlog.close()


def test_the_quotas_are_the_nodes(tmp_path: Path) -> None:
    """The service's upload and fetch limits are its node's: every partition of every
    topic shares the same two limiters, set from the settings."""
    from tiered_log.broker.topics import TopicManager
    from tiered_log.config import Settings

    settings = Settings(
        data_dir=str(tmp_path / "data"),
        remote_url=str(tmp_path / "bucket"),
        remote_fetch_bytes_per_sec=5_000_000,
        remote_upload_bytes_per_sec=7_000_000,
    )
    topics = TopicManager(settings)
    topics.load()
    try:
        a, b = topics.create("a", 2), topics.create("b", 1)
        remotes = [plog.remote_tier for plog in (*a.logs, *b.logs)]
        assert all(r is not None for r in remotes)
        assert {id(r.fetch_limiter) for r in remotes if r} == {id(topics.limits.fetch)}
        assert {id(r.limiter) for r in remotes if r} == {id(topics.limits.upload)}
        assert (topics.limits.fetch.rate, topics.limits.upload.rate) == (5_000_000, 7_000_000)
    finally:
        topics.close()
    with pytest.raises(InvalidArgumentError):
        TierConfig(fetch_bytes_per_sec=-2)
    with pytest.raises(ValueError):
        Settings(remote_fetch_bytes_per_sec=0)


def test_logs_sharing_limits_keep_to_them_together(tmp_path: Path) -> None:
    """Two logs reading their archives at once through shared limits fetch, together, no
    faster than the shared quota."""
    storage = LocalDirStorage(tmp_path / "bucket")
    base = TierConfig(
        chunk_bytes=2048,
        fetch_bytes=8192,
        prefetch_bytes=8192,
        local_retention_bytes=0,
        compression="none",  # the quota counts bucket bytes: here the log's own
    )
    for name in ("x", "y"):
        tlog = TieredLog(
            tmp_path / name,
            log_id=f"{name}-0",
            storage=storage,
            config=SMALL,
            tier=base,
            start_shipper=False,
        )
        produce(tlog, 400)
        tlog.roll()
        tlog.tier_once()
        tlog.close()
    rate = 48 * 1024
    limits = TierLimits.of(None, rate)
    logs = [
        TieredLog(
            tmp_path / name,
            log_id=f"{name}-0",
            storage=storage,
            config=SMALL,
            tier=base,
            start_shipper=False,
            limits=limits,
        )
        for name in ("x", "y")
    ]
    t0 = time.monotonic()
    readers = [threading.Thread(target=read_all_checked, args=(t, 400)) for t in logs]
    for th in readers:
        th.start()
    for th in readers:
        th.join(120)
    elapsed = time.monotonic() - t0
    fetched = sum(t.remote_tier.stats.remote_fetch_bytes for t in logs if t.remote_tier)
    assert fetched == sum(t.remote_tier.size_bytes for t in logs if t.remote_tier) > 2 * rate
    assert elapsed >= (fetched - rate) / rate * 0.99  # together, not each, at the rate
    for t in logs:
        t.close()


def test_release_ends_the_waits() -> None:
    """A wait under way ends when its cancel event is set, and a cancelled caller does not
    wait again; another caller of the same limiter still does."""
    lim = RateLimiter(10)
    lim.consume(10)
    cancel = threading.Event()
    done = threading.Event()

    def consume() -> None:
        lim.consume(10_000, cancel)
        done.set()

    th = threading.Thread(target=consume)
    th.start()  # would wait 1,000 s
    assert not done.wait(0.2)
    assert lim.waiting == 1
    cancel.set()
    th.join(60)
    assert done.is_set() and lim.waiting == 0
    assert lim.consume(1 << 30, cancel) == 0.0
    clock_waits: list[float] = []
    other = RateLimiter(10, sleep=clock_waits.append)
    other.consume(20)
    assert clock_waits == [pytest.approx(1.0)]


def test_close_does_not_sit_out_the_quotas(tmp_path: Path) -> None:
    """Closing a log whose reader waits for a tiny fetch quota and whose shipper waits
    for a tiny upload limit returns without sitting them out (both would take hours);
    the copy cut short this way is finished or cleaned up, and reopened without limits
    the log ships every segment exactly once."""
    storage = LocalDirStorage(tmp_path / "bucket")
    base = TierConfig(
        chunk_bytes=2048, fetch_bytes=8192, prefetch_bytes=8192, local_retention_bytes=0
    )
    tlog = TieredLog(
        tmp_path / "log",
        log_id="q-0",
        storage=storage,
        config=SMALL,
        tier=base,
        start_shipper=False,
    )
    produce(tlog, 600)
    tlog.roll()
    tlog.tier_once()
    produce(tlog, 600)  # more sealed segments, not shipped yet
    tlog.roll()
    tlog.close()
    slow = replace(base, fetch_bytes_per_sec=16, upload_bytes_per_sec=16, ship_interval_ms=10)
    tlog = TieredLog(tmp_path / "log", log_id="q-0", storage=storage, config=SMALL, tier=slow)
    got: list[object] = []
    reader = threading.Thread(target=lambda: got.append(_read_or_error(tlog)))
    reader.start()
    assert tlog.remote_tier is not None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (
        tlog.remote_tier.fetch_limiter.waiting and tlog.remote_tier.limiter.waiting
    ):
        time.sleep(0.02)
    assert tlog.remote_tier.fetch_limiter.waiting and tlog.remote_tier.limiter.waiting
    t0 = time.monotonic()
    tlog.close()
    reader.join(60)
    assert not reader.is_alive() and time.monotonic() - t0 < 60
    assert got and (isinstance(got[0], Exception) or got[0] == 0)
    tlog = TieredLog(
        tmp_path / "log",
        log_id="q-0",
        storage=storage,
        config=SMALL,
        tier=base,
        start_shipper=False,
    )
    tlog.tier_once()
    assert tlog.remote_tier is not None
    segs = tlog.remote_tier.finished_segments
    assert [s.base_offset for s in segs] == sorted({s.base_offset for s in segs})
    assert segs[0].base_offset == 0 and remote_end(tlog) >= 1100
    for a, b in itertools.pairwise(segs):
        assert a.next_offset == b.base_offset
    read_all_checked(tlog, 1200)
    tlog.close()


def _read_or_error(tlog: TieredLog) -> object:
    """The first offset a cold read of offset 0 returns, or the error it raised."""
    try:
        return tlog.read_range(0, 10, 1 << 20)[0].offset
    except Exception as exc:  # the test looks at what it was
        return exc
