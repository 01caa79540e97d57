"""The synchronous client, :class:`Client` (see :mod:`tiered_log.client`).

JSON requests through httpx; record bodies (binary fetch and produce) through the pooled
``http.client`` connections of :mod:`tiered_log.client.traffic`, one pool per node.
``consume`` prefetches the next request in a background thread. A partition's requests
go to its leader and are retried as :mod:`tiered_log.client.routing` says.

Thread-safety: a :class:`Client` may be shared between threads (httpx.Client, the record
pools and the leader map are); one ``consume`` iterator belongs to one thread.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable, Generator, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import httpx

from ..errors import (
    ConnectionFailedError,
    InvalidArgumentError,
    TieredLogError,
    TopicNotFoundError,
)
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


class Client:
    """Synchronous client; see :mod:`tiered_log.client`. Use as a context manager or
    call :meth:`close`. With a ``transport`` every request goes through it.

    ``base_url``: one node's URL, several (a sequence or a comma-separated string). A
    partition's produce, fetch, consume, bounds, offsets and truncate go to its leader,
    learnt from ``GET /v1/cluster`` (a single node, which answers 404 there, gets every
    request, as before clusters); topic admin goes to any node (the next one when a node
    cannot be reached). Failed requests are retried for up to ``retry_timeout_s``
    seconds by the rules of :mod:`tiered_log.client.routing`: a produce whose request
    may have reached the server is never sent again. ``base_url`` (the first URL) is
    where :meth:`health` and :meth:`metrics` go.
    """

    def __init__(
        self,
        base_url: str | Sequence[str],
        token: str | None = None,
        *,
        timeout: float = 60.0,
        verify: bool | str | ssl.SSLContext = True,
        transport: httpx.BaseTransport | None = None,
        retry_timeout_s: float = 30.0,
    ) -> None:
        self.urls = parse_urls(base_url)
        self.base_url = self.urls[0]
        self.retry_timeout_s = retry_timeout_s
        self._routes = Routes(self.urls)
        self._http = httpx.Client(
            base_url=self.base_url,
            headers=_headers(token),
            timeout=timeout,
            verify=_verify(verify),
            transport=transport,
        )
        self._pools = (
            None if transport is not None else RecordPools(_headers(token), timeout, verify)
        )
        self._partitioner = DefaultPartitioner()
        self._counts = PartitionCounts()

    # ---- sending -------------------------------------------------------------------------

    def _req_at(self, url: str, method: str, path: str, **kw: Any) -> httpx.Response:
        try:
            return _check(self._http.request(method, url + path, **kw))
        except httpx.TransportError as exc:
            raise _transport_error(url, exc) from exc

    def _req(self, method: str, path: str, **kw: Any) -> httpx.Response:
        return self._req_at(self.base_url, method, path, **kw)

    def _get_records(self, url: str, path: str, params: dict[str, int]) -> httpx.Response:
        if self._pools is not None:
            return self._pools.get(url).request("GET", path, params=params, headers=_ACCEPT_BINARY)
        return self._req_at(url, "GET", path, params=params, headers=_ACCEPT_BINARY)

    def _receive_records(
        self, url: str, path: str, params: dict[str, int], buffer: bytearray | None
    ) -> tuple[httpx.Headers, memoryview]:
        if self._pools is not None:
            return self._pools.get(url).receive_into(
                path, params=params, headers=_ACCEPT_BINARY, buffer=buffer
            )
        resp = self._req_at(url, "GET", path, params=params, headers=_ACCEPT_BINARY)
        return resp.headers, memoryview(resp.content)

    def _post_frames(
        self, url: str, path: str, body: bytes, params: dict[str, int | str] | None
    ) -> httpx.Response:
        if self._pools is not None:
            return self._pools.get(url).request(
                "POST", path, params=params, body=body, headers=_FRAMES_HEADERS
            )
        return self._req_at(url, "POST", path, params=params, content=body, headers=_FRAMES_HEADERS)

    def _any(self, method: str, path: str, **kw: Any) -> httpx.Response:
        """A request any node answers (topic admin): to each known node in turn while
        they cannot be reached (a POST or DELETE only while nothing was sent)."""
        last: ConnectionFailedError | None = None
        for url in self._routes.any_urls():
            try:
                return self._req_at(url, method, path, **kw)
            except ConnectionFailedError as exc:
                if method != "GET" and not isinstance(exc, RequestNotSentError):
                    raise
                last = exc
        assert last is not None
        raise last

    def _leader(self, topic: str, partition: int) -> str:
        """The URL of the partition's leader (asking ``GET /v1/cluster`` of each known
        node in turn when not known)."""
        url = self._routes.leader(topic, partition)
        if url is not None:
            return url
        last: TieredLogError | None = None
        for cand in self._routes.cluster_urls():
            try:
                resp = self._http.get(cand + CLUSTER_PATH)
            except httpx.TransportError as exc:
                last = _transport_error(cand, exc)
                continue
            got = self._routes.take_answer(cand, resp.status_code, resp.content, topic, partition)
            if isinstance(got, str):
                return got
            last = got
        assert last is not None
        raise last

    def _routed(
        self,
        topic: str,
        partition: int,
        send: Callable[[str], _T],
        *,
        writes: bool,
        retry: bool = True,
    ) -> _T:
        """``send(leader URL)``, retried by the rules of :mod:`.routing` (``writes``: a
        request that changes the log; ``retry=False``: one try, for a body that cannot
        be sent twice)."""
        attempts: Attempts | None = None
        while True:
            try:
                return send(self._leader(topic, partition))
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
                time.sleep(attempts.after(exc).delay_s)

    # topics
    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        config: dict[str, Any] | None = None,
        *,
        replication_factor: int | None = None,
        min_insync_replicas: int | None = None,
    ) -> dict[str, Any]:
        """Create a topic; returns its description. TopicExistsError if it exists.
        ``replication_factor``/``min_insync_replicas``: for a cluster (sent when given)."""
        body = _topic_body(name, partitions, config, replication_factor, min_insync_replicas)
        result: dict[str, Any] = self._any("POST", "/v1/topics", json=body).json()
        return result

    def list_topics(self) -> list[dict[str, Any]]:
        topics: list[dict[str, Any]] = self._any("GET", "/v1/topics").json()["topics"]
        return topics

    def describe_topic(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self._any("GET", _topic_path(name)).json()
        return result

    def delete_topic(self, name: str) -> None:
        self._any("DELETE", _topic_path(name))

    def alter_topic(
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
        result: dict[str, Any] = (self._any("PATCH", _topic_path(name), json=body)).json()
        return result

    def reassign(self, from_node: int, to_node: int) -> dict[str, Any]:
        """Move every replica ``from_node`` holds to ``to_node`` (a cluster; needs admin on
        every topic): ``POST /v1/cluster/reassign``'s answer, the partitions started."""
        return _json_object(
            self._any("POST", REASSIGN_PATH, json=_reassign_body(from_node, to_node))
        )

    def restore(
        self,
        topics: list[str] | None = None,
        *,
        replication_factor: int | None = None,
        min_insync_replicas: int | None = None,
        to_timestamp: int | None = None,
    ) -> dict[str, Any]:
        """Recreate in a new cluster the topics the bucket keeps (needs admin on every
        topic): ``POST /v1/cluster/restore``'s answer (``restored``, ``skipped``,
        ``missing``). Each partition reports what was never shipped as lost.
        ``to_timestamp``: each topic holds only its records up to that time."""
        body = _restore_body(topics, replication_factor, min_insync_replicas, to_timestamp)
        return _json_object(self._any("POST", RESTORE_PATH, json=body))

    def restore_topic(
        self,
        topic: str,
        as_topic: str,
        *,
        to_timestamp: int | None = None,
        to_offset: int | None = None,
    ) -> dict[str, Any]:
        """Point-in-time restore of ``topic`` as the new topic ``as_topic`` (needs admin
        on every topic): ``POST /v1/archive/restore``'s report, once the new topic is
        served."""
        body = _restore_topic_body(topic, as_topic, to_timestamp, to_offset)
        return _json_object(self._any("POST", TOPIC_RESTORE_PATH, json=body))

    def archive_anomalies(self, topic: str | None = None) -> dict[str, Any]:
        """What the node's background scrubber found (``GET /v1/archive/anomalies``: the
        damaged segments of its last pass and of the pass under way; ``enabled`` false
        when it runs none); ``topic``: that topic's only."""
        return _json_object(self._any("GET", ANOMALIES_PATH, params=_topic_filter(topic)))

    def archive_scrub(self, topic: str | None = None) -> list[dict[str, Any]]:
        """Run one scrub pass now on every live node (``POST /v1/archive/scrub``: each
        node checks both tiers of the partitions it holds and repairs what it can) and
        answer each node's report, ``{"node_id", "url", "report"}`` (a single node:
        ``node_id`` None); ``topic``: that topic's partitions only. Blocks until every
        pass is done (no time limit: a pass reads at the nodes' ``scrub_bytes_per_sec``)."""
        body = _topic_filter(topic)
        doc = self.cluster()
        if doc is None:
            resp = self._any("POST", SCRUB_PATH, json=body, timeout=None)
            return [_scrub_report(None, None, resp)]
        return [
            _scrub_report(
                node_id, url, self._req_at(url, "POST", SCRUB_PATH, json=body, timeout=None)
            )
            for node_id, url in _scrub_targets(doc)
        ]

    def cluster(self) -> dict[str, Any] | None:
        """``GET /v1/cluster`` of a node that answers (nodes, controller, each
        partition's leader, epoch, replicas and ISR); None for a single node."""
        try:
            resp = self._any("GET", CLUSTER_PATH)
        except TieredLogError as exc:
            if exc.status == 404:  # a single node (TopicNotFoundError), or an older one
                return None
            raise
        result: dict[str, Any] = resp.json()
        return result

    # records
    def partitions(self, topic: str) -> int:
        """The topic's partition count (learnt from :meth:`describe_topic`, then kept for
        :data:`~tiered_log.partitioner.PARTITION_COUNT_MAX_AGE_S`)."""
        count = self._counts.get(topic)
        if count is None:
            count = int(self.describe_topic(topic)["partitions"])
            self._counts.put(topic, count)
        return count

    def assign_partitions(
        self, topic: str, records: Sequence[ProducerRecord | bytes | str]
    ) -> dict[int, list[int]]:
        """Where Kafka's default partitioner sends each of ``records`` (one batch):
        partition -> the indexes of its records. Keyed records by the murmur2 hash of the
        key; keyless ones all to one partition, the next partition for the next batch
        (see :mod:`tiered_log.partitioner`)."""
        return self._partitioner.assign(topic, records, self.partitions(topic))

    def send(
        self,
        topic: str,
        records: Iterable[ProducerRecord | bytes | str],
        *,
        acks: str | None = None,
        compression: Codec = None,
    ) -> list[RecordMetadata]:
        """Append ``records`` to the partitions Kafka's default partitioner chooses
        (:meth:`assign_partitions`); returns each record's partition and offset, in order.

        One :meth:`produce` request per partition, in turn; each is all or nothing, but
        the batch as a whole is not: an error raised for one partition leaves the
        records already acknowledged on the partitions before it appended. Every
        record is checked before anything is sent."""
        items = list(records)
        if not items:
            raise InvalidArgumentError("a batch needs at least one record")
        groups = self.assign_partitions(topic, items)
        bodies = {
            p: encode_produce_body([items[i] for i in idx], compression)
            for p, idx in groups.items()
        }
        out: list[RecordMetadata] = [RecordMetadata(-1, -1)] * len(items)
        for p, idx in groups.items():
            offsets = self._produce_body(topic, p, bodies[p], acks)
            for i, off in zip(idx, offsets, strict=True):
                out[i] = RecordMetadata(p, off)
        return out

    def produce(
        self,
        topic: str,
        partition: int | None,
        records: Iterable[ProducerRecord | bytes | str],
        *,
        acks: str | None = None,
        compression: Codec = None,
    ) -> list[int]:
        """Append a batch (all or nothing, binary frames) on the partition's leader;
        returns each record's offset. ``acks``: ``"all"`` (every in-sync replica has
        the records; the server's default when the topic has replicas) or ``"1"`` (the
        leader has them); None leaves it to the server. Retried only where nothing was
        appended (see :mod:`tiered_log.client.routing`): a connection that broke after
        sending raises ConnectionFailedError, and the records may or may not be in the
        log (the caller decides whether to send them again). ``compression``:
        ``"gzip"``, ``"snappy"``, ``"lz4"`` or ``"zstd"`` compresses each batch here (the
        server stores it compressed, as sent); None or ``"none"``: not compressed. A
        :class:`ProducerRecord` whose value is None is a null value (a tombstone).

        ``partition=None``: the partitions Kafka's default partitioner chooses, as
        :meth:`send` (which also says which partition each record went to)."""
        if partition is None:
            return [m.offset for m in self.send(topic, records, acks=acks, compression=compression)]
        body = encode_produce_body(records, compression)
        return self._produce_body(topic, partition, body, acks)

    def _produce_body(self, topic: str, partition: int, body: bytes, acks: str | None) -> list[int]:
        """Send an encoded produce body to the partition's leader; the offsets."""
        path = f"{_part_path(topic, partition)}/records"
        params = _acks_params(acks)
        try:
            resp = self._routed(
                topic,
                partition,
                lambda url: self._post_frames(url, path, body, params),
                writes=True,
            )
        except TopicNotFoundError:
            self._counts.forget(topic)
            raise
        offsets: list[int] = resp.json()["offsets"]
        return offsets

    def produce_raw(
        self,
        topic: str,
        partition: int,
        value: bytes | Iterable[bytes],
        *,
        key: bytes | str | None = None,
        timestamp: int | None = None,
        acks: str | None = None,
    ) -> int:
        """Append ONE record whose value is streamed as the body (an iterable is sent
        chunked, and then never retried: it cannot be sent twice).
        RecordTooLargeError past the topic's append threshold. ``acks``: as
        :meth:`produce`."""
        path = f"{_part_path(topic, partition)}/records"
        params = _raw_params(key, timestamp, acks)

        def send(url: str) -> httpx.Response:
            return self._req_at(
                url, "POST", path, content=value, params=params, headers={"Content-Type": _BINARY}
            )

        resp = self._routed(topic, partition, send, writes=True, retry=isinstance(value, bytes))
        return int(resp.json()["offsets"][0])

    def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_records: int = 500,
        max_bytes: int = 1 << 20,
        wait_ms: int = 0,
    ) -> FetchResult:
        """Records from ``offset`` on (binary form, checksums verified), from the
        partition's leader."""
        path = f"{_part_path(topic, partition)}/records"
        params = _fetch_params(offset, max_records, max_bytes, wait_ms)
        resp = self._routed(
            topic, partition, lambda url: self._get_records(url, path, params), writes=False
        )
        return _parse_fetch(resp, offset, max_records)

    def fetch_batches(
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
        """The record batches from ``offset`` on as stored, from the partition's leader,
        each batch's checksum verified and nothing decoded (no record built): what a
        follower, a rebuild or a columnar reader takes. The body is received straight
        into ``buffer`` when it is given and large enough (the result's ``data`` is then
        a view of it: reuse the buffer only once done with the result), else into a new
        buffer. Limits as :meth:`fetch` (whole batches: the first may begin below
        ``offset``); routed and retried as :meth:`fetch`."""
        path = f"{_part_path(topic, partition)}/records"
        params = _fetch_params(offset, max_records, max_bytes, wait_ms)
        headers, data = self._routed(
            topic,
            partition,
            lambda url: self._receive_records(url, path, params, buffer),
            writes=False,
        )
        return _checked_batches(headers, data, offset)

    def consume(
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
        prefetch: bool = True,
    ) -> Generator[FetchResult, None, None]:
        """Fetch records from ``offset`` on, one :class:`FetchResult` of at most
        ``max_records`` records per page.

        As a Kafka consumer does, requests and pages are sized apart: each request asks
        for up to :data:`~tiered_log.client.paging.FETCH_RECORDS` records within
        ``max_bytes`` (Kafka's ``fetch.max.bytes``), and its records are handed out
        ``max_records`` at a time (``max.poll.records``). Large ``max_bytes`` means few requests (each costs the
        server and this client a fixed ~1-2 ms); small means little memory.
        With ``prefetch`` (the default), while the caller holds a request's pages (and this
        thread verifies them) the next request is already being fetched in a background
        thread: its offset is in the previous answer's headers, so it goes out before that
        answer is decoded, as a Kafka consumer's fetcher does; this hides the round trip
        and the server's work.
        Stops before ``end_offset`` (exclusive) if given, else at the end of the log (an
        empty page); with ``follow`` it waits for new records (long-polls of ``wait_ms``)
        instead and runs until the caller stops iterating. Closing the iterator early
        waits for the one request in flight. Use one iterator from one thread.

        Across a leader change each request is sent again (to the new leader) for the
        same offset, the next one not yet handed out: no offset twice, no gap.
        """
        _check_consume(offset, end_offset, max_records)
        if end_offset is not None and offset >= end_offset:
            return
        path = f"{_part_path(topic, partition)}/records"
        wait = wait_ms if follow else 0

        def get(off: int) -> httpx.Response:
            params = _fetch_params(off, _page_plan(off, end_offset), max_bytes, wait)
            return self._routed(
                topic, partition, lambda url: self._get_records(url, path, params), writes=False
            )

        if not prefetch:
            while True:
                page = _parse_fetch(get(offset), offset, _left(offset, end_offset))
                yield from _pages(page, max_records)
                if _consume_done(len(page.records), page.next_offset, end_offset, follow):
                    return
                offset = page.next_offset

        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tl-consume")
        try:
            fut = pool.submit(get, offset)
            while True:
                resp = fut.result()
                count, nxt, _, _ = _fetch_headers(resp)
                done = _consume_done(count, nxt, end_offset, follow)
                if not done:
                    fut = pool.submit(get, nxt)
                yield from _pages(
                    _parse_fetch(resp, offset, _left(offset, end_offset)), max_records
                )
                if done:
                    return
                offset = nxt
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def offset_for_timestamp(self, topic: str, partition: int, timestamp: int) -> int | None:
        """First offset with a timestamp >= ``timestamp``; None if there is none."""
        path = f"{_part_path(topic, partition)}/offsets"
        d = self._routed(
            topic,
            partition,
            lambda url: self._req_at(url, "GET", path, params={"timestamp": timestamp}),
            writes=False,
        ).json()
        return None if d["offset"] is None else int(d["offset"])

    def archived_segments(self, topic: str, partition: int) -> dict[str, Any]:
        """The partition's finished remote segments as its leader serves them (``GET
        .../remote-segments``: each with its ``object_key``, relative to ``remote_url``)."""
        path = _segments_path(topic, partition)
        return _json_object(
            self._routed(topic, partition, lambda url: self._req_at(url, "GET", path), writes=False)
        )

    def bounds(self, topic: str, partition: int) -> PartitionBounds:
        """The partition's bounds as its leader sees them."""
        path = f"{_part_path(topic, partition)}/bounds"
        return PartitionBounds.from_json(
            self._routed(
                topic, partition, lambda url: self._req_at(url, "GET", path), writes=False
            ).json()
        )

    def truncate(self, topic: str, partition: int, offset: int) -> PartitionBounds:
        """Remove every record at and after ``offset``; returns the new bounds."""
        path = f"{_part_path(topic, partition)}/truncate"
        return PartitionBounds.from_json(
            self._routed(
                topic,
                partition,
                lambda url: self._req_at(url, "POST", path, json={"offset": offset}),
                writes=True,
            ).json()
        )

    def delete_records(self, topic: str, partition: int, before_offset: int) -> PartitionBounds:
        """Delete every record below ``before_offset`` (-1: the high watermark) at the
        partition's leader (Kafka's DeleteRecords); returns the new bounds (its log start
        moved up to the offset)."""
        path = _delete_records_path(topic, partition)
        body = {"before_offset": before_offset}
        return PartitionBounds.from_json(
            self._routed(
                topic,
                partition,
                lambda url: self._req_at(url, "POST", path, json=body),
                writes=True,
            ).json()
        )

    # service
    def health(self) -> dict[str, Any]:
        result: dict[str, Any] = self._req("GET", "/healthz").json()
        return result

    def metrics(self) -> str:
        return self._req("GET", "/metrics").text

    def close(self) -> None:
        self._http.close()
        if self._pools is not None:
            self._pools.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["Client"]
