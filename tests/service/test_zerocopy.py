"""Zero-copy responses (issue 18): binary fetches sent from the files with ``sendfile``.

Two levels, both over real sockets on 127.0.0.1:

- the service as a real process: binary fetches of local segments and of archived data
  (chunk cache files, and chunks only in memory) answer exactly the stored batches, the
  same as the JSON form's records, across segment and chunk boundaries; the server
  process really calls ``sendfile`` (seen by ``strace`` when the machine has it);
- our HTTP protocol under a real uvicorn server with a small ASGI app that sends file
  ranges through ``http.response.zerocopysend``: chunked framing, a slow reader (the
  socket's buffer full, the sender waiting for room), pipelined requests, a client gone
  mid-body, and a file shorter than the range (the connection ends: a short body, never
  a wrong one).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from tiered_log.client import Client
from tiered_log.format.records import check_batches, decode_records
from tiered_log.service.http_protocol import HttpLimits, protocol_class
from tiered_log.service.zerocopy import EXTENSION

from .conftest import ADMIN, ServerProcess

BINARY = {"Accept": "application/octet-stream"}


def _values(n: int, start: int = 0) -> list[bytes]:
    return [
        f"v{i:06d}-".encode() + bytes([i % 251]) * (200 + i % 300) for i in range(start, start + n)
    ]


def _read_binary(
    c: httpx.Client, topic: str, start: int, end: int, max_bytes: int
) -> tuple[list[tuple[int, bytes | None]], int]:
    """Every record from ``start`` to ``end`` through binary fetches; and the requests made."""
    out: list[tuple[int, bytes | None]] = []
    off, requests = start, 0
    while off < end:
        r = c.get(
            f"/v1/topics/{topic}/partitions/0/records",
            headers=BINARY,
            params={"offset": off, "max_records": 10_000, "max_bytes": max_bytes},
        )
        requests += 1
        assert r.status_code == 200, r.text
        assert int(r.headers["content-length"]) == len(r.content)
        nxt = int(r.headers["x-next-offset"])
        assert nxt > off
        assert check_batches(r.content, off)[0] >= 1  # every checksum, no gap
        recs, _, _ = decode_records(r.content, 0, len(r.content), start_offset=off)
        out.extend((rec.offset, rec.value) for rec in recs if rec.offset < nxt)
        off = nxt
    return out, requests


def test_binary_fetch_sends_local_and_archived_batches_exactly(
    server_factory: Any, tmp_path: Path
) -> None:
    """Local segments, archived chunks in the cache's files and archived chunks only in
    memory: the same records, in order, once each, whatever the page size."""
    srv: ServerProcess = server_factory(
        remote_url=str(tmp_path / "bucket"), ship_interval_ms="50", remote_chunk_bytes=str(16 << 10)
    )
    values = _values(3000)
    with Client(srv.url, token=ADMIN) as c:
        c.create_topic("local", 1, {"segment_bytes": 64 << 10})
        c.create_topic(
            "archived",
            1,
            {"segment_bytes": 64 << 10, "local_retention_bytes": 0, "remote_enabled": True},
        )
        for i in range(0, len(values), 250):
            c.produce("local", 0, values[i : i + 250])
            c.produce("archived", 0, values[i : i + 250])
    want = list(enumerate(values))
    with srv.client(ADMIN) as h:
        deadline = time.monotonic() + 60
        while True:
            b = h.get("/v1/topics/archived/partitions/0/bounds").json()
            if b["local_start_offset"] >= 2500:
                break
            assert time.monotonic() < deadline, b
            time.sleep(0.1)
        for max_bytes in (1, 5000, 100_000, 8 << 20):
            got, _ = _read_binary(h, "local", 0, 3000, max_bytes)
            assert got == want
            # Twice on the archive: first mostly from fetched chunks (memory), then from
            # the chunk cache's files.
            for _ in range(2):
                got, _ = _read_binary(h, "archived", 0, 3000, max_bytes)
                assert got == want


def _sendfile_bytes(trace: Path) -> int:
    """Bytes the traced ``sendfile`` calls sent (a call may be split over two lines
    by another thread's: ``<... sendfile resumed> ...) = N``)."""
    total = 0
    for line in trace.read_text().splitlines():
        if "sendfile" in line and (m := re.search(r"\) = (\d+)$", line)):
            total += int(m.group(1))
    return total


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace")
def test_the_server_sends_with_sendfile(tmp_path: Path) -> None:
    """The server process answers a binary fetch with ``sendfile`` from the segment file
    (traced with ``strace``), and a JSON fetch without it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIERED_LOG_")}
    env.update(
        TIERED_LOG_DATA_DIR=str(tmp_path / "data"),
        TIERED_LOG_PORT="0",
        TIERED_LOG_KAFKA_PORT="0",
        TIERED_LOG_HOST="127.0.0.1",
        PYTHONUNBUFFERED="1",
    )
    trace, err = tmp_path / "trace.txt", tmp_path / "server.log"
    with open(err, "wb") as out:
        proc = subprocess.Popen(
            [
                "strace",
                "-f",
                "-qq",
                "-e",
                "trace=sendfile",
                "-o",
                str(trace),
                sys.executable,
                "-m",
                "tiered_log.service",
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        url = None
        deadline = time.monotonic() + 60
        while url is None:
            assert time.monotonic() < deadline and proc.poll() is None, err.read_text()
            if m := re.search(r"listening on (http://\S+)", err.read_text()):
                url = m.group(1)
            time.sleep(0.05)
        with Client(url) as c:
            c.create_topic("traced", 1)
            c.produce("traced", 0, _values(500))
            with httpx.Client(base_url=url, timeout=30) as h:
                r = h.get(
                    "/v1/topics/traced/partitions/0/records",
                    params={"offset": 0, "max_records": 500},
                    headers=BINARY,
                )
                assert r.status_code == 200
                # strace writes a call's line once it returned: maybe after we got the bytes.
                until = time.monotonic() + 20
                while (sent := _sendfile_bytes(trace)) < len(r.content):
                    assert time.monotonic() < until, f"sendfile sent {sent} bytes"
                    time.sleep(0.05)
                assert sent == len(r.content)
                assert (
                    h.get(
                        "/v1/topics/traced/partitions/0/records", params={"offset": 0}
                    ).status_code
                    == 200
                )
                time.sleep(0.5)
                assert _sendfile_bytes(trace) == sent  # JSON: no sendfile
    finally:
        # The server is strace's child: stop it (strace then exits with it).
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
        with contextlib.suppress(OSError, ValueError):
            for pid in children.read_text().split():
                os.kill(int(pid), signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# ---- the protocol under a real uvicorn server ------------------------------------------------


class _FileApp:
    """``GET /file?offset=&count=&chunked=`` answers that range of ``path`` through the
    zero-copy extension (in ``pieces`` messages); without the extension it says so."""

    def __init__(self, path: Path) -> None:
        self.path = path

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            return
        q = dict(p.split("=") for p in scope["query_string"].decode().split("&") if p)
        offset, count = int(q.get("offset", 0)), int(q["count"])
        pieces = int(q.get("pieces", 1))
        if EXTENSION not in scope.get("extensions", {}):
            await send({"type": "http.response.start", "status": 500, "headers": []})
            await send({"type": "http.response.body", "body": b"no zerocopy"})
            return
        headers = [] if q.get("chunked") else [(b"content-length", str(count).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        with open(self.path, "rb") as f:
            step = -(-count // pieces)
            for i, at in enumerate(range(0, count, step)):
                n = min(step, count - at)
                last = at + n >= count
                await send(
                    {
                        "type": EXTENSION,
                        "file": f,
                        "offset": offset + at,
                        "count": n,
                        "more_body": not last,
                    }
                )
                if i == 0 and pieces > 1:
                    await asyncio.sleep(0)


@pytest.fixture
def file_server(tmp_path: Path) -> Iterator[tuple[int, bytes, Path]]:
    data = os.urandom(6 << 20)
    path = tmp_path / "blob"
    path.write_bytes(data)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        _FileApp(path), lifespan="off", log_level="warning", http=protocol_class(HttpLimits())
    )  # type: ignore[arg-type]
    server = uvicorn.Server(config)
    t = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    t.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline and t.is_alive()
        time.sleep(0.02)
    yield port, data, path
    server.should_exit = True
    t.join(20)
    sock.close()


def _request(port: int, target: str) -> bytes:
    return f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()


def _read_response(s: socket.socket, buf: bytearray) -> tuple[bytes, bytes]:
    """One response (head, body) from ``s``, with ``buf`` the bytes already read."""
    while b"\r\n\r\n" not in buf:
        more = s.recv(65536)
        assert more, "connection closed in the head"
        buf += more
    head, _, rest = bytes(buf).partition(b"\r\n\r\n")
    buf[:] = rest
    length = int(re.search(rb"content-length: (\d+)", head, re.I).group(1))  # type: ignore[union-attr]
    while len(buf) < length:
        more = s.recv(1 << 20)
        assert more, f"connection closed after {len(buf)} of {length} body bytes"
        buf += more
    body = bytes(buf[:length])
    del buf[:length]
    return head, body


def test_ranges_in_pieces_and_chunked(file_server: tuple[int, bytes, Path]) -> None:
    port, data, _ = file_server
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as h:
        r = h.get("/file", params={"offset": 1000, "count": 3_000_001, "pieces": 7})
        assert r.status_code == 200 and r.content == data[1000:3_001_001]
        r = h.get("/file", params={"offset": 5, "count": 2_500_000, "pieces": 3, "chunked": 1})
        assert r.status_code == 200 and r.headers["transfer-encoding"] == "chunked"
        assert r.content == data[5:2_500_005]
        r = h.get("/file", params={"count": 10})  # the connection is kept alive and reused
        assert r.content == data[:10]


def test_a_slow_reader_gets_every_byte(file_server: tuple[int, bytes, Path]) -> None:
    """The socket's buffer fills (a small receive buffer, a reader that sleeps): the
    sender waits for room and the body arrives whole and in order."""
    port, data, _ = file_server
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", port))
        s.settimeout(30)
        s.sendall(_request(port, "/file?offset=7&count=1500000"))
        time.sleep(0.5)  # the server fills what the connection holds, then waits
        buf = bytearray()
        while b"\r\n\r\n" not in buf:
            buf += s.recv(4096)
        got = bytearray(bytes(buf).partition(b"\r\n\r\n")[2])
        slow_until = time.monotonic() + 1.0
        while len(got) < 1_500_000:
            more = s.recv(65536)
            assert more
            got += more
            if time.monotonic() < slow_until:
                time.sleep(0.01)
        assert bytes(got) == data[7:1_500_007]


def test_pipelined_requests_answer_in_order(file_server: tuple[int, bytes, Path]) -> None:
    port, data, _ = file_server
    with socket.socket() as s:
        s.connect(("127.0.0.1", port))
        s.settimeout(30)
        s.sendall(
            _request(port, "/file?offset=0&count=2000000")
            + _request(port, "/file?offset=3&count=5")
            + _request(port, "/file?offset=100&count=1000000&pieces=4")
        )
        buf = bytearray()
        assert _read_response(s, buf)[1] == data[:2_000_000]
        assert _read_response(s, buf)[1] == data[3:8]
        assert _read_response(s, buf)[1] == data[100:1_000_100]


def test_a_client_gone_mid_body_leaves_the_server_serving(
    file_server: tuple[int, bytes, Path],
) -> None:
    port, data, _ = file_server
    for _ in range(5):
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect(("127.0.0.1", port))
            s.sendall(_request(port, "/file?offset=0&count=6000000"))
            s.recv(1000)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as h:
        assert h.get("/file", params={"count": 4_000_000}).content == data[:4_000_000]


def test_a_file_shorter_than_its_range_ends_the_connection(
    file_server: tuple[int, bytes, Path],
) -> None:
    """The range runs past the file's end (as a segment cut after the read checked it):
    the client gets the bytes there are and then the end of the connection, never bytes
    that are not the file's."""
    port, data, _ = file_server
    with socket.socket() as s:
        s.connect(("127.0.0.1", port))
        s.settimeout(30)
        s.sendall(_request(port, f"/file?offset={len(data) - 1000}&count=5000"))
        got = bytearray()
        while more := s.recv(65536):
            got += more
        head, _, body = bytes(got).partition(b"\r\n\r\n")
        assert b"content-length: 5000" in head.lower()
        assert body == data[-1000:]
