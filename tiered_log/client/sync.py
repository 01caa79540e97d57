"""The synchronous client, :class:`Client` (see :mod:`tiered_log.client`).

JSON requests through httpx; record bodies (binary fetch and produce) through the pooled
``http.client`` connections of :mod:`tiered_log.client.traffic`. ``consume`` prefetches
the next request in a background thread.

Thread-safety: a :class:`Client` may be shared between threads (httpx.Client and the
record pool are); one ``consume`` iterator belongs to one thread.
"""

from __future__ import annotations

import ssl
from collections.abc import Generator, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

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


class Client:
    """Synchronous client; see :mod:`tiered_log.client`. Use as a context manager or
    call :meth:`close`. With a ``transport`` every request goes through it."""

    def __init__(self, base_url: str, token: str | None = None, *, timeout: float = 60.0,
                 verify: bool | str | ssl.SSLContext = True, transport: httpx.BaseTransport | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(base_url=self.base_url, headers=_headers(token),
                                  timeout=timeout, verify=_verify(verify), transport=transport)
        self._records = (None if transport is not None else
                         _RecordTraffic(self.base_url, _headers(token), timeout, verify))

    def _get_records(self, path: str, params: dict[str, int]) -> httpx.Response:
        if self._records is not None:
            return self._records.request("GET", path, params=params, headers=_ACCEPT_BINARY)
        return self._req("GET", path, params=params, headers=_ACCEPT_BINARY)

    def _post_frames(self, path: str, body: bytes) -> httpx.Response:
        if self._records is not None:
            return self._records.request("POST", path, body=body, headers=_FRAMES_HEADERS)
        return self._req("POST", path, content=body, headers=_FRAMES_HEADERS)

    def _req(self, method: str, path: str, **kw: Any) -> httpx.Response:
        try:
            return _check(self._http.request(method, path, **kw))
        except httpx.TransportError as exc:
            raise ConnectionFailedError(f"cannot reach {self.base_url}: {exc}") from exc

    # topics
    def create_topic(self, name: str, partitions: int = 1,
                     config: dict[str, Any] | None = None) -> dict[str, Any]:
        """Create a topic; returns its description. TopicExistsError if it exists."""
        body = {"name": name, "partitions": partitions, "config": config or {}}
        result: dict[str, Any] = self._req("POST", "/v1/topics", json=body).json()
        return result

    def list_topics(self) -> list[dict[str, Any]]:
        topics: list[dict[str, Any]] = self._req("GET", "/v1/topics").json()["topics"]
        return topics

    def describe_topic(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self._req("GET", _topic_path(name)).json()
        return result

    def delete_topic(self, name: str) -> None:
        self._req("DELETE", _topic_path(name))

    # records
    def produce(self, topic: str, partition: int,
                records: Iterable[ProducerRecord | bytes | str]) -> list[int]:
        """Append a batch (all or nothing, binary frames); returns each record's offset."""
        resp = self._post_frames(f"{_part_path(topic, partition)}/records",
                                 encode_produce_body(records))
        offsets: list[int] = resp.json()["offsets"]
        return offsets

    def produce_raw(self, topic: str, partition: int, value: bytes | Iterable[bytes], *,
                    key: bytes | str | None = None, timestamp: int | None = None) -> int:
        """Append ONE record whose value is streamed as the body (an iterable is sent
        chunked). RecordTooLargeError past the topic's append threshold."""
        resp = self._req("POST", f"{_part_path(topic, partition)}/records", content=value,
                         params=_raw_params(key, timestamp), headers={"Content-Type": _BINARY})
        return int(resp.json()["offsets"][0])

    def fetch(self, topic: str, partition: int, offset: int, max_records: int = 500,
              max_bytes: int = 1 << 20, wait_ms: int = 0) -> FetchResult:
        """Records from ``offset`` on (binary form, checksums verified)."""
        resp = self._get_records(f"{_part_path(topic, partition)}/records",
                                 _fetch_params(offset, max_records, max_bytes, wait_ms))
        return _parse_fetch(resp, offset, max_records)

    def consume(self, topic: str, partition: int, offset: int, *, end_offset: int | None = None,
                max_records: int = 1000, max_bytes: int = 8 << 20, follow: bool = False,
                wait_ms: int = 1000, prefetch: bool = True) -> Generator[FetchResult, None, None]:
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
        """
        _check_consume(offset, end_offset, max_records)
        if end_offset is not None and offset >= end_offset:
            return
        path = f"{_part_path(topic, partition)}/records"
        wait = wait_ms if follow else 0

        def get(off: int) -> httpx.Response:
            want = _page_plan(off, end_offset)
            return self._get_records(path, _fetch_params(off, want, max_bytes, wait))

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
                yield from _pages(_parse_fetch(resp, offset, _left(offset, end_offset)), max_records)
                if done:
                    return
                offset = nxt
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def offset_for_timestamp(self, topic: str, partition: int, timestamp: int) -> int | None:
        """First offset with a timestamp >= ``timestamp``; None if there is none."""
        d = self._req("GET", f"{_part_path(topic, partition)}/offsets",
                      params={"timestamp": timestamp}).json()
        return None if d["offset"] is None else int(d["offset"])

    def bounds(self, topic: str, partition: int) -> PartitionBounds:
        return PartitionBounds.from_json(self._req("GET", f"{_part_path(topic, partition)}/bounds").json())

    def truncate(self, topic: str, partition: int, offset: int) -> PartitionBounds:
        """Remove every record at and after ``offset``; returns the new bounds."""
        return PartitionBounds.from_json(self._req(
            "POST", f"{_part_path(topic, partition)}/truncate", json={"offset": offset}).json())

    # service
    def health(self) -> dict[str, Any]:
        result: dict[str, Any] = self._req("GET", "/healthz").json()
        return result

    def metrics(self) -> str:
        return self._req("GET", "/metrics").text

    def close(self) -> None:
        self._http.close()
        if self._records is not None:
            self._records.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["Client"]
