"""``Client.fetch_batches`` / ``AsyncClient.fetch_batches`` against the real service, and
the page check they rest on (``check_batches``).

The call receives a binary fetch's batches into a buffer (the caller's when it fits),
checks every batch's checksum and that the offsets follow on from the one asked, and
returns the bytes as stored: the same bytes the binary GET answers, with the same
offsets as its headers.
"""

from __future__ import annotations

import asyncio
import struct
import uuid

import httpx
import pytest

from tiered_log.client import AsyncClient, Client
from tiered_log.errors import CorruptRecordError, OffsetOutOfRangeError, PermissionDeniedError
from tiered_log.format.records import check_batches, encode_batch

from .conftest import ADMIN, READER, ServerProcess

BINARY = {"Accept": "application/octet-stream"}


def _values(n: int, start: int = 0) -> list[bytes]:
    return [f"value-{i:05d}-".encode() + b"x" * (i % 50) for i in range(start, start + n)]


def _fill(server: ServerProcess, name: str, batches: int = 6, per: int = 40) -> None:
    with Client(server.url, token=ADMIN) as c:
        c.create_topic(name, 1, {"segment_bytes": 8192})
        for i in range(batches):
            c.produce(name, 0, _values(per, i * per))


def test_fetch_batches_gives_the_stored_batches_checked(server: ServerProcess) -> None:
    name = f"fb-{uuid.uuid4().hex[:8]}"
    _fill(server, name)
    with Client(server.url, token=ADMIN) as c, server.client(ADMIN) as h:
        off = 0
        seen = bytearray()
        while True:
            got = c.fetch_batches(name, 0, off, max_records=30, max_bytes=4096)
            raw = h.get(
                f"/v1/topics/{name}/partitions/0/records",
                headers=BINARY,
                params={"offset": off, "max_records": 30, "max_bytes": 4096},
            )
            assert raw.status_code == 200
            assert bytes(got.data) == raw.content
            assert got.next_offset == int(raw.headers["x-next-offset"])
            assert got.record_count == int(raw.headers["x-record-count"])
            assert got.high_watermark == int(raw.headers["x-high-watermark"]) == 240
            assert got.log_start_offset == 0 and got.first_offset == off
            if not got.data:
                assert got.batch_count == 0 and got.next_offset == off == 240
                break
            assert got.batch_count == check_batches(got.data, off)[0] >= 1
            seen += got.data
            off = got.next_offset
        recs = c.fetch(name, 0, 0, max_records=1000).records
        assert [r.value for r in recs] == _values(240)


def test_fetch_batches_into_a_buffer_and_from_inside_a_batch(server: ServerProcess) -> None:
    name = f"fb-{uuid.uuid4().hex[:8]}"
    _fill(server, name, batches=3, per=10)
    buf = bytearray(1 << 20)
    with Client(server.url, token=ADMIN) as c:
        got = c.fetch_batches(name, 0, 15, buffer=buf)
        assert got.data.obj is buf  # received into the caller's buffer, no copy
        first_base = struct.unpack_from(">q", got.data, 0)[0]  # Kafka's baseOffset
        assert first_base == 10 < 15 and got.next_offset == 30 and got.record_count == 15
        small = bytearray(16)
        got2 = c.fetch_batches(name, 0, 15, buffer=small)
        assert got2.data.obj is not small and bytes(got2.data) == bytes(got.data)
        with pytest.raises(OffsetOutOfRangeError):
            c.fetch_batches(name, 0, 31)
    with Client(server.url, token=READER) as c, pytest.raises(PermissionDeniedError):
        c.fetch_batches(name, 0, 0)


def test_async_fetch_batches(server: ServerProcess) -> None:
    name = f"fb-{uuid.uuid4().hex[:8]}"
    _fill(server, name, batches=2, per=10)

    async def run() -> None:
        async with AsyncClient(server.url, token=ADMIN) as c:
            got = await c.fetch_batches(name, 0, 0)
            assert got.next_offset == 20 and got.batch_count == 2
        transport = httpx.AsyncHTTPTransport()
        async with AsyncClient(server.url, token=ADMIN, transport=transport) as c:
            got2 = await c.fetch_batches(name, 0, 0)  # through httpx: same answer
            assert bytes(got2.data) == bytes(got.data)

    asyncio.run(run())


def test_check_batches_refuses_what_does_not_verify() -> None:
    a = bytes(encode_batch(100, [b"a", b"bb", b"ccc"], 1, 1 << 20).data)
    b = bytes(encode_batch(103, [b"d"], 1, 1 << 20).data)
    assert check_batches(a + b, 100) == (2, 104)
    assert check_batches(a + b, 102) == (2, 104)  # the first batch may begin below
    assert check_batches(b"", 7) == (0, 7)
    with pytest.raises(CorruptRecordError, match="holding 103"):
        check_batches(a, 103)
    with pytest.raises(CorruptRecordError, match="expected one at 103"):
        check_batches(a + a, 100)  # a gap or a repeat
    with pytest.raises(CorruptRecordError, match="runs past"):
        check_batches(a + b[:-1], 100)
    with pytest.raises(CorruptRecordError, match="runs past"):
        check_batches(a + b[:10], 100)  # ends inside the next batch's header
    damaged = bytearray(a)
    damaged[-1] ^= 1
    with pytest.raises(CorruptRecordError, match="CRC-32C mismatch"):
        check_batches(damaged, 100)
