"""The asyncio client, :class:`AsyncClient`: :class:`~tiered_log.client.Client`'s
methods as coroutines (see :mod:`tiered_log.client`).

JSON requests through ``httpx.AsyncClient`` on the loop; record bodies through the pooled
``http.client`` connections of :mod:`tiered_log.client.traffic` (one pool per node), in a
worker thread (``asyncio.to_thread``). ``consume`` runs the next page's request as a
task. A partition's requests go to its leader and are retried as
:mod:`tiered_log.client.routing` says (the back-off is ``asyncio.sleep``).

Thread-safety: an :class:`AsyncClient` belongs to the event loop it is first used on.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncGenerator, AsyncIterable, Awaitable, Callable, Iterable, Sequence
from typing import Any, TypeVar

import httpx

from .. import errors as E
from ..errors import ConnectionFailedError, TieredLogError
from ..format.records import ProducerRecord
from ..partitioner import DefaultPartitioner, PartitionCounts, RecordMetadata
from .messages import (
    _ACCEPT_BINARY,
    _BINARY,
    _FRAMES_HEADERS,
    ANOMALIES_PATH,
    REASSIGN_PATH,
    RESTORE_PATH,
    SCRUB_PATH,
    TOPIC_RESTORE_PATH,
    Codec,
    FetchedBatches,
    FetchResult,
    PartitionBounds,
    RequestNotSentError,
    _acks_params,
    _alter_body,
    _check,
    _checked_batches,
    _delete_records_path,
    _fetch_headers,
    _fetch_params,
    _headers,
    _json_object,
    _parse_fetch,
    _part_path,
    _raw_params,
    _reassign_body,
    _restore_body,
    _restore_topic_body,
    _scrub_report,
    _scrub_targets,
    _segments_path,
    _topic_body,
    _topic_filter,
    _topic_path,
    _transport_error,
    _verify,
    encode_produce_body,
)
from .paging import FETCH_RECORDS, _check_consume, _consume_done, _left, _page_plan, _pages
from .routing import CLUSTER_PATH, Attempts, Routes, parse_urls
from .traffic import RecordPools

_T = TypeVar("_T")


class AsyncClient:
    """Asynchronous client with the same methods as :class:`Client`, as coroutines,
    and the same routing: one URL or several, a partition's requests to its leader,
    retries for up to ``retry_timeout_s`` by the rules of
    :mod:`tiered_log.client.routing` (a produce that may have reached the server is
    never sent again)."""

    def __init__(
        self,
        base_url: str | Sequence[str],
        token: str | None = None,
        *,
        timeout: float = 60.0,
        verify: bool | str | ssl.SSLContext = True,
        transport: httpx.AsyncBaseTransport | None = None,
        retry_timeout_s: float = 30.0,
    ) -> None:
        self.urls = parse_urls(base_url)
        self.base_url = self.urls[0]
        self.retry_timeout_s = retry_timeout_s
        self._routes = Routes(self.urls)
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers=_headers(token),
            timeout=timeout,
            verify=_verify(verify),
            transport=transport,
        )
        # Record bodies take the sync client's http.client path in a worker thread: ~2-3x
        # faster per MiB than httpx's h11 on the event loop (a cancelled await leaves the
        # request to finish in its thread; its connection then goes back to the pool).
        self._pools = (
            None if transport is not None else RecordPools(_headers(token), timeout, verify)
        )
        self._partitioner = DefaultPartitioner()
        self._counts = PartitionCounts()

    # ---- sending -------------------------------------------------------------------------

    async def _req_at(self, url: str, method: str, path: str, **kw: Any) -> httpx.Response:
        try:
            return _check(await self._http.request(method, url + path, **kw))
        except httpx.TransportError as exc:
            raise _transport_error(url, exc) from exc

    async def _req(self, method: str, path: str, **kw: Any) -> httpx.Response:
        return await self._req_at(self.base_url, method, path, **kw)

    async def _get_records(self, url: str, path: str, params: dict[str, int]) -> httpx.Response:
        if self._pools is not None:
            return await asyncio.to_thread(
                self._pools.get(url).request, "GET", path, params=params, headers=_ACCEPT_BINARY
            )
        return await self._req_at(url, "GET", path, params=params, headers=_ACCEPT_BINARY)

    async def _receive_records(
        self, url: str, path: str, params: dict[str, int], buffer: bytearray | None
    ) -> tuple[httpx.Headers, memoryview]:
        if self._pools is not None:
            return await asyncio.to_thread(
                self._pools.get(url).receive_into,
                path,
                params=params,
                headers=_ACCEPT_BINARY,
                buffer=buffer,
            )
        resp = await self._req_at(url, "GET", path, params=params, headers=_ACCEPT_BINARY)
        return resp.headers, memoryview(resp.content)

    async def _post_frames(
        self, url: str, path: str, body: bytes, params: dict[str, int | str] | None
    ) -> httpx.Response:
        if self._pools is not None:
            return await asyncio.to_thread(
                self._pools.get(url).request,
                "POST",
                path,
                params=params,
                body=body,
                headers=_FRAMES_HEADERS,
            )
        return await self._req_at(
            url, "POST", path, params=params, content=body, headers=_FRAMES_HEADERS
        )

    async def _any(self, method: str, path: str, **kw: Any) -> httpx.Response:
        """:meth:`Client._any <tiered_log.client.Client._any>`: topic admin, to each known
        node in turn while they cannot be reached."""
        last: ConnectionFailedError | None = None
        for url in self._routes.any_urls():
            try:
                return await self._req_at(url, method, path, **kw)
            except ConnectionFailedError as exc:
                if method != "GET" and not isinstance(exc, RequestNotSentError):
                    raise
                last = exc
        assert last is not None
        raise last

    async def _leader(self, topic: str, partition: int) -> str:
        """The URL of the partition's leader (asking ``GET /v1/cluster`` of each known
        node in turn when not known)."""
        url = self._routes.leader(topic, partition)
        if url is not None:
            return url
        last: TieredLogError | None = None
        for cand in self._routes.cluster_urls():
            try:
                resp = await self._http.get(cand + CLUSTER_PATH)
            except httpx.TransportError as exc:
                last = _transport_error(cand, exc)
                continue
            got = self._routes.take_answer(cand, resp.status_code, resp.content, topic, partition)
            if isinstance(got, str):
                return got
            last = got
        assert last is not None
        raise last

    async def _routed(
        self,
        topic: str,
        partition: int,
        send: Callable[[str], Awaitable[_T]],
        *,
        writes: bool,
        retry: bool = True,
    ) -> _T:
        """``await send(leader URL)``, retried by the rules of :mod:`.routing`."""
        attempts: Attempts | None = None
        while True:
            try:
                return await send(await self._leader(topic, partition))
            except TieredLogError as exc:
                if not retry:
                    raise
                if attempts is None:
                    attempts = Attempts(
                        self._routes,
                        topic,
                        partition,
                        writes=writes,
                        timeout_s=self.retry_timeout_s,
                    )
                await asyncio.sleep(attempts.after(exc).delay_s)

    # ---- topics --------------------------------------------------------------------------

    async def create_topic(
        self,
        name: str,
        partitions: int = 1,
        config: dict[str, Any] | None = None,
        *,
        replication_factor: int | None = None,
        min_insync_replicas: int | None = None,
    ) -> dict[str, Any]:
        body = _topic_body(name, partitions, config, replication_factor, min_insync_replicas)
        result: dict[str, Any] = (await self._any("POST", "/v1/topics", json=body)).json()
        return result

    async def list_topics(self) -> list[dict[str, Any]]:
        topics: list[dict[str, Any]] = (await self._any("GET", "/v1/topics")).json()["topics"]
        return topics

    async def describe_topic(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = (await self._any("GET", _topic_path(name))).json()
        return result

    async def delete_topic(self, name: str) -> None:
        await self._any("DELETE", _topic_path(name))

    async def alter_topic(
        self,
        name: str,
        config: dict[str, Any] | None = None,
        *,
        delete_config: list[str] | None = None,
        remote_disable_policy: str | None = None,
        partitions: int | None = None,
    ) -> dict[str, Any]:
        """Change a topic's settings (``PATCH /v1/topics/{name}``): ``config`` sets,
        ``delete_config`` resets to the server's defaults; ``remote_disable_policy``
        (``retain`` or ``delete``) when ``remote_enabled`` turns false; ``partitions``
        grows it to that many partitions (the count only grows). Returns the new
        description; InvalidArgumentError naming a bad key or value."""
        body = _alter_body(config, delete_config, remote_disable_policy, partitions)
        if partitions is not None:
            self._counts.forget(name)
        result: dict[str, Any] = (await self._any("PATCH", _topic_path(name), json=body)).json()
        return result

    async def reassign(self, from_node: int, to_node: int) -> dict[str, Any]:
        """Move every replica ``from_node`` holds to ``to_node`` (a cluster; needs admin on
        every topic): ``POST /v1/cluster/reassign``'s answer, the partitions started; see
        :meth:`Client.reassign <tiered_log.client.Client.reassign>`."""
        return _json_object(
            await self._any("POST", REASSIGN_PATH, json=_reassign_body(from_node, to_node))
        )

    async def restore(
        self,
        topics: list[str] | None = None,
        *,
        replication_factor: int | None = None,
        min_insync_replicas: int | None = None,
        to_timestamp: int | None = None,
    ) -> dict[str, Any]:
        """Recreate in a new cluster the topics the bucket keeps (needs admin on every
        topic): ``POST /v1/cluster/restore``'s answer (``restored``, ``skipped``,
        ``missing``), as :meth:`Client.restore <tiered_log.client.Client.restore>`.
        Each partition reports what was never shipped as lost. ``to_timestamp``: each
        topic holds only its records up to that time."""
        body = _restore_body(topics, replication_factor, min_insync_replicas, to_timestamp)
        return _json_object(await self._any("POST", RESTORE_PATH, json=body))

    async def restore_topic(
        self,
        topic: str,
        as_topic: str,
        *,
        to_timestamp: int | None = None,
        to_offset: int | None = None,
    ) -> dict[str, Any]:
        """Point-in-time restore of ``topic`` as the new topic ``as_topic`` (needs admin
        on every topic): ``POST /v1/archive/restore``'s report, once the new topic is
        served; see :meth:`Client.restore_topic <tiered_log.client.Client.restore_topic>`."""
        body = _restore_topic_body(topic, as_topic, to_timestamp, to_offset)
        return _json_object(await self._any("POST", TOPIC_RESTORE_PATH, json=body))

    async def archive_anomalies(self, topic: str | None = None) -> dict[str, Any]:
        """What the node's background scrubber found (``GET /v1/archive/anomalies``: the
        damaged segments of its last pass and of the pass under way; ``enabled`` false
        when it runs none); ``topic``: that topic's only. As :meth:`Client.archive_anomalies
        <tiered_log.client.Client.archive_anomalies>`."""
        return _json_object(await self._any("GET", ANOMALIES_PATH, params=_topic_filter(topic)))

    async def archive_scrub(self, topic: str | None = None) -> list[dict[str, Any]]:
        """Run one scrub pass now on every live node (``POST /v1/archive/scrub``: each
        node checks both tiers of the partitions it holds and repairs what it can) and
        answer each node's report, ``{"node_id", "url", "report"}`` (a single node:
        ``node_id`` None); ``topic``: that topic's partitions only. The nodes are asked
        one after the other, as :meth:`Client.archive_scrub
        <tiered_log.client.Client.archive_scrub>` does; the coroutine ends when every pass
        is done (no time limit: a pass reads at the nodes' ``scrub_bytes_per_sec``)."""
        body = _topic_filter(topic)
        doc = await self.cluster()
        if doc is None:
            resp = await self._any("POST", SCRUB_PATH, json=body, timeout=None)
            return [_scrub_report(None, None, resp)]
        return [
            _scrub_report(
                node_id, url, await self._req_at(url, "POST", SCRUB_PATH, json=body, timeout=None)
            )
            for node_id, url in _scrub_targets(doc)
        ]

    async def cluster(self) -> dict[str, Any] | None:
        """``GET /v1/cluster`` of a node that answers; None for a single node."""
        try:
            resp = await self._any("GET", CLUSTER_PATH)
        except TieredLogError as exc:
            if exc.status == 404:
                return None
            raise
        result: dict[str, Any] = resp.json()
        return result

    # ---- records -------------------------------------------------------------------------

    async def partitions(self, topic: str) -> int:
        """The topic's partition count; see :meth:`Client.partitions
        <tiered_log.client.Client.partitions>`."""
        count = self._counts.get(topic)
        if count is None:
            count = int((await self.describe_topic(topic))["partitions"])
            self._counts.put(topic, count)
        return count

    async def assign_partitions(
        self, topic: str, records: Sequence[ProducerRecord | bytes | str]
    ) -> dict[int, list[int]]:
        """Where Kafka's default partitioner sends each of ``records`` (one batch):
        partition -> the indexes of its records. Keyed records by the murmur2 hash of the
        key; keyless ones all to one partition, the next partition for the next batch
        (see :mod:`tiered_log.partitioner`); as :meth:`Client.assign_partitions
        <tiered_log.client.Client.assign_partitions>`."""
        return self._partitioner.assign(topic, records, await self.partitions(topic))

    async def send(
        self,
        topic: str,
        records: Iterable[ProducerRecord | bytes | str],
        *,
        acks: str | None = None,
        compression: Codec = None,
    ) -> list[RecordMetadata]:
        """Append ``records`` where Kafka's default partitioner puts them; see
        :meth:`Client.send <tiered_log.client.Client.send>`."""
        items = list(records)
        if not items:
            raise E.InvalidArgumentError("a batch needs at least one record")
        groups = await self.assign_partitions(topic, items)
        bodies = {
            p: encode_produce_body([items[i] for i in idx], compression)
            for p, idx in groups.items()
        }
        out: list[RecordMetadata] = [RecordMetadata(-1, -1)] * len(items)
        for p, idx in groups.items():
            offsets = await self._produce_body(topic, p, bodies[p], acks)
            for i, off in zip(idx, offsets, strict=True):
                out[i] = RecordMetadata(p, off)
        return out

    async def produce(
        self,
        topic: str,
        partition: int | None,
        records: Iterable[ProducerRecord | bytes | str],
        *,
        acks: str | None = None,
        compression: Codec = None,
    ) -> list[int]:
        """Append a batch on the partition's leader; see :meth:`Client.produce
        <tiered_log.client.Client.produce>` (``acks``, ``compression``, when it is
        retried, and ``partition=None``: Kafka's default partitioner, as :meth:`send`)."""
        if partition is None:
            return [
                m.offset
                for m in await self.send(topic, records, acks=acks, compression=compression)
            ]
        body = encode_produce_body(records, compression)
        return await self._produce_body(topic, partition, body, acks)

    async def _produce_body(
        self, topic: str, partition: int, body: bytes, acks: str | None
    ) -> list[int]:
        """Send an encoded produce body to the partition's leader; the offsets."""
        path = f"{_part_path(topic, partition)}/records"
        params = _acks_params(acks)

        def send(url: str) -> Awaitable[httpx.Response]:
            return self._post_frames(url, path, body, params)

        try:
            resp = await self._routed(topic, partition, send, writes=True)
        except E.TopicNotFoundError:
            self._counts.forget(topic)
            raise
        offsets: list[int] = resp.json()["offsets"]
        return offsets

    async def produce_raw(
        self,
        topic: str,
        partition: int,
        value: bytes | AsyncIterable[bytes] | Sequence[bytes],
        *,
        key: bytes | str | None = None,
        timestamp: int | None = None,
        acks: str | None = None,
    ) -> int:
        """One record streamed as the body; an async iterable is sent once, never
        retried."""
        content = value if isinstance(value, bytes | AsyncIterable) else b"".join(value)
        path = f"{_part_path(topic, partition)}/records"
        params = _raw_params(key, timestamp, acks)

        def send(url: str) -> Awaitable[httpx.Response]:
            return self._req_at(
                url, "POST", path, content=content, params=params, headers={"Content-Type": _BINARY}
            )

        resp = await self._routed(
            topic, partition, send, writes=True, retry=isinstance(content, bytes)
        )
        return int(resp.json()["offsets"][0])

    async def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_records: int = 500,
        max_bytes: int = 1 << 20,
        wait_ms: int = 0,
    ) -> FetchResult:
        path = f"{_part_path(topic, partition)}/records"
        params = _fetch_params(offset, max_records, max_bytes, wait_ms)

        def send(url: str) -> Awaitable[httpx.Response]:
            return self._get_records(url, path, params)

        resp = await self._routed(topic, partition, send, writes=False)
        return _parse_fetch(resp, offset, max_records)

    async def fetch_batches(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        max_records: int = FETCH_RECORDS,
        max_bytes: int = 8 << 20,
        wait_ms: int = 0,
        buffer: bytearray | None = None,
    ) -> FetchedBatches:
        """:meth:`Client.fetch_batches <tiered_log.client.Client.fetch_batches>`: the
        stored batches from ``offset`` on, checksums verified, nothing decoded."""
        path = f"{_part_path(topic, partition)}/records"
        params = _fetch_params(offset, max_records, max_bytes, wait_ms)

        def send(url: str) -> Awaitable[tuple[httpx.Headers, memoryview]]:
            return self._receive_records(url, path, params, buffer)

        headers, data = await self._routed(topic, partition, send, writes=False)
        return _checked_batches(headers, data, offset)

    async def consume(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        end_offset: int | None = None,
        max_records: int = 1000,
        max_bytes: int = 8 << 20,
        follow: bool = False,
        wait_ms: int = 1000,
    ) -> AsyncGenerator[FetchResult, None]:
        """:meth:`Client.consume` for asyncio: the next page's request runs as a task on
        this loop while the caller handles the current page. Across a leader change a
        request is sent again for the same offset: no offset twice, no gap."""
        _check_consume(offset, end_offset, max_records)
        if end_offset is not None and offset >= end_offset:
            return
        path = f"{_part_path(topic, partition)}/records"
        wait = wait_ms if follow else 0

        async def get(off: int) -> httpx.Response:
            params = _fetch_params(off, _page_plan(off, end_offset), max_bytes, wait)

            def send(url: str) -> Awaitable[httpx.Response]:
                return self._get_records(url, path, params)

            return await self._routed(topic, partition, send, writes=False)

        task = asyncio.ensure_future(get(offset))
        try:
            while True:
                resp = await task
                count, nxt, _, _ = _fetch_headers(resp)
                done = _consume_done(count, nxt, end_offset, follow)
                if not done:
                    task = asyncio.ensure_future(get(nxt))
                for part in _pages(
                    _parse_fetch(resp, offset, _left(offset, end_offset)), max_records
                ):
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
        path = f"{_part_path(topic, partition)}/offsets"

        def send(url: str) -> Awaitable[httpx.Response]:
            return self._req_at(url, "GET", path, params={"timestamp": timestamp})

        d = (await self._routed(topic, partition, send, writes=False)).json()
        return None if d["offset"] is None else int(d["offset"])

    async def archived_segments(self, topic: str, partition: int) -> dict[str, Any]:
        """The partition's finished remote segments as its leader serves them (``GET
        .../remote-segments``: each with its ``object_key``, relative to ``remote_url``)."""
        path = _segments_path(topic, partition)

        def send(url: str) -> Awaitable[httpx.Response]:
            return self._req_at(url, "GET", path)

        return _json_object(await self._routed(topic, partition, send, writes=False))

    async def bounds(self, topic: str, partition: int) -> PartitionBounds:
        path = f"{_part_path(topic, partition)}/bounds"

        def send(url: str) -> Awaitable[httpx.Response]:
            return self._req_at(url, "GET", path)

        return PartitionBounds.from_json(
            (await self._routed(topic, partition, send, writes=False)).json()
        )

    async def truncate(self, topic: str, partition: int, offset: int) -> PartitionBounds:
        path = f"{_part_path(topic, partition)}/truncate"

        def send(url: str) -> Awaitable[httpx.Response]:
            return self._req_at(url, "POST", path, json={"offset": offset})

        return PartitionBounds.from_json(
            (await self._routed(topic, partition, send, writes=True)).json()
        )

    async def delete_records(
        self, topic: str, partition: int, before_offset: int
    ) -> PartitionBounds:
        """Delete every record below ``before_offset`` (-1: the high watermark) at the
        partition's leader (Kafka's DeleteRecords); returns the new bounds (its log start
        moved up to the offset)."""
        path = _delete_records_path(topic, partition)
        body = {"before_offset": before_offset}

        def send(url: str) -> Awaitable[httpx.Response]:
            return self._req_at(url, "POST", path, json=body)

        return PartitionBounds.from_json(
            (await self._routed(topic, partition, send, writes=True)).json()
        )

    async def health(self) -> dict[str, Any]:
        result: dict[str, Any] = (await self._req("GET", "/healthz")).json()
        return result

    async def metrics(self) -> str:
        return (await self._req("GET", "/metrics")).text

    async def close(self) -> None:
        await self._http.aclose()
        if self._pools is not None:
            self._pools.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


__all__ = ["AsyncClient"]
