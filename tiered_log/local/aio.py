"""The asyncio face of the local log, for applications that embed it in event-loop code.

(The HTTP service does not use it: it serves :class:`~tiered_log.partition.log.TieredLog`s and
calls them in worker threads itself.)

:class:`AsyncLog` runs every blocking file operation of a :class:`~tiered_log.local.log.Log`
in a worker thread (``asyncio.to_thread``) so the event loop never blocks on disk. Its
one addition is :meth:`AsyncLog.append_stream`: a single large value arriving as an
async byte stream (an HTTP body), bounded by the log's ``append_threshold``.

Safe to use from several tasks at once (the underlying Log serializes writers and lets
readers run concurrently); bound to no particular event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, Sequence

from ..errors import InvalidArgumentError, RecordTooLargeError
from ..format.records import EncodedBatch, ProducerRecord, Record
from .log import Log, LogBounds


class AsyncLog:
    """Async wrapper over a :class:`Log`; see the module docstring."""

    def __init__(self, log: Log) -> None:
        self.log = log

    async def append(
        self,
        value: bytes | None,
        *,
        key: bytes | None = None,
        headers: Sequence[tuple[str, bytes | None]] = (),
        timestamp: int | None = None,
    ) -> int:
        return await asyncio.to_thread(
            self.log.append, value, key=key, headers=headers, timestamp=timestamp
        )

    async def append_batch(
        self,
        records: Sequence[ProducerRecord | bytes] | EncodedBatch,
    ) -> tuple[int, int]:
        return await asyncio.to_thread(self.log.append_batch, records)

    async def append_stream(
        self,
        chunks: AsyncIterable[bytes],
        *,
        key: bytes | None = None,
        headers: Sequence[tuple[str, bytes | None]] = (),
        timestamp: int | None = None,
    ) -> int:
        """Append one record whose value arrives as a stream of chunks.

        The value is gathered in memory up to the log's ``append_threshold``; the moment
        the stream passes it, RecordTooLargeError is raised and the stream is not read
        further. The record is written only once complete, in one write, so a rejected or
        interrupted stream leaves nothing of itself in the log. A stream of no bytes is
        a record with an empty value (``b""``, not null).
        """
        limit = self.log.config.append_threshold
        buf = bytearray()
        async for chunk in chunks:
            if not isinstance(chunk, bytes | bytearray | memoryview):
                raise InvalidArgumentError("stream chunks must be bytes")
            if len(buf) + len(chunk) > limit:
                raise RecordTooLargeError(
                    f"streamed value exceeds the append threshold of {limit} bytes"
                )
            buf += chunk
        return await self.append(bytes(buf), key=key, headers=headers, timestamp=timestamp)

    async def read(self, offset: int) -> Record:
        return await asyncio.to_thread(self.log.read, offset)

    async def read_range(
        self, offset: int, max_records: int = 500, max_bytes: int = 1 << 20
    ) -> list[Record]:
        return await asyncio.to_thread(self.log.read_range, offset, max_records, max_bytes)

    async def offset_for_timestamp(self, timestamp: int) -> int | None:
        return await asyncio.to_thread(self.log.offset_for_timestamp, timestamp)

    async def truncate(self, offset: int) -> None:
        await asyncio.to_thread(self.log.truncate, offset)

    async def flush(self) -> int:
        return await asyncio.to_thread(self.log.flush)

    def bounds(self) -> LogBounds:
        return self.log.bounds()

    async def close(self) -> None:
        await asyncio.to_thread(self.log.close)

    async def __aenter__(self) -> AsyncLog:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
