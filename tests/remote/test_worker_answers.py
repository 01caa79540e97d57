"""Every request to a tier worker process gets its answer, and every fetch a log's close
gives up on completes: an answer the log's process cannot decode, an answer the worker
cannot encode and a request the worker cannot decode each fail their own call (the
worker goes on serving the next), and a fetch whose pool task the close cancels before
it ran leaves no chunk waiting for it. Real worker processes throughout; every wait is
bounded."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, wait
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tiered_log import LogConfig, ProducerRecord
from tiered_log.errors import RemoteStorageError
from tiered_log.format import naming
from tiered_log.partition import TieredLog
from tiered_log.remote.fs import LocalDirStorage
from tiered_log.remote.limits import FETCH_THREADS, shared_pool
from tiered_log.remote.tier import RemoteTier, TierConfig
from tiered_log.remote.worker import StorageSpec, TierWorker, spec_of

T = TypeVar("T")

WAIT_S = 20.0
"""How long a test waits for an answer or a future before it counts as lost."""


# ---- objects the worker process runs into (it imports this module to decode them) ----------


class Unrebuildable(Exception):
    """Pickles, but cannot be unpickled: its class needs two arguments and ``args`` holds
    one (a third-party exception class as many are written)."""

    def __init__(self, what: str, why: str) -> None:
        super().__init__(f"{what}: {why}")


class Unpicklable(Exception):
    """Cannot be pickled at all (not with the errors pickling usually raises)."""

    def __reduce__(self) -> Any:
        raise RuntimeError("this exception refuses to be pickled")


class KeyRaising(str):
    """An object key whose ``rsplit`` (the directory store calls it on every key) raises
    the exception its class names, in the worker process."""

    error: type[Exception] = Exception

    def rsplit(self, *args: Any, **kwargs: Any) -> list[str]:  # type: ignore[override]
        if self.error is Unrebuildable:
            raise Unrebuildable(str(self), "refused")
        raise self.error(str(self))


class KeyRaisingUnrebuildable(KeyRaising):
    error = Unrebuildable


class KeyRaisingUnpicklable(KeyRaising):
    error = Unpicklable


def _refuse_to_load() -> None:
    raise RuntimeError("this argument cannot be decoded where it arrives")


class Undecodable:
    """Pickles, but its unpickling raises (in the worker process that receives it)."""

    def __reduce__(self) -> Any:
        return (_refuse_to_load, ())


# ---- helpers --------------------------------------------------------------------------------


def bounded(fn: Callable[[], T], timeout: float = WAIT_S) -> T:
    """``fn()`` on a daemon thread; its result or error, or TimeoutError when it does not
    end within ``timeout`` (an answer that never came)."""
    fut: Future[T] = Future()

    def run() -> None:
        try:
            fut.set_result(fn())
        except BaseException as exc:
            fut.set_exception(exc)

    threading.Thread(target=run, daemon=True).start()
    return fut.result(timeout=timeout)


@pytest.fixture
def worker(monkeypatch: pytest.MonkeyPatch) -> Iterator[TierWorker]:
    """A worker pool of its own (not the process-wide one), whose processes can import
    this module: the objects above are decoded there."""
    mod = sys.modules[__name__]
    assert mod.__file__ is not None
    root = Path(mod.__file__).resolve().parents[__name__.count(".")]
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))
    )
    w = TierWorker(1)
    try:
        yield w
    finally:
        w.close()


def fs_spec(tmp_path: Path) -> StorageSpec:
    store = LocalDirStorage(tmp_path / "bucket")
    store.put("a/present", b"12345")
    spec = spec_of(store)
    assert spec is not None
    return spec


def still_serves(worker: TierWorker, spec: StorageSpec, pids: list[int]) -> None:
    """The same worker process answers the next call."""
    assert bounded(lambda: worker.store_call(spec, "size", ("a/present",), {})) == 5
    assert worker.pids() == pids


# ---- the channel to a worker process ---------------------------------------------------------


def test_an_answer_that_cannot_be_decoded_fails_its_call(
    tmp_path: Path, worker: TierWorker
) -> None:
    """The worker's answer (an exception its caller cannot rebuild) reaches the log's
    process but cannot be unpickled there: that call fails, the channel goes on."""
    spec = fs_spec(tmp_path)
    assert bounded(lambda: worker.store_call(spec, "size", ("a/present",), {})) == 5
    pids = worker.pids()
    with pytest.raises(RemoteStorageError) as info:
        bounded(lambda: worker.store_call(spec, "size", (KeyRaisingUnrebuildable("a/x"),), {}))
    assert "Unrebuildable" in info.value.message and not info.value.retriable
    still_serves(worker, spec, pids)


def test_an_answer_that_cannot_be_encoded_fails_its_call(
    tmp_path: Path, worker: TierWorker
) -> None:
    """The task's exception cannot be pickled in the worker: its caller gets an error
    naming it instead of no answer at all."""
    spec = fs_spec(tmp_path)
    assert bounded(lambda: worker.store_call(spec, "size", ("a/present",), {})) == 5
    pids = worker.pids()
    with pytest.raises(RemoteStorageError) as info:
        bounded(lambda: worker.store_call(spec, "size", (KeyRaisingUnpicklable("a/x"),), {}))
    assert "Unpicklable" in info.value.message
    still_serves(worker, spec, pids)


def test_a_request_the_worker_cannot_decode_fails_alone(tmp_path: Path, worker: TierWorker) -> None:
    """A request whose arguments do not unpickle in the worker fails its call; the
    worker process (and whatever else it runs) goes on."""
    spec = fs_spec(tmp_path)
    assert bounded(lambda: worker.store_call(spec, "size", ("a/present",), {})) == 5
    pids = worker.pids()
    with pytest.raises(RemoteStorageError) as info:
        bounded(lambda: worker.store_call(spec, "put", ("a/y", Undecodable()), {}))
    assert "cannot be decoded" in info.value.message
    still_serves(worker, spec, pids)


# ---- a log's close and the fetches it gives up on --------------------------------------------

SMALL = LogConfig(segment_bytes=16 * 1024, index_interval_bytes=512)
TIER = TierConfig(chunk_bytes=4096, worker_processes=1, local_retention_bytes=0)


def test_a_fetch_the_close_cancels_before_it_ran_completes_its_chunks(tmp_path: Path) -> None:
    """Every fetch pool thread is busy, so a read's fetch task waits in the pool's queue
    (its chunks already marked as being fetched); the tier closes and cancels that task:
    the chunks' futures complete all the same (the close does not wait on them for
    ever, and neither does a reader)."""
    bucket = tmp_path / "bucket"
    tlog = TieredLog(
        tmp_path / "log",
        log_id="c-0",
        storage=LocalDirStorage(bucket),
        config=SMALL,
        tier=TIER,
        start_shipper=False,
    )
    try:
        for i in range(0, 2000, 50):
            tlog.append_batch([ProducerRecord(b"v%06d" % o + b"x" * 200) for o in range(i, i + 50)])
        tlog.roll()
        while tlog.tier_once():
            pass
        tlog.maintain()
        assert tlog.bounds().local_start_offset > 0
    finally:
        tlog.close()
    shutil.rmtree(tmp_path / "log" / naming.REMOTE_DIR / naming.CHUNK_CACHE_DIR)
    tier = RemoteTier(tmp_path / "log", "c-0", LocalDirStorage(bucket), TIER)

    pool = shared_pool("remote-fetch", FETCH_THREADS)
    gate, busy = threading.Event(), threading.Semaphore(0)

    def hold() -> None:
        busy.release()
        gate.wait(WAIT_S)

    blockers = [pool.submit(hold) for _ in range(FETCH_THREADS)]
    closing: threading.Thread | None = None
    try:
        for _ in range(FETCH_THREADS):
            assert busy.acquire(timeout=WAIT_S), "the fetch pool's threads did not start"

        def read() -> None:
            with contextlib.suppress(Exception):  # the close ends it one way or another
                tier.read_range(0, 10, 1 << 20)

        threading.Thread(target=read, daemon=True).start()
        # Wait until a group is handed to the pool (its chunks' futures are running).
        for _ in range(int(WAIT_S / 0.01)):
            if any(f.running() for f in tier.reader.fetch_futures()):
                break
            threading.Event().wait(0.01)
        futs = tier.reader.fetch_futures()  # taken after that hand-over ended
        assert any(f.running() for f in futs)
        closing = threading.Thread(target=tier.close, daemon=True)
        closing.start()
        for _ in range(int(WAIT_S / 0.01)):
            if any(f.cancelled() for f in futs):
                break
            threading.Event().wait(0.01)
        assert any(f.cancelled() for f in futs), "the close cancelled nothing"
    finally:
        gate.set()
        wait(blockers, timeout=WAIT_S)
    left = wait(futs, timeout=WAIT_S).not_done
    assert not left, f"{len(left)} fetch future(s) never completed"
    closing.join(WAIT_S)
    assert not closing.is_alive()
