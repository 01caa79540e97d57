"""The asyncio client, :class:`AsyncClient`: :class:`~tiered_log.client.Client`'s
methods as coroutines (see :mod:`tiered_log.client`).

JSON requests through ``httpx.AsyncClient`` on the loop; record bodies through the pooled
``http.client`` connections of :mod:`tiered_log.client.traffic`, in a worker thread
(``asyncio.to_thread``). ``consume`` runs the next page's request as a task.

Thread-safety: an :class:`AsyncClient` belongs to the event loop it is first used on.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncGenerator, AsyncIterable, Iterable, Sequence
from typing import Any

import httpx

from .. import errors as E
from ..errors import ConnectionFailedError
from ..format.records import ProducerRecord
from .messages import (
    _ACCEPT_BINARY,
    _BINARY,
    _FRAMES_HEADERS,
    FetchResult,
    PartitionBounds,
    _check,
    _fetch_headers,
    _fetch_params,
    _headers,
    _parse_fetch,
    _part_path,
    _raw_params,
    _topic_path,
    _verify,
    encode_produce_body,
)
from .paging import _check_consume, _consume_done, _left, _page_plan, _pages
from .traffic import _RecordTraffic


class AsyncClient:
    """Asynchronous client with the same methods as :class:`Client`, as coroutines."""

    def __init__(self, base_url: str, token: str | None = None, *, timeout: float = 60.0,
                 verify: bool | str | ssl.SSLContext = True,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.AsyncClient(base_url=self.base_url, headers=_headers(token),
                                       timeout=timeout, verify=_verify(verify), transport=transport)
        # Record bodies take the sync client's http.client path in a worker thread: ~2-3x
        # faster per MiB than httpx's h11 on the event loop (a cancelled await leaves the
        # request to finish in its thread; its connection then goes back to the pool).
        self._records = (None if transport is not None else
                         _RecordTraffic(self.base_url, _headers(token), timeout, verify))

    async def _get_records(self, path: str, params: dict[str, int]) -> httpx.Response:
        if self._records is not None:
            return await asyncio.to_thread(self._records.request, "GET", path, params=params,
                                           headers=_ACCEPT_BINARY)
        return await self._req("GET", path, params=params, headers=_ACCEPT_BINARY)

    async def _post_frames(self, path: str, body: bytes) -> httpx.Response:
        if self._records is not None:
            return await asyncio.to_thread(self._records.request, "POST", path, body=body,
                                           headers=_FRAMES_HEADERS)
        return await self._req("POST", path, content=body, headers=_FRAMES_HEADERS)

    async def _req(self, method: str, path: str, **kw: Any) -> httpx.Response:
        try:
            return _check(await self._http.request(method, path, **kw))
        except httpx.TransportError as exc:
            raise ConnectionFailedError(f"cannot reach {self.base_url}: {exc}") from exc

    async def create_topic(self, name: str, partitions: int = 1,
                           config: dict[str, Any] | None = None) -> dict[str, Any]:
        body = {"name": name, "partitions": partitions, "config": config or {}}
        result: dict[str, Any] = (await self._req("POST", "/v1/topics", json=body)).json()
        return result

    async def list_topics(self) -> list[dict[str, Any]]:
        topics: list[dict[str, Any]] = (await self._req("GET", "/v1/topics")).json()["topics"]
        return topics

    async def describe_topic(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = (await self._req("GET", _topic_path(name))).json()
        return result

    async def delete_topic(self, name: str) -> None:
        await self._req("DELETE", _topic_path(name))

    async def produce(self, topic: str, partition: int,
                      records: Iterable[ProducerRecord | bytes | str]) -> list[int]:
        """Append a batch (all or nothing, binary frames); returns each record's offset."""
        resp = await self._post_frames(f"{_part_path(topic, partition)}/records",
                                       encode_produce_body(records))
        offsets: list[int] = resp.json()["offsets"]
        return offsets

    async def produce_raw(self, topic: str, partition: int,
                          value: bytes | AsyncIterable[bytes] | Sequence[bytes], *,
                          key: bytes | str | None = None, timestamp: int | None = None) -> int:
        content = value if isinstance(value, bytes | AsyncIterable) else b"".join(value)
        resp = await self._req("POST", f"{_part_path(topic, partition)}/records", content=content,
                               params=_raw_params(key, timestamp),
                               headers={"Content-Type": _BINARY})
        return int(resp.json()["offsets"][0])

    async def fetch(self, topic: str, partition: int, offset: int, max_records: int = 500,
                    max_bytes: int = 1 << 20, wait_ms: int = 0) -> FetchResult:
        resp = await self._get_records(f"{_part_path(topic, partition)}/records",
                                       _fetch_params(offset, max_records, max_bytes, wait_ms))
        return _parse_fetch(resp, offset, max_records)

    async def consume(self, topic: str, partition: int, offset: int, *,
                      end_offset: int | None = None, max_records: int = 1000,
                      max_bytes: int = 8 << 20, follow: bool = False,
                      wait_ms: int = 1000) -> AsyncGenerator[FetchResult, None]:
        """:meth:`Client.consume` for asyncio: the next page's request runs as a task on
        this loop while the caller handles the current page."""
        _check_consume(offset, end_offset, max_records)
        if end_offset is not None and offset >= end_offset:
            return
        path = f"{_part_path(topic, partition)}/records"
        wait = wait_ms if follow else 0

        async def get(off: int) -> httpx.Response:
            want = _page_plan(off, end_offset)
            return await self._get_records(path, _fetch_params(off, want, max_bytes, wait))

        task = asyncio.ensure_future(get(offset))
        try:
            while True:
                resp = await task
                count, nxt, _, _ = _fetch_headers(resp)
                done = _consume_done(count, nxt, end_offset, follow)
                if not done:
                    task = asyncio.ensure_future(get(nxt))
                for part in _pages(_parse_fetch(resp, offset, _left(offset, end_offset)),
                                   max_records):
                    yield part
                if done:
                    return
                offset = nxt
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, E.TieredLogError):
                    await task

    async def offset_for_timestamp(self, topic: str, partition: int, timestamp: int) -> int | None:
        d = (await self._req("GET", f"{_part_path(topic, partition)}/offsets",
                             params={"timestamp": timestamp})).json()
        return None if d["offset"] is None else int(d["offset"])

    async def bounds(self, topic: str, partition: int) -> PartitionBounds:
        resp = await self._req("GET", f"{_part_path(topic, partition)}/bounds")
        return PartitionBounds.from_json(resp.json())

    async def truncate(self, topic: str, partition: int, offset: int) -> PartitionBounds:
        resp = await self._req("POST", f"{_part_path(topic, partition)}/truncate",
                               json={"offset": offset})
        return PartitionBounds.from_json(resp.json())

    async def health(self) -> dict[str, Any]:
        result: dict[str, Any] = (await self._req("GET", "/healthz")).json()
        return result

    async def metrics(self) -> str:
        return (await self._req("GET", "/metrics")).text

    async def close(self) -> None:
        await self._http.aclose()
        if self._records is not None:
            self._records.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


__all__ = ["AsyncClient"]
