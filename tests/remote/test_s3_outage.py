"""The S3 server goes away while producers append, and comes back: nothing is lost.

The test runs its own moto ThreadedMotoServer on a free port of 127.0.0.1 (never the
session one, which other tests use), with the background shipper of a TieredLog shipping
to it. Stopping the server makes every request fail to connect (a real outage, as the
HTTP client sees it); a new server started on the same port serves the same buckets again,
because moto keeps its backend state in the process, not in the server thread (the test
checks that the objects shipped before the outage are still there).

Appends must go on during the outage with unshipped segments kept on disk; once the server
is back the shipper must catch up, local retention then drops the local copies, and every
acknowledged record must read back identical from the bucket.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tiered_log import LogConfig, ProducerRecord
from tiered_log.format import naming
from tiered_log.partition import TieredLog
from tiered_log.remote.metadata import CopyState
from tiered_log.remote.s3 import S3Storage
from tiered_log.remote.tier import TierConfig

from .test_tiered_log import remote_end

LOG_ID = "outage-0"
SEGMENT_BYTES = 16 * 1024


class Server:
    """A moto S3 server that can be stopped and started again on the same port."""

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        self._cls = ThreadedMotoServer
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.server.start()
        host, self.port = self.server.get_host_and_port()
        self.endpoint = f"http://{host}:{self.port}"
        self.running = True

    def stop(self) -> None:
        self.server.stop()
        self.running = False

    def start(self) -> None:
        # The port was ours a moment ago; retry briefly in case the OS is slow to free it.
        deadline = time.monotonic() + 10
        while True:
            try:
                self.server = self._cls(ip_address="127.0.0.1", port=self.port, verbose=False)
                self.server.start()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        self.running = True


@pytest.fixture
def server(s3_target: Any) -> Iterator[Server]:
    if not s3_target.is_moto:
        pytest.skip("needs moto's server (it stops and starts the S3 endpoint)")
    werkzeug_log = logging.getLogger("werkzeug")
    old = werkzeug_log.level
    werkzeug_log.setLevel(logging.WARNING)
    srv = Server()
    yield srv
    if srv.running:
        srv.stop()
    werkzeug_log.setLevel(old)


def wait_until(cond: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.01)
    pytest.fail(f"timed out waiting for {what}")


class Producers:
    """Threads appending small batches; remember what each acknowledged offset holds."""

    def __init__(self, tlog: TieredLog, n: int = 2) -> None:
        self.tlog = tlog
        self.acked: dict[int, tuple[bytes, bytes | None]] = {}
        self.errors: list[BaseException] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(n)
        ]
        for t in self._threads:
            t.start()

    def _run(self, pid: int) -> None:
        seq = 0
        try:
            while not self._stop.is_set():
                batch = [
                    ProducerRecord(
                        b"v-%d-%d-" % (pid, seq + i) + bytes(60 + (seq + i) % 50), key=b"p%d" % pid
                    )
                    for i in range(8)
                ]
                first, _ = self.tlog.append_batch(batch)
                self.tlog.flush()  # acknowledged = durable
                with self._lock:
                    for i, r in enumerate(batch):
                        assert isinstance(r, ProducerRecord) and r.key is not None
                        self.acked[first + i] = (r.key, r.value)
                seq += len(batch)
                time.sleep(0.003)
        except BaseException as exc:  # reported by stop()
            self.errors.append(exc)

    def count(self) -> int:
        with self._lock:
            return len(self.acked)

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(30)
        assert self.errors == []


def test_s3_outage_while_producing_loses_nothing(tmp_path: Path, server: Server) -> None:
    storage = S3Storage(
        "outage-bucket", endpoint_url=server.endpoint, retries=0, connect_timeout=1, read_timeout=5
    )
    storage.ensure_bucket()
    tlog = TieredLog(
        tmp_path / "log",
        log_id=LOG_ID,
        storage=storage,
        config=LogConfig(segment_bytes=SEGMENT_BYTES, index_interval_bytes=1024),
        tier=TierConfig(ship_interval_ms=20, local_retention_bytes=0, chunk_bytes=4096),
    )
    assert tlog.shipper is not None and tlog.remote_tier is not None
    producers = Producers(tlog)
    try:
        # 1. Shipping works: a few segments reach the bucket.
        wait_until(lambda: len(tlog.remote_tier.finished_segments) >= 3, "the first copies")  # type: ignore[union-attr]
        shipped_before = {s.id for s in tlog.remote_tier.finished_segments}

        # 2. The server goes away. Appends go on; the shipper fails and backs off.
        server.stop()
        outage_start = producers.count()
        wait_until(lambda: tlog.shipper.last_error is not None, "a failed tiering round")  # type: ignore[union-attr]
        end_at_outage = remote_end(tlog)
        lag_at_outage = tlog.describe()["copy_lag_segments"]
        # Producers are never blocked: records and unshipped segments pile up.
        wait_until(
            lambda: (
                producers.count() > outage_start + 200
                and tlog.describe()["copy_lag_segments"] >= lag_at_outage + 3
            ),
            "unshipped segments to pile up",
        )
        b = tlog.bounds()
        assert b.remote_end_offset == end_at_outage  # nothing could be shipped ...
        assert b.local_start_offset <= end_at_outage  # ... and nothing unshipped was dropped
        # Three more sealed segments wait (each a little under SEGMENT_BYTES: they roll
        # at a batch boundary).
        assert tlog.describe()["copy_lag_bytes"] > 2 * SEGMENT_BYTES
        assert "cannot reach S3" in (tlog.shipper.last_error or "")  # type: ignore[union-attr]

        # 3. The server comes back with its state (the same bucket and objects).
        server.start()
        tlog.roll()  # wakes the shipper out of its backoff
        wait_until(
            lambda: (
                tlog.shipper.last_error is None  # type: ignore[union-attr]
                and remote_end(tlog) > end_at_outage
            ),
            "shipping to resume",
        )
    finally:
        producers.stop()
    tlog.flush()
    tlog.roll()
    total = tlog.next_offset
    assert sorted(producers.acked) == list(range(total))  # every offset acknowledged once
    wait_until(lambda: tlog.bounds().remote_end_offset == total, "shipping to catch up")
    wait_until(lambda: tlog.bounds().local_start_offset == total, "local copies to be dropped")

    # 4. Everything is in the bucket exactly once, and reads come from it.
    assert shipped_before <= {s.id for s in tlog.remote_tier.finished_segments}
    assert all(s.state == CopyState.COPY_FINISHED for s in tlog.remote_tier.journal.segments())
    finished = tlog.remote_tier.finished_segments
    assert finished[0].base_offset == 0
    for a, c in itertools.pairwise(finished):
        assert a.next_offset == c.base_offset
    keys = sorted(o.key for o in storage.list(naming.segment_objects_prefix(LOG_ID)))
    assert keys == sorted(
        naming.segment_object_key(LOG_ID, s.base_offset, s.id, sfx)
        for s in finished
        for sfx in naming.SEGMENT_OBJECT_SUFFIXES
    )
    fetched = tlog.remote_tier.stats.remote_fetch_requests
    o = 0
    while o < total:
        recs = tlog.read_range(o, 500, 256 * 1024)
        assert recs and recs[0].offset == o
        for r in recs:
            assert (r.key, r.value) == producers.acked[r.offset], r.offset
        o = recs[-1].offset + 1
    assert tlog.remote_tier.stats.remote_fetch_requests > fetched  # served by the bucket
    tlog.close()
    storage.close()
