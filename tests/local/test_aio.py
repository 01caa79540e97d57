"""AsyncLog: the asyncio face of the local log, including streamed appends."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tiered_log import (
    AsyncLog,
    InvalidArgumentError,
    Log,
    LogClosedError,
    LogConfig,
    OffsetOutOfRangeError,
    ProducerRecord,
    RecordTooLargeError,
)

THRESHOLD = 10_000


def run(
    tmp_path: Path, body: Callable[[AsyncLog], Awaitable[None]], config: LogConfig | None = None
) -> None:
    async def main() -> None:
        async with AsyncLog(
            Log.open(tmp_path, config or LogConfig(append_threshold=THRESHOLD))
        ) as alog:
            await body(alog)

    asyncio.run(main())


class Stream:
    """An async byte stream that counts how many chunks were pulled from it."""

    def __init__(self, chunks: list[Any]) -> None:
        self.chunks = chunks
        self.pulled = 0

    async def __aiter__(self) -> AsyncIterator[Any]:
        for c in self.chunks:
            self.pulled += 1
            await asyncio.sleep(0)
            yield c


def test_async_round_trip(tmp_path: Path) -> None:
    async def body(alog: AsyncLog) -> None:
        assert await alog.append(b"a", key=b"k", headers=[("h", b"v")], timestamp=7) == 0
        assert await alog.append_batch([b"b", ProducerRecord(b"c", timestamp=9)]) == (1, 2)
        rec = await alog.read(0)
        assert (rec.value, rec.key, rec.headers, rec.timestamp) == (b"a", b"k", (("h", b"v"),), 7)
        assert [r.value for r in await alog.read_range(0)] == [b"a", b"b", b"c"]
        assert [r.offset for r in await alog.read_range(1, max_records=1)] == [1]
        assert await alog.offset_for_timestamp(8) == 1  # b"b" was timestamped now
        assert await alog.offset_for_timestamp(10**15) is None
        assert await alog.flush() == 3
        b = alog.bounds()
        assert (b.log_start_offset, b.next_offset, b.flushed_offset) == (0, 3, 3)
        await alog.truncate(1)
        assert alog.bounds().next_offset == 1
        with pytest.raises(OffsetOutOfRangeError):
            await alog.read(1)

    run(tmp_path, body)


def test_concurrent_async_appends(tmp_path: Path) -> None:
    async def body(alog: AsyncLog) -> None:
        offsets = await asyncio.gather(*(alog.append(b"v%d" % i) for i in range(50)))
        assert sorted(offsets) == list(range(50))
        recs = await alog.read_range(0, max_records=100)
        assert {r.value for r in recs} == {b"v%d" % i for i in range(50)}
        assert all(r.value == b"v%d" % offsets.index(r.offset) for r in recs)

    run(tmp_path, body, LogConfig(segment_bytes=256, append_threshold=THRESHOLD))


@pytest.mark.parametrize(
    "chunks",
    [
        pytest.param([], id="empty-stream"),
        pytest.param([b"", b""], id="empty-chunks"),
        pytest.param([b"x"], id="one-byte"),
        pytest.param([b"ab", b"", b"cd", bytearray(b"ef"), memoryview(b"gh")], id="mixed-chunks"),
        pytest.param([b"y" * 1000] * 10, id="exactly-the-threshold"),
        pytest.param([b"z" * THRESHOLD], id="one-chunk-at-threshold"),
    ],
)
def test_append_stream_under_threshold(tmp_path: Path, chunks: list[Any]) -> None:
    async def body(alog: AsyncLog) -> None:
        await alog.append(b"before")
        stream = Stream(chunks)
        off = await alog.append_stream(stream, key=b"k", headers=[("h", None)], timestamp=5)
        assert off == 1 and stream.pulled == len(chunks)
        rec = await alog.read(1)
        assert rec.value == b"".join(bytes(c) for c in chunks)
        assert (rec.key, rec.headers, rec.timestamp) == (b"k", (("h", None),), 5)

    run(tmp_path, body)


@pytest.mark.parametrize(
    "chunks",
    [
        pytest.param([b"y" * 1000] * 10 + [b"!"], id="one-byte-over"),
        pytest.param([b"z" * (THRESHOLD + 1)], id="one-big-chunk"),
        pytest.param([b"a" * 6000, b"b" * 6000, b"never", b"pulled"], id="stops-pulling"),
    ],
)
def test_append_stream_over_threshold_leaves_nothing(tmp_path: Path, chunks: list[Any]) -> None:
    async def body(alog: AsyncLog) -> None:
        await alog.append_batch([b"one", b"two"])
        log = alog.log
        before = (log.next_offset, log.size_bytes, [s.size for s in log.segments()])
        store = log.segments()[-1].store_path
        store_size = store.stat().st_size
        stream = Stream(chunks)
        with pytest.raises(RecordTooLargeError):
            await alog.append_stream(stream)
        assert (log.next_offset, log.size_bytes, [s.size for s in log.segments()]) == before
        assert store.stat().st_size == store_size
        # the stream is not read past the chunk that crossed the threshold
        crossing = next(
            i for i in range(len(chunks)) if sum(len(c) for c in chunks[: i + 1]) > THRESHOLD
        )
        assert stream.pulled == crossing + 1
        assert await alog.append(b"three") == 2
        assert [r.value for r in await alog.read_range(0)] == [b"one", b"two", b"three"]

    run(tmp_path, body)
    with Log.open(tmp_path) as log:  # nothing of the stream on disk either
        assert log.recovery.truncated_bytes == 0
        assert [r.value for r in log.read_range(0)] == [b"one", b"two", b"three"]


@pytest.mark.parametrize(
    ("chunks", "error"),
    [
        pytest.param([b"ok", "text"], InvalidArgumentError, id="str-chunk"),
        pytest.param([b"ok", 5], InvalidArgumentError, id="int-chunk"),
    ],
)
def test_append_stream_bad_input(tmp_path: Path, chunks: list[Any], error: type[Exception]) -> None:
    async def body(alog: AsyncLog) -> None:
        with pytest.raises(error):
            await alog.append_stream(Stream(chunks))
        assert alog.bounds().next_offset == 0 and alog.log.size_bytes == 0

    run(tmp_path, body)


def test_interrupted_stream_leaves_nothing(tmp_path: Path) -> None:
    class Broken(Exception):
        pass

    async def chunks() -> AsyncIterator[bytes]:
        yield b"partial"
        raise Broken

    async def body(alog: AsyncLog) -> None:
        with pytest.raises(Broken):
            await alog.append_stream(chunks())
        assert alog.bounds().next_offset == 0 and alog.log.size_bytes == 0

    run(tmp_path, body)


def test_async_calls_after_close(tmp_path: Path) -> None:
    async def main() -> None:
        alog = AsyncLog(Log.open(tmp_path))
        await alog.append(b"x")
        await alog.close()
        for call in (
            lambda: alog.append(b"y"),
            lambda: alog.append_batch([b"y"]),
            lambda: alog.read(0),
            lambda: alog.read_range(0),
            lambda: alog.offset_for_timestamp(0),
            lambda: alog.truncate(0),
            lambda: alog.flush(),
            lambda: alog.append_stream(Stream([b"z"])),
        ):
            with pytest.raises(LogClosedError):
                await call()
        await alog.close()  # idempotent

    asyncio.run(main())
    with Log.open(tmp_path) as log:
        assert log.next_offset == 1
