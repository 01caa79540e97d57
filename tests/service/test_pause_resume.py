"""Requests held by a server process across SIGSTOP/SIGCONT, against a real server.

While a server process is stopped its clients' bytes pile up unread in the kernel; once
it runs again its header, body and keep-alive timers are all overdue at once. The time
it was stopped must not count against a client: a request whose bytes were there all
along is served, a request the app holds (a long poll) is answered, and a client that
really trickles is still cut off with its 408. The server never leaves an app's
response unfinished (uvicorn's ``ASGI callable returned without completing response``).

Whether a stopped loop runs its due timers before it reads the sockets depends on where
the stop caught it (inside ``epoll_wait`` the reads come first); a helper process keeps
the server's loop busy with pipelined requests so that the stop often lands mid-turn,
and each scenario is repeated. Every wait is bounded; the server runs with 1 s header
and body timeouts.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from tiered_log.service.http_protocol import STALL_SLACK_S, STALL_TICK_S, StallClock

from .conftest import ServerProcess, new_topic, timeouts_server
from .test_http_hardening import Conn, Reply

UNFINISHED = "ASGI callable returned without completing response"

_BUSY = r"""
import asyncio, sys
N = 64
async def one(port):
    r, w = await asyncio.open_connection("127.0.0.1", port)
    req = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" * N
    while True:
        w.write(req)
        for _ in range(N):
            await r.readuntil(b"}")
async def main(port, n):
    await asyncio.gather(*(one(port) for _ in range(n)), return_exceptions=True)
asyncio.run(main(int(sys.argv[1]), 8))
"""


@contextlib.contextmanager
def busy(srv: ServerProcess) -> Iterator[None]:
    """Keep the server's event loop busy (a helper process sending pipelined requests)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _BUSY, str(srv.port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(0.3)
        yield
    finally:
        proc.kill()
        proc.wait(10)


@contextlib.contextmanager
def stopped(
    srv: ServerProcess,
    helper: contextlib.AbstractContextManager[None] | None = None,
    seconds: float = 1.5,
) -> Iterator[None]:
    """SIGSTOP the server (the pid this test started), run the body, stay stopped until
    ``seconds`` have passed, SIGCONT. ``helper`` (a :func:`busy`) ends while stopped."""
    assert srv.proc is not None and srv.proc.poll() is None
    pid = srv.proc.pid
    until = time.monotonic() + seconds
    os.kill(pid, signal.SIGSTOP)
    try:
        if helper is not None:
            helper.__exit__(None, None, None)
        yield
        time.sleep(max(0.0, until - time.monotonic()))
    finally:
        os.kill(pid, signal.SIGCONT)


def _post_head(topic: str, length: int) -> bytes:
    return (
        f"POST /v1/topics/{topic}/partitions/0/records HTTP/1.1\r\nHost: x\r\n"
        f"Content-Type: application/octet-stream\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


def _high_watermark(srv: ServerProcess, topic: str) -> int:
    r = httpx.get(f"{srv.url}/v1/topics/{topic}/partitions/0/bounds", timeout=10)
    assert r.status_code == 200, r.text
    return int(r.json()["high_watermark"])


def _assert_produced(r: Reply, attempt: int) -> None:
    assert r.status == 200, f"attempt {attempt}: {r}"
    assert r.headers.get("content-type", "").startswith("application/json"), r
    assert len(json.loads(r.body)["offsets"]) == 1


def _assert_clean_log(srv: ServerProcess) -> None:
    log = srv.log()
    assert UNFINISHED not in log
    assert "request body stalled" not in log, log[-3000:]


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server without auth, with 1 s header and body timeouts."""
    yield from timeouts_server(tmp_path_factory, "pause")


@pytest.fixture
def topic(srv: ServerProcess, topic_name: str) -> str:
    return new_topic(srv, topic_name)


def test_body_that_arrived_while_stopped_is_served(srv: ServerProcess, topic: str) -> None:
    """The head is read, the body lands in the kernel while the server is stopped for
    longer than body_timeout_s: once it runs again, the body is read and stored (200),
    not refused as stalled (408)."""
    attempts = 5
    for i in range(attempts):
        helper = busy(srv)
        helper.__enter__()
        with Conn(srv) as c:
            c.send(_post_head(topic, 100))
            time.sleep(0.2)
            with stopped(srv, helper):
                c.send(b"b" * 100)
            _assert_produced(c.reply(within=10), i)
    assert _high_watermark(srv, topic) == attempts
    _assert_clean_log(srv)


def test_head_finished_while_stopped_is_served(srv: ServerProcess, topic: str) -> None:
    """Half a head before the stop, the rest and the body during it (longer than
    header_timeout_s): served once the server runs again."""
    attempts = 3
    for i in range(attempts):
        head = _post_head(topic, 10)
        helper = busy(srv)
        helper.__enter__()
        with Conn(srv) as c:
            c.send(head[:40])
            time.sleep(0.2)
            with stopped(srv, helper):
                c.send(head[40:] + b"h" * 10)
            _assert_produced(c.reply(within=10), i)
    assert _high_watermark(srv, topic) == attempts
    _assert_clean_log(srv)


def test_next_request_on_a_kept_alive_connection_sent_while_stopped(
    srv: ServerProcess, topic: str
) -> None:
    """A request sent on a kept-alive connection while the server is stopped for longer
    than uvicorn's keep-alive timeout (5 s) is answered, not dropped with the
    connection."""
    with Conn(srv) as c:
        c.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert c.reply().status == 200
        helper = busy(srv)
        helper.__enter__()
        with stopped(srv, helper, seconds=5.8):
            c.send(_post_head(topic, 5) + b"k" * 5)
        _assert_produced(c.reply(within=10), 0)
    _assert_clean_log(srv)


@pytest.mark.parametrize("accept", ["application/json", "application/octet-stream"])
def test_long_poll_held_across_a_stop_is_answered(
    srv: ServerProcess, topic: str, accept: str
) -> None:
    """A fetch waiting at the end of the log when the server stops, and whose wait ends
    while it is stopped, gets its (empty) answer once the server runs again; so does a
    produce sent meanwhile on another connection."""
    with Conn(srv) as poll, Conn(srv) as prod:
        poll.send(
            f"GET /v1/topics/{topic}/partitions/0/records?offset=0&wait_ms=1000 "
            f"HTTP/1.1\r\nHost: x\r\nAccept: {accept}\r\n\r\n".encode()
        )
        time.sleep(0.3)
        with stopped(srv, seconds=2.0):
            prod.send(_post_head(topic, 3) + b"abc")
        r = poll.reply(within=10)
        assert r.status == 200, r
        if accept == "application/json":
            assert len(json.loads(r.body)["records"]) <= 1
        _assert_produced(prod.reply(within=10), 0)
    _assert_clean_log(srv)


def test_trickled_body_across_a_stop_still_answers_408(srv: ServerProcess, topic: str) -> None:
    """A byte every 0.2 s (far below the minimum body rate), the server stopped for 1.5 s
    in the middle: the stop is not held against the client, but the trickle still is."""
    with Conn(srv) as c:
        c.send(_post_head(topic, 1000))
        began = time.monotonic()
        stopped_once = False
        deadline = began + 15
        while time.monotonic() < deadline:
            readable, _, _ = select.select([c.sock], [], [], 0.2)
            if readable:
                break
            try:
                c.send(b"t")
            except OSError:
                break
            if not stopped_once and time.monotonic() - began > 0.5:
                stopped_once = True
                with stopped(srv):
                    for _ in range(7):
                        c.send(b"t")
                        time.sleep(0.2)
        else:
            pytest.fail("a body trickled at 5 bytes/s for 15 s was still being read")
        r = c.reply()
        assert r.status == 408, r
        assert r.error()["code"] == "request_timeout"
        assert c.closed_within(10)
    assert _high_watermark(srv, topic) == 0
    assert UNFINISHED not in srv.log()


def test_stall_clock_does_not_count_a_blocked_loop() -> None:
    """The loop blocked for 1 s: the stall clock moves on by at most the tick allowance."""

    async def main() -> tuple[float, float]:
        loop = asyncio.get_running_loop()
        clock = StallClock.of(loop)
        assert StallClock.of(loop) is clock
        await asyncio.sleep(0.3)
        t0, c0 = loop.time(), clock.now()
        time.sleep(1.0)  # blocks the loop, as a stopped process would
        t1, c1 = loop.time(), clock.now()  # before the next tick ran
        assert c1 - c0 <= STALL_TICK_S + STALL_SLACK_S + 0.05
        await asyncio.sleep(0.3)
        assert clock.now() >= c1
        return t1 - t0, c1 - c0

    real, counted = asyncio.run(main())
    assert real >= 1.0
    assert counted < 0.5
