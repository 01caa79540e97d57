"""HTTP hardening below the app, against a real server over raw loopback sockets.

What the protocol layer (``tiered_log.service.http_protocol``) must do: cap the request
head (431), close connections that send no whole head or whose body stalls or trickles
(408), refuse transfer codings other than plain ``chunked`` (501), and answer every
rejection it makes with the API's JSON error body. Every wait here is bounded; the
server runs with 1 s timeouts so that the tests show behaviour, not speed.
"""

from __future__ import annotations

import gzip
import json
import select
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import httpx
import pytest

from .conftest import ServerProcess, new_topic, timeouts_server

HEAD_LIMIT = 64 << 10  # the default max_request_head_bytes


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server without auth, with 1 s header and body timeouts and the default head cap."""
    yield from timeouts_server(tmp_path_factory, "hardening")


@pytest.fixture
def topic(srv: ServerProcess, topic_name: str) -> str:
    return new_topic(srv, topic_name)


def _high_watermark(srv: ServerProcess, topic: str) -> int:
    r = httpx.get(f"{srv.url}/v1/topics/{topic}/partitions/0/bounds", timeout=10)
    assert r.status_code == 200, r.text
    return int(r.json()["high_watermark"])


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def error(self) -> dict[str, object]:
        """The JSON error object, checked to be the API's format."""
        assert self.headers.get("content-type", "").startswith("application/json"), self
        doc = json.loads(self.body)
        assert set(doc) == {"error"}, doc
        err: dict[str, object] = doc["error"]
        assert isinstance(err["code"], str) and err["code"], err
        assert isinstance(err["message"], str) and err["message"], err
        assert isinstance(err["retriable"], bool), err
        return err


class Conn:
    """A raw client connection that keeps what it read past one response for the next."""

    def __init__(self, srv: ServerProcess) -> None:
        self.sock = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        self.buf = b""

    def __enter__(self) -> Conn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _more(self, deadline: float, within: float) -> None:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"no complete response within {within} s; got {self.buf[:300]!r}")
        self.sock.settimeout(left)
        try:
            data = self.sock.recv(65536)
        except TimeoutError:
            raise AssertionError(
                f"no complete response within {within} s; got {self.buf[:300]!r}"
            ) from None
        if not data:
            raise AssertionError(
                f"connection closed before a complete response; got {self.buf[:300]!r}"
            )
        self.buf += data

    def reply(self, within: float = 10.0) -> Reply:
        """The next HTTP response (Content-Length framed), waiting at most ``within``."""
        deadline = time.monotonic() + within
        while b"\r\n\r\n" not in self.buf:
            self._more(deadline, within)
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        n = int(headers.get("content-length", "0"))
        while len(self.buf) < n:
            self._more(deadline, within)
        body, self.buf = self.buf[:n], self.buf[n:]
        return Reply(status, headers, body)

    def closed_within(self, within: float) -> bool:
        """Whether the server closes the connection within ``within`` seconds, having sent
        nothing more."""
        deadline = time.monotonic() + within
        try:
            while (left := deadline - time.monotonic()) > 0:
                self.sock.settimeout(left)
                data = self.sock.recv(65536)
                if not data:
                    break
                self.buf += data
            else:
                return False
        except (ConnectionResetError, BrokenPipeError):
            pass
        except TimeoutError:
            return False
        assert self.buf == b"", f"unexpected bytes after the response: {self.buf[:300]!r}"
        return True


class _Sender(threading.Thread):
    """Sends ``chunks`` on ``sock`` until done or the connection fails; counts bytes sent."""

    def __init__(self, sock: socket.socket, chunks: Iterable[bytes]) -> None:
        super().__init__(daemon=True)
        self.sock = sock
        self.chunks = chunks
        self.sent = 0
        self.failed: OSError | None = None

    def run(self) -> None:
        try:
            for c in self.chunks:
                self.sock.sendall(c)
                self.sent += len(c)
        except OSError as exc:
            self.failed = exc


def _filler(total: int, chunk: int = 1 << 20) -> Iterator[bytes]:
    block = b"a" * chunk
    while total > 0:
        yield block[: min(chunk, total)]
        total -= chunk


# ---- a) the request head is capped ------------------------------------------------------


def test_head_just_under_the_cap_is_served(srv: ServerProcess) -> None:
    with Conn(srv) as c:
        pad = b"a" * (HEAD_LIMIT - 1024)
        c.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + pad + b"\r\n\r\n")
        assert c.reply().status == 200


def test_header_over_the_cap_answers_431_json_and_closes(srv: ServerProcess) -> None:
    with Conn(srv) as c:
        pad = b"a" * (HEAD_LIMIT + 1024)
        sender = _Sender(
            c.sock, [b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + pad + b"\r\n\r\n"]
        )
        sender.start()
        r = c.reply()
        assert r.status == 431
        err = r.error()
        assert err["code"] == "request_header_too_large" and err["retriable"] is False
        assert r.headers.get("connection") == "close"
        assert c.closed_within(10)
        sender.join(10)


def test_request_line_of_1mib_answers_431(srv: ServerProcess) -> None:
    with Conn(srv) as c:
        line = b"GET /healthz?q=" + b"a" * (1 << 20) + b" HTTP/1.1\r\nHost: x\r\n\r\n"
        sender = _Sender(c.sock, [line])
        sender.start()
        r = c.reply()
        assert r.status == 431, r
        assert r.error()["code"] == "request_header_too_large"
        assert c.closed_within(10)
        sender.join(10)


def test_header_of_50mb_answers_431_and_is_not_read_to_the_end(srv: ServerProcess) -> None:
    total = 50_000_000
    with Conn(srv) as c:
        chunks = [b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ", *_filler(total), b"\r\n\r\n"]
        sender = _Sender(c.sock, chunks)
        sender.start()
        r = c.reply()
        assert r.status == 431, r
        r.error()
        assert c.closed_within(10)
        sender.join(10)
        assert not sender.is_alive()
        # The server closed the connection long before the header's end.
        assert sender.failed is not None
        assert sender.sent < total


def test_ten_unfinished_40mib_heads_are_cut_off_at_the_cap(srv: ServerProcess) -> None:
    total = 40 << 20
    conns = [Conn(srv) for _ in range(10)]
    try:
        senders = [
            _Sender(c.sock, [b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ", *_filler(total)])
            for c in conns
        ]
        for t in senders:
            t.start()
        deadline = time.monotonic() + 20
        for c in conns:
            r = c.reply(within=max(0.1, deadline - time.monotonic()))
            assert r.status == 431, r
            assert c.closed_within(max(0.1, deadline - time.monotonic()))
        for t in senders:
            t.join(max(0.1, deadline - time.monotonic()))
            assert not t.is_alive()
            # Cut off: the server stopped taking the header long before its 40 MiB.
            assert t.failed is not None and t.sent < total
    finally:
        for c in conns:
            c.sock.close()
    assert httpx.get(srv.url + "/healthz", timeout=10).status_code == 200


def test_trailer_section_over_the_cap_answers_431_and_stores_nothing(
    srv: ServerProcess, topic: str
) -> None:
    """A chunked body's trailer fields are header fields too: capped like the head."""
    with Conn(srv) as c:
        head = (
            f"POST /v1/topics/{topic}/partitions/0/records HTTP/1.1\r\nHost: x\r\n"
            "Content-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
            "5\r\nhello\r\n0\r\nX-Trailer: "
        ).encode()
        sender = _Sender(c.sock, [head, *_filler(1 << 20, 64 << 10), b"\r\n\r\n"])
        sender.start()
        r = c.reply()
        assert r.status == 431, r
        assert r.error()["code"] == "request_header_too_large"
        assert c.closed_within(10)
        sender.join(10)
    assert _high_watermark(srv, topic) == 0


def test_head_cap_is_configurable(server_factory: Callable[..., ServerProcess]) -> None:
    cap = 2 << 20
    big = server_factory(max_request_head_bytes=str(cap))
    with Conn(big) as c:
        c.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * (100 << 10) + b"\r\n\r\n")
        assert c.reply().status == 200
        sender = _Sender(
            c.sock,
            [
                b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: ",
                *_filler(cap + (1 << 20)),
                b"\r\n\r\n",
            ],
        )
        sender.start()
        r = c.reply()
        assert r.status == 431, r
        assert str(cap) in str(r.error()["message"])
        sender.join(10)
    with Conn(big) as c:
        # Under this cap, but longer than any request target the server can parse: 400.
        c.send(b"GET /healthz?q=" + b"a" * (1 << 20) + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        r = c.reply()
        assert r.status == 400, r
        assert r.error()["code"] == "invalid_request"


# ---- b) timeouts ------------------------------------------------------------------------


def test_connection_that_sends_nothing_is_closed(srv: ServerProcess) -> None:
    with Conn(srv) as c:
        c.sock.settimeout(10)
        try:
            data = c.sock.recv(65536)
        except TimeoutError:
            pytest.fail("an idle connection was still open after 10 s (header_timeout_s=1)")
        except ConnectionResetError:
            data = b""
        assert data == b""  # closed without an answer: it asked nothing


def test_unfinished_head_answers_408_and_closes(srv: ServerProcess) -> None:
    with Conn(srv) as c:
        c.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        r = c.reply(within=10)
        assert r.status == 408
        assert r.error()["code"] == "request_timeout"
        assert c.closed_within(10)


def test_trickled_head_is_cut_off(srv: ServerProcess) -> None:
    """A byte every 0.1 s never lets the 1 s between-bytes gap pass; the head's own
    deadline still ends it."""
    with Conn(srv) as c:
        c.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: ")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            readable, _, _ = select.select([c.sock], [], [], 0.1)
            if readable:
                break
            try:
                c.send(b"a")
            except OSError:
                break
        else:
            pytest.fail("a head trickled for 10 s was still being read (header_timeout_s=1)")
        r = c.reply()
        assert r.status == 408, r
        assert c.closed_within(10)


def test_keep_alive_connection_idle_past_the_header_timeout_is_kept(srv: ServerProcess) -> None:
    """Between requests, uvicorn's keep-alive timeout (5 s) applies, not header_timeout_s."""
    with Conn(srv) as c:
        c.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert c.reply().status == 200
        time.sleep(2.0)
        c.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert c.reply().status == 200


def test_long_poll_outlasts_the_timeouts(srv: ServerProcess, topic: str) -> None:
    with Conn(srv) as c:
        c.send(
            f"GET /v1/topics/{topic}/partitions/0/records?offset=0&wait_ms=2500 HTTP/1.1\r\n"
            "Host: x\r\n\r\n".encode()
        )
        r = c.reply(within=15)
        assert r.status == 200, r
        assert json.loads(r.body)["records"] == []


def _post_head(topic: str, length: int) -> bytes:
    return (
        f"POST /v1/topics/{topic}/partitions/0/records HTTP/1.1\r\nHost: x\r\n"
        f"Content-Type: application/octet-stream\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


def test_stalled_body_answers_408_and_stores_nothing(srv: ServerProcess, topic: str) -> None:
    with Conn(srv) as c:
        c.send(_post_head(topic, 1000) + b"x" * 100)
        r = c.reply(within=10)
        assert r.status == 408, r
        assert r.error()["code"] == "request_timeout"
        assert c.closed_within(10)
    assert _high_watermark(srv, topic) == 0


def test_trickled_body_is_cut_off_and_stores_nothing(srv: ServerProcess, topic: str) -> None:
    """A byte every 0.2 s: never a 1 s gap, but far below the minimum body rate."""
    with Conn(srv) as c:
        c.send(_post_head(topic, 1000))
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            readable, _, _ = select.select([c.sock], [], [], 0.2)
            if readable:
                break
            try:
                c.send(b"x")
            except OSError:
                break
        else:
            pytest.fail("a body trickled at 5 bytes/s for 15 s was still being read")
        r = c.reply()
        assert r.status == 408, r
        assert c.closed_within(10)
    assert _high_watermark(srv, topic) == 0


def test_slow_but_steady_body_is_accepted(srv: ServerProcess, topic: str) -> None:
    """1000 bytes every 0.4 s (2.5 kB/s, gaps under body_timeout_s) for 2.4 s is served."""
    with Conn(srv) as c:
        c.send(_post_head(topic, 6000))
        for _ in range(6):
            time.sleep(0.4)
            c.send(b"y" * 1000)
        r = c.reply(within=10)
        assert r.status == 200, r
    assert _high_watermark(srv, topic) == 1


# ---- c) transfer codings other than chunked ---------------------------------------------


def _chunked(body: bytes) -> bytes:
    return f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"


@pytest.mark.parametrize(
    "te_fields",
    [
        ["gzip, chunked"],
        ["gzip", "chunked"],
        ["deflate,chunked"],
        ["identity, chunked"],
    ],
    ids=["gzip-chunked", "two-fields", "deflate", "identity"],
)
def test_transfer_coding_other_than_chunked_answers_501(
    srv: ServerProcess, topic: str, te_fields: list[str]
) -> None:
    te = "".join(f"Transfer-Encoding: {v}\r\n" for v in te_fields)
    with Conn(srv) as c:
        c.send(
            (
                f"POST /v1/topics/{topic}/partitions/0/records HTTP/1.1\r\nHost: x\r\n"
                f"Content-Type: application/octet-stream\r\n{te}\r\n"
            ).encode()
            + _chunked(gzip.compress(b"hello"))
        )
        r = c.reply()
        assert r.status == 501, r
        err = r.error()
        assert err["code"] == "not_implemented" and err["retriable"] is False
        assert c.closed_within(10)
    assert _high_watermark(srv, topic) == 0


def test_plain_chunked_body_is_accepted(srv: ServerProcess, topic: str) -> None:
    with Conn(srv) as c:
        c.send(
            (
                f"POST /v1/topics/{topic}/partitions/0/records HTTP/1.1\r\nHost: x\r\n"
                "Content-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
            ).encode()
            + _chunked(b"hello")
        )
        assert c.reply().status == 200
    assert _high_watermark(srv, topic) == 1


# ---- d) the server's own rejections are JSON ---------------------------------------------


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"Transfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
        b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        b"Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
        b"X-Bad: a\x01b\r\nContent-Length: 5\r\n\r\nhello",
    ],
    ids=["bad-chunk-size", "cl-and-te", "two-content-lengths", "control-char"],
)
def test_malformed_request_answers_400_json(
    srv: ServerProcess, topic: str, request_bytes: bytes
) -> None:
    with Conn(srv) as c:
        c.send(
            f"POST /v1/topics/{topic}/partitions/0/records HTTP/1.1\r\nHost: x\r\n"
            "Content-Type: application/octet-stream\r\n".encode()
            + request_bytes
        )
        r = c.reply()
        assert r.status == 400, r
        err = r.error()
        assert err["code"] == "invalid_request" and err["retriable"] is False
        assert c.closed_within(10)
    assert _high_watermark(srv, topic) == 0


def test_pipelined_requests_are_still_served_in_order(srv: ServerProcess) -> None:
    with Conn(srv) as c:
        c.send(
            b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" * 3
            + b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n"
        )
        assert [c.reply().status for _ in range(4)] == [200, 200, 200, 404]
