"""The lean binary produce path: a body read into one buffer, verified, rebased in place.

In process: :func:`~tiered_log.service.produce.receive_body` assembles a body from any
split into ASGI messages (with a ``Content-Length``, past the up-front allocation, and
chunked), refuses a body that ends early or a client that goes away, and
:func:`~tiered_log.format.records.receive_batches` with ``in_place`` keeps the buffer
(without, it copies). Against a real server over raw loopback sockets: a body sent in
many small TCP writes is stored exactly, a damaged batch sent that way is 400 with
nothing stored, a body larger than the up-front allocation is stored exactly, and a
client that goes away mid-body stores nothing. Behaviour only, never speed.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from starlette.requests import Request

from tiered_log.client import Client
from tiered_log.errors import InvalidRequestError
from tiered_log.format.records import decode_records, encode_batch, receive_batches
from tiered_log.service import produce

from .conftest import ServerProcess
from .test_http_hardening import Conn

FRAMES = "application/vnd.tiered-log.frames"


def _frames(values: list[bytes], max_batch_bytes: int = 1 << 20) -> bytes:
    """A produce body: ``values`` as batches (server clock), base offset 0."""
    return bytes(encode_batch(0, values, -1, 1 << 30, max_batch_bytes=max_batch_bytes).data)


# ---- receive_body in process ----------------------------------------------------------


def _receive(pieces: list[bytes], *, length: int | None, end: str = "complete") -> Any:
    """``receive_body`` of a request whose body comes as ``pieces`` (one ASGI message
    each); ``end``: "complete" (the last says no more), "disconnect" (then the client goes
    away), "short" (the last says no more although ``length`` was not reached)."""
    messages: list[dict[str, Any]] = [
        {"type": "http.request", "body": p, "more_body": i + 1 < len(pieces) or end != "complete"}
        for i, p in enumerate(pieces)
    ]
    if end == "disconnect":
        messages.append({"type": "http.disconnect"})
    elif end == "short":
        messages.append({"type": "http.request", "body": b"", "more_body": False})
    if not messages:
        messages.append({"type": "http.request", "body": b"", "more_body": False})
    it = iter(messages)

    async def receive() -> dict[str, Any]:
        return next(it)

    headers = [] if length is None else [(b"content-length", str(length).encode())]
    scope = {"type": "http", "method": "POST", "path": "/", "headers": headers, "query_string": b""}
    return asyncio.run(produce.receive_body(Request(scope, receive)))


def _split(data: bytes, sizes: list[int]) -> list[bytes]:
    """``data`` cut into pieces of ``sizes`` in turn (the last piece takes the rest)."""
    out, pos, i = [], 0, 0
    while pos < len(data):
        n = sizes[i % len(sizes)]
        out.append(data[pos : pos + n])
        pos += n
        i += 1
    return out


@pytest.mark.parametrize("sizes", [[1], [7, 1, 300], [65536], [1 << 22]])
def test_receive_body_assembles_any_split(sizes: list[int]) -> None:
    body = bytes(range(256)) * 1000
    got = _receive(_split(body, sizes), length=len(body))
    assert isinstance(got, bytearray) and got == body


def test_receive_body_past_the_up_front_allocation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(produce, "PREALLOC_BYTES", 1000)
    body = bytes(range(256)) * 20
    for sizes in ([999], [1000], [1001], [300, 7], [len(body)]):
        assert _receive(_split(body, sizes), length=len(body)) == body, sizes


def test_receive_body_without_a_length_grows() -> None:
    body = b"abc" * 50_000
    assert _receive(_split(body, [4096, 3]), length=None) == body
    assert _receive([], length=None) == b""
    assert _receive([], length=0) == b""


@pytest.mark.parametrize("end", ["disconnect", "short"])
def test_receive_body_that_ends_early_is_refused(end: str) -> None:
    body = b"x" * 5000
    with pytest.raises(InvalidRequestError, match="went away"):
        _receive(_split(body[:3000], [1000]), length=len(body), end=end)
    with pytest.raises(InvalidRequestError, match="went away"):
        _receive([b"abc"], length=None, end="disconnect")


def test_receive_batches_in_place_keeps_the_buffer() -> None:
    body = bytearray(_frames([b"a" * 100, b"b" * 200], max_batch_bytes=200))
    kept = bytes(body)
    copied = receive_batches(body, 1 << 20)
    assert copied.data is not body and copied.data == body
    copied.rebased(50, 1)
    assert body == kept  # a copy was rebased: the caller's buffer is untouched
    taken = receive_batches(body, 1 << 20, in_place=True)
    assert taken.data is body and len(taken.batches) == 2
    moved = taken.rebased(50, 1)
    assert moved.data is body  # rebased in place: no copy of the body
    recs = decode_records(bytes(body))[0]
    assert [(r.offset, r.timestamp, r.value) for r in recs] == [
        (50, 1, b"a" * 100),
        (51, 1, b"b" * 200),
    ]
    # A buffer that is not a bytearray is copied whatever in_place says.
    frozen = bytes(kept)
    assert receive_batches(frozen, 1 << 20, in_place=True).data is not frozen


# ---- a real server over raw sockets ----------------------------------------------------


@pytest.fixture
def srv(server_factory: Any) -> ServerProcess:
    """A server without auth that takes bodies up to 8 MiB (past the 4 MiB allocated up
    front), with a 2 s body timeout."""
    s: ServerProcess = server_factory(max_request_bytes=str(8 << 20), body_timeout_s="2")
    return s


@pytest.fixture
def topic(srv: ServerProcess, topic_name: str) -> str:
    """A new topic of one partition on ``srv``."""
    with Client(srv.url) as c:
        c.create_topic(topic_name, 1)
    return topic_name


def _head(topic: str, length: int) -> bytes:
    return (
        f"POST /v1/topics/{topic}/partitions/0/records HTTP/1.1\r\nHost: x\r\n"
        f"Content-Type: {FRAMES}\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


def _values(srv: ServerProcess, topic: str) -> list[bytes | None]:
    """Every record value of the topic's partition 0 (binary fetches, checksums verified)."""
    with Client(srv.url) as c:
        return [r.value for page in c.consume(topic, 0, 0) for r in page.records]


def _next_offset(srv: ServerProcess, topic: str) -> int:
    r = httpx.get(f"{srv.url}/v1/topics/{topic}/partitions/0/bounds", timeout=10)
    assert r.status_code == 200, r.text
    return int(r.json()["next_offset"])


def _send_in_pieces(c: Conn, data: bytes, piece: int) -> None:
    """``data`` in ``piece``-byte TCP writes (no Nagle), pausing now and then so the
    server reads them apart."""
    c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for i, p in enumerate(_split(data, [piece])):
        c.send(p)
        if i % 16 == 15:
            time.sleep(0.002)


def test_a_batch_split_across_many_tcp_reads_is_stored_exactly(
    srv: ServerProcess, topic: str
) -> None:
    values = [bytes([i % 251]) * (100 + i) for i in range(300)]
    body = _frames(values, max_batch_bytes=8192)  # several batches, cut anywhere
    with Conn(srv) as c:
        c.send(_head(topic, len(body)))
        _send_in_pieces(c, body, 997)
        r = c.reply()
    assert r.status == 200, r
    assert _values(srv, topic) == values


def test_a_damaged_batch_split_across_reads_is_400_and_nothing_stored(
    srv: ServerProcess, topic: str
) -> None:
    values = [b"v" * 1000 for _ in range(200)]
    body = bytearray(_frames(values, max_batch_bytes=50_000))
    body[len(body) // 2] ^= 0x01  # one bit of one value in a middle batch
    with Conn(srv) as c:
        c.send(_head(topic, len(body)))
        _send_in_pieces(c, bytes(body), 1500)
        r = c.reply()
    assert r.status == 400
    err = r.error()
    assert err["code"] == "invalid_request" and "CRC-32C" in str(err["message"]), err
    assert _next_offset(srv, topic) == 0


def test_a_body_larger_than_the_up_front_allocation_is_stored_exactly(
    srv: ServerProcess, topic: str
) -> None:
    values = [i.to_bytes(4, "little") * 256 for i in range(5000)]  # ~5.1 MB body
    body = _frames(values)
    assert produce.PREALLOC_BYTES < len(body) <= 8 << 20
    r = httpx.post(
        f"{srv.url}/v1/topics/{topic}/partitions/0/records",
        content=body,
        headers={"Content-Type": FRAMES},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    assert r.json()["offsets"] == list(range(5000))
    assert _values(srv, topic) == values

    def chunks() -> Iterator[bytes]:  # the same, chunked (no Content-Length)
        for i in range(0, len(body), 100_000):
            yield body[i : i + 100_000]

    r = httpx.post(
        f"{srv.url}/v1/topics/{topic}/partitions/0/records",
        content=chunks(),
        headers={"Content-Type": FRAMES},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    assert _values(srv, topic) == values + values


def test_a_client_that_goes_away_mid_body_stores_nothing(srv: ServerProcess, topic: str) -> None:
    body = _frames([b"w" * 1000 for _ in range(1000)])
    with Conn(srv) as c:
        c.send(_head(topic, len(body)))
        c.send(body[: len(body) // 2])
        time.sleep(0.2)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # the server is still serving, and stored nothing
        if httpx.get(srv.url + "/healthz", timeout=5).status_code == 200:
            break
        time.sleep(0.1)
    assert _next_offset(srv, topic) == 0
    r = httpx.post(
        f"{srv.url}/v1/topics/{topic}/partitions/0/records",
        content=body,
        headers={"Content-Type": FRAMES},
        timeout=30,
    )
    assert r.status_code == 200 and r.json()["first_offset"] == 0, r.text
