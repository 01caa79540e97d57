"""Fixtures of the Kafka listener's tests: a real ``tiered-log serve`` process (the
service's :class:`~tests.service.conftest.ServerProcess`) with its Kafka listener on a
free loopback port, and :class:`KafkaWire`, a raw Kafka connection that sends requests
built with the listener's own codec layer (kio's generated types) and reads the answers
back, for what the client libraries hide (exact error codes, pipelining, bad frames).

Every socket and client call here is bounded in time.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable, Generator, Iterator
from typing import Any

import httpx
import pytest
from kio.schema.request_header.v1.header import RequestHeader as HeaderV1
from kio.schema.request_header.v2.header import RequestHeader as HeaderV2
from kio.serial import entity_reader, entity_writer
from service.conftest import ServerProcess

from tiered_log.kafka.messages import API_VERSIONS, build, request_class, response_class

TIMEOUT_S = 10.0


def kafka_server(
    factory: pytest.TempPathFactory, name: str, **settings: str
) -> Generator[ServerProcess, None, None]:
    """A server without auth whose Kafka listener is on a free port; stopped after."""
    root = factory.mktemp(name)
    srv = ServerProcess(root / "data", root, {"log_level": "info", **settings})
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The module's server (defaults: auto-creation on)."""
    yield from kafka_server(tmp_path_factory, "kafka")


def encode_request(api_key: int, version: int, correlation_id: int, body: dict[str, Any]) -> bytes:
    """A size-prefixed request frame (header v1, or v2 for a flexible version)."""
    import io

    cls = request_class(api_key, version)
    buf = io.BytesIO()
    flexible = bool(cls.__flexible__)
    head_cls: Any = HeaderV2 if flexible else HeaderV1
    entity_writer(head_cls)(
        buf,
        head_cls(
            request_api_key=api_key,
            request_api_version=version,
            correlation_id=correlation_id,
            client_id="tests",
        ),
    )
    entity_writer(cls)(buf, build(cls, body))
    data = buf.getvalue()
    return struct.pack(">i", len(data)) + data


class KafkaWire:
    """One raw connection to a Kafka listener (see the module docstring)."""

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=TIMEOUT_S)
        self.sock.settimeout(TIMEOUT_S)
        self._correlation = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> KafkaWire:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def next_id(self) -> int:
        self._correlation += 1
        return self._correlation

    def send(self, api_key: int, version: int, body: dict[str, Any]) -> int:
        cid = self.next_id()
        self.sock.sendall(encode_request(api_key, version, cid, body))
        return cid

    def read_frame(self) -> bytes:
        """The next response frame without its size (b"" when the server closed)."""
        head = self._read(4)
        if len(head) < 4:
            return b""
        (size,) = struct.unpack(">i", head)
        return self._read(size)

    def _read(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                break
            out += chunk
        return bytes(out)

    def receive(self, api_key: int, version: int) -> tuple[int, Any]:
        """``(correlation id, decoded body)`` of the next response."""
        frame = self.read_frame()
        assert frame, "the server closed the connection"
        (cid,) = struct.unpack_from(">i", frame, 0)
        cls = response_class(api_key, version)
        at = 4 + (1 if cls.__flexible__ and api_key != API_VERSIONS else 0)
        body, size = entity_reader(cls)(frame, at)
        assert at + size == len(frame)
        return cid, body

    def call(self, api_key: int, version: int, body: dict[str, Any]) -> Any:
        cid = self.send(api_key, version, body)
        got, resp = self.receive(api_key, version)
        assert got == cid
        return resp

    def closed_by_server(self) -> bool:
        """Whether the server closed the connection (within the timeout)."""
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, BrokenPipeError):
            return True


def wait_until(what: Callable[[], bool], timeout_s: float, label: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not what():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {label}")
        time.sleep(0.05)


def bounds(server: ServerProcess, topic: str, partition: int = 0) -> dict[str, int]:
    """The partition's bounds through the HTTP API."""
    r = httpx.get(
        f"{server.url}/v1/topics/{topic}/partitions/{partition}/bounds", timeout=TIMEOUT_S
    )
    r.raise_for_status()
    out: dict[str, int] = r.json()
    return out


def create_topic(server: ServerProcess, name: str, partitions: int = 1, **config: Any) -> None:
    r = httpx.post(
        f"{server.url}/v1/topics",
        json={"name": name, "partitions": partitions, "config": config},
        timeout=TIMEOUT_S,
    )
    assert r.status_code == 201, r.text
