"""A bucket that accepts connections and never answers must not hang readers.

Two bounds, as in Kafka (``remote.fetch.max.wait.ms``): a reader waits at most
``fetch_max_wait_ms`` (service: ``remote_fetch_max_wait_ms``) for a chunk from the bucket,
then gets a retriable RemoteTimeoutError (the service: 503, ``"retriable": true``) while the
fetch goes on in the background; and an S3 GET that gets no answer is given up after
``get_timeout`` seconds per attempt and ``get_retries`` retries (not botocore's read timeout
of 30 s four times). Time a fetch waits for the node's fetch quota is not counted.

The hangs are real: a socket server on 127.0.0.1 that accepts and never answers, a TCP
proxy in front of moto that stops answering, and moto's server process stopped with
SIGSTOP (the kernel still accepts its connections).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
from botocore.config import Config
from service.conftest import ServerProcess, free_port

from tiered_log.client import Client
from tiered_log.config import ConfigError, load_settings
from tiered_log.errors import InvalidArgumentError, RemoteStorageError, RemoteTimeoutError
from tiered_log.partition import TieredLog
from tiered_log.remote.fetch_wait import FetchPending, parked_reads
from tiered_log.remote.fs import LocalDirStorage
from tiered_log.remote.s3 import S3Storage
from tiered_log.remote.tier import TierConfig

from .test_tiered_log import check_record, open_log, produce


class HungServer:
    """Accepts TCP connections on 127.0.0.1 and never answers; counts them."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.accepted = 0
        self._held: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted += 1
            self._held.append(conn)  # read nothing, answer nothing

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for c in self._held:
            c.close()
        self.sock.close()


@pytest.fixture
def hung() -> Iterator[HungServer]:
    srv = HungServer()
    yield srv
    srv.close()


def _bounded(fn: Callable[[], Any], limit: float) -> tuple[BaseException | None, float]:
    """Run ``fn`` in a thread; its exception (None if it returned) and how long it took.
    Fails the test if it is still running after ``limit`` seconds."""
    out: list[BaseException | None] = [None]

    def run() -> None:
        try:
            fn()
        except BaseException as exc:
            out[0] = exc

    t0 = time.monotonic()
    th = threading.Thread(target=run, daemon=True)
    th.start()
    th.join(limit)
    took = time.monotonic() - t0
    assert not th.is_alive(), f"still waiting after {limit} s"
    return out[0], took


# ---- the S3 layer ---------------------------------------------------------------------------


def test_a_get_from_a_hung_endpoint_gives_up_after_its_timeout_and_one_retry(
    hung: HungServer,
) -> None:
    st = S3Storage(
        "bucket",
        endpoint_url=hung.url,
        access_key="a",
        secret_key="b",
        get_timeout=0.5,
        get_retries=1,
    )
    try:
        exc, took = _bounded(lambda: st.get("k", 0, 100), 20)
        assert isinstance(exc, RemoteTimeoutError), repr(exc)
        assert exc.retriable is True and exc.code == "remote_timeout"
        assert 0.9 < took < 3.5, took  # two attempts of 0.5 s (plus backoff)
        assert hung.accepted == 2  # one connection per attempt, no more
    finally:
        st.close()


def test_the_get_bounds_by_default_and_the_other_requests_keep_theirs() -> None:
    """Defaults: a GET attempt gets 5 s without an answer, and one retry (a hung ranged
    GET ends in about 10 s, not 4 x 30 s); uploads, lists and deletes keep the client's
    30 s read timeout and 3 retries (a large upload's answer may take a while)."""
    st = S3Storage("bucket", endpoint_url="http://127.0.0.1:9", access_key="a", secret_key="b")
    try:
        assert (st.get_timeout, st.get_retries) == (5.0, 1)
        # botocore's Config keeps its options as attributes its stubs do not declare
        g: Any = st.get_client.meta.config
        c: Any = st.client.meta.config
        assert (g.read_timeout, g.connect_timeout, g.retries["total_max_attempts"]) == (5.0, 5, 2)
        assert (c.read_timeout, c.connect_timeout, c.retries["total_max_attempts"]) == (30, 5, 4)
    finally:
        st.close()
    with pytest.raises(InvalidArgumentError, match="get_timeout"):
        S3Storage("bucket", endpoint_url="http://127.0.0.1:9", get_timeout=0)


def test_the_setting() -> None:
    assert TierConfig().fetch_max_wait_ms == 5000
    with pytest.raises(InvalidArgumentError, match="fetch_max_wait_ms"):
        TierConfig(fetch_max_wait_ms=0)
    s = load_settings(remote_fetch_max_wait_ms=2000)
    assert s.remote_fetch_max_wait_ms == 2000
    # S3 GETs are given at least as long per attempt as a reader waits (and at least
    # S3Storage's own 5 s): a fetch a reader stopped waiting for may still finish.
    assert s.s3_options()["get_timeout"] == 5.0
    assert load_settings(remote_fetch_max_wait_ms=20_000).s3_options()["get_timeout"] == 20.0
    with pytest.raises(ConfigError, match="remote_fetch_max_wait_ms"):
        load_settings(remote_fetch_max_wait_ms=0)


# ---- the reader's wait (RemoteTier) ---------------------------------------------------------


class HangingStorage:
    """A LocalDirStorage whose gets block while ``hang`` is set, until ``release``."""

    def __init__(self, root: Path) -> None:
        self.inner = LocalDirStorage(root)
        self.hang = threading.Event()
        self.release = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def get(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        if self.hang.is_set():
            self.release.wait(30)
        return self.inner.get(key, start, end)


def _archived_log(tmp_path: Path, storage: Any, n: int = 400, **tier: object) -> TieredLog:
    tlog = open_log(tmp_path / "log", storage, local_retention_bytes=0, **tier)
    produce(tlog, n)
    tlog.roll()
    tlog.tier_once()
    assert tlog.bounds().local_start_offset == n  # everything is archived, nothing local
    return tlog


def test_a_reader_waits_at_most_fetch_max_wait_then_the_fetch_goes_on(tmp_path: Path) -> None:
    storage = HangingStorage(tmp_path / "bucket")
    tlog = _archived_log(tmp_path, storage, fetch_max_wait_ms=300)
    try:
        storage.hang.set()
        for read in (
            lambda: tlog.read_range(0, 50),
            lambda: tlog.read_remote_batches(0, 50),
            lambda: tlog.read_range(200, 50),
        ):
            exc, took = _bounded(read, 10)
            assert isinstance(exc, RemoteTimeoutError), repr(exc)
            assert isinstance(exc, RemoteStorageError) and exc.retriable
            assert "fetch_max_wait" in str(exc)
            assert 0.25 < took < 2.0, took
        storage.release.set()  # the bucket answers again: the fetches under way finish
        storage.hang.clear()
        o = 0
        while o < 400:
            recs = tlog.read_range(o, 50)
            for r in recs:
                check_record(r, r.offset)
            o = recs[-1].offset + 1
    finally:
        storage.release.set()
        tlog.close()


def _parked(fn: Callable[[], Any]) -> Callable[[], Any]:
    def run() -> Any:
        with parked_reads():
            return fn()

    return run


def test_a_parked_read_hands_back_the_fetch_instead_of_waiting(tmp_path: Path) -> None:
    """What the broker's archived reads rely on to hold no thread while the bucket
    answers: inside ``parked_reads`` a read whose chunk is not fetched yet raises
    FetchPending at once, however long the bucket takes (here: it hangs until released;
    the read's own wait would be 20 s); the fetch goes on, its future completes once the
    bucket answers, and the same read then returns the records from the cache."""
    storage = HangingStorage(tmp_path / "bucket")
    tlog = _archived_log(tmp_path, storage, fetch_max_wait_ms=20_000)
    try:
        storage.hang.set()
        exc, _ = _bounded(_parked(lambda: tlog.read_range(0, 50)), 10)
        assert isinstance(exc, FetchPending), repr(exc)
        assert not exc.future.done()  # the bucket has not answered
        storage.release.set()
        storage.hang.clear()
        exc.future.result(timeout=10)
        got: list[Any] = []
        err, _ = _bounded(_parked(lambda: got.extend(tlog.read_range(0, 50))), 10)
        assert err is None, repr(err)
        assert [r.offset for r in got] == list(range(len(got))) and got
        for r in got:
            check_record(r, r.offset)
    finally:
        storage.release.set()
        tlog.close()


QUOTA = 8 * 1024
N_QUOTA = 150


def test_waiting_for_the_fetch_quota_does_not_count(tmp_path: Path) -> None:
    """A fetch held back by the fetch quota for longer than fetch_max_wait_ms is not a
    hung bucket: the reader waits for it (the quota slows readers, it does not fail
    them)."""
    storage = LocalDirStorage(tmp_path / "bucket")
    tlog = _archived_log(
        tmp_path,
        storage,
        n=N_QUOTA,
        fetch_max_wait_ms=150,
        fetch_bytes_per_sec=QUOTA,
        compression="none",  # the quota counts bucket bytes: here the log's own
    )
    try:
        assert tlog.remote_tier is not None
        size = sum(s.size for s in tlog.remote_tier.finished_segments)
        assert size > 2.5 * QUOTA  # over 1.5 s of the quota past its one second of burst
        t0 = time.monotonic()
        o = 0
        while o < N_QUOTA:
            recs = tlog.read_range(o, 50)
            for r in recs:
                check_record(r, r.offset)
            o = recs[-1].offset + 1
        assert time.monotonic() - t0 > 1.0  # it did wait for the quota
        assert tlog.describe()["remote_fetch_throttled_ms"] > 1000
    finally:
        tlog.close()


# ---- through the service --------------------------------------------------------------------


class Proxy:
    """A TCP proxy to ``upstream`` that can stop answering: :meth:`hang` makes it accept
    connections and drop whatever is sent on any connection (a hung bucket);
    :meth:`resume` closes every connection it holds and relays again."""

    def __init__(self, upstream: str) -> None:
        host, port = upstream.split("//", 1)[1].rsplit(":", 1)
        self.upstream = (host, int(port))
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.hanging = threading.Event()
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _keep(self, s: socket.socket) -> None:
        with self._lock:
            self._open.append(s)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            self._keep(client)
            if self.hanging.is_set():
                continue  # accepted, never answered
            try:
                up = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            up.settimeout(None)
            self._keep(up)
            for a, b in ((client, up), (up, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                if not self.hanging.is_set():
                    dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def hang(self) -> None:
        self.hanging.set()

    def resume(self) -> None:
        self.hanging.clear()
        with self._lock:
            held, self._open = self._open, []
        for s in held:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def close(self) -> None:
        self.resume()
        self.sock.close()


class MotoProcess:
    """moto's S3 server as a process of its own, so it can be stopped with SIGSTOP."""

    def __init__(self, log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    "from moto.server import main; main()",
                    "-H",
                    "127.0.0.1",
                    "-p",
                    str(self.port),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
            )
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(self.url, timeout=1)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.close()
                    raise RuntimeError("moto's server did not start") from None
                time.sleep(0.1)

    def hang(self) -> None:
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.kill(self.proc.pid, signal.SIGCONT)
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


MAX_WAIT_MS = 1000


@pytest.fixture(params=["proxy", "sigstop"])
def bucket(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Any, dict[str, str]]]:
    """A way to hang the bucket, and the service settings that reach it."""
    if request.param == "proxy":
        target: Any = request.getfixturevalue("s3_target")
        if not target.is_moto:
            pytest.skip("the proxy test runs against moto")
        loc: Any = request.getfixturevalue("s3_location")
        hang: Any = Proxy(target.endpoint)
        bucket_name = loc.bucket
    else:
        hang = MotoProcess(tmp_path / "moto.log")
        bucket_name = "hung-bucket"
        boto3.client(
            "s3",
            endpoint_url=hang.url,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            config=Config(s3={"addressing_style": "path"}),
        ).create_bucket(Bucket=bucket_name)
    settings = {
        "remote_url": f"s3://{bucket_name}",
        "s3_endpoint_url": hang.url,
        "s3_region": "us-east-1",
        "s3_access_key": "testing",
        "s3_secret_key": "testing",
        "ship_interval_ms": "50",
        "remote_fetch_max_wait_ms": str(MAX_WAIT_MS),
    }
    try:
        yield hang, settings
    finally:
        hang.close()


def _value(o: int) -> str:
    return f"value-{o:05d}-" + "x" * 100


def test_the_service_answers_a_retriable_error_while_the_bucket_hangs(
    tmp_path: Path, bucket: tuple[Any, dict[str, str]]
) -> None:
    hang, settings = bucket
    srv = ServerProcess(tmp_path / "data", tmp_path, settings).start()
    try:
        _hang_and_read(srv, hang)
    finally:
        hang.resume()
        srv.stop(timeout=30)
    log = srv.log()
    assert "RemoteTimeoutError" in log, log[-2000:]


def _hang_and_read(srv: ServerProcess, hang: Any) -> None:
    with httpx.Client(base_url=srv.url, timeout=20.0) as c:
        r = c.post(
            "/v1/topics",
            json={
                "name": "t",
                "partitions": 1,
                "config": {"segment_bytes": 4096, "local_retention_bytes": 0},
            },
        )
        assert r.status_code == 201, r.text
        for s in range(0, 300, 20):
            r = c.post(
                "/v1/topics/t/partitions/0/records",
                json={"records": [{"value": _value(o)} for o in range(s, s + 20)]},
            )
            assert r.status_code == 200, r.text
        deadline = time.monotonic() + 30
        while c.get("/v1/topics/t/partitions/0/bounds").json()["local_start_offset"] < 200:
            assert time.monotonic() < deadline, "segments were not shipped"
            time.sleep(0.1)
        last = 299  # in the active segment, which is never shipped: always read locally

        hang.hang()
        try:
            for offset, headers in ((0, {}), (100, {"Accept": "application/octet-stream"})):
                t0 = time.monotonic()
                r = c.get(
                    "/v1/topics/t/partitions/0/records", params={"offset": offset}, headers=headers
                )
                took = time.monotonic() - t0
                assert r.status_code == 503, (r.status_code, r.text[:300])
                err = r.json()["error"]
                assert err["code"] == "remote_timeout" and err["retriable"] is True, err
                assert MAX_WAIT_MS / 1000 * 0.9 < took < MAX_WAIT_MS / 1000 + 2.5, took
            # The Python client raises the error by its code.
            with Client(srv.url, timeout=20.0) as client, pytest.raises(RemoteTimeoutError):
                client.fetch("t", 0, 50, max_records=10)
            # Local records are served as usual meanwhile (a read that went to the hung
            # bucket would answer 503 remote_timeout).
            r = c.get("/v1/topics/t/partitions/0/records", params={"offset": last})
            assert r.status_code == 200 and r.json()["records"][0]["value"] == _value(last)
        finally:
            hang.resume()

        # The bucket answers again: the archived records come back (after a retry or two).
        deadline = time.monotonic() + 30
        o = 0
        while o < 300:
            r = c.get("/v1/topics/t/partitions/0/records", params={"offset": o, "max_records": 100})
            if r.status_code == 503 and r.json()["error"]["retriable"]:
                assert time.monotonic() < deadline, r.text
                time.sleep(0.2)
                continue
            assert r.status_code == 200, r.text
            body = r.json()
            assert [x["value"] for x in body["records"]] == [
                _value(i) for i in range(o, body["next_offset"])
            ]
            o = body["next_offset"]
