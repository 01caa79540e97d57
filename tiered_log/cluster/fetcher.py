"""A follower's replica fetcher: the thread that pulls one partition's records from its
leader and appends them at the same offsets (Kafka's ``ReplicaFetcherThread``, one per
followed partition here).

Each round sends :class:`~tiered_log.cluster.protocol.ReplicaFetch` (this log's end and
latest leader epoch) to the leader through a
:class:`~tiered_log.cluster.protocol.ReplicaTransport` (the leader's Kafka listener,
:class:`~tiered_log.cluster.kafka_fetch.KafkaTransport`, or its HTTP replication route,
:class:`HttpTransport`: the policy here is the same for both) and applies the answer:

- records: :meth:`TieredLog.append_replica <tiered_log.partition.log.TieredLog.append_replica>`
  with the leader's epoch entries, then the high watermark becomes
  ``min(leader's HW, own log end)``, and local retention may drop what the leader has
  shipped (:meth:`~tiered_log.partition.log.TieredLog.apply_replica_retention`);
- diverging: truncate to :func:`~tiered_log.local.leader_epoch.divergence_point` and go
  on (the next fetch asks again with the new latest epoch, so several rounds walk back
  through several divergent epochs, as KIP-279);
- reset: the leader keeps nothing locally at this log's end, or this log is empty (a
  node rebuilt on a new disk) and the leader has shipped past it: restart the local log
  at the leader's remote end (:meth:`~tiered_log.partition.log.TieredLog.reset_replica`), so
  only the unshipped tail is copied (KIP-1023), and fetch again at once: the view of
  the bucket is rebuilt only if this replica leads (:meth:`TieredLog.lead
  <tiered_log.partition.log.TieredLog.lead>`), whose reads of archived offsets wait for it.

When it fsyncs: a follower's log end counts for nothing (the leader neither moves the
high watermark by it nor takes it into the ISR) until it reaches the leader's high
watermark, the lowest log end of the in-sync replicas, and within one leader epoch that
mark only rises. So while this log's end is below the highest mark this fetcher has
learnt, the records it copies are committed already (on the disks of the in-sync
replicas) and it appends them without an fsync each (``append_replica(sync=False)``);
before it sends a fetch from an end at or past that mark, the one kind that can
acknowledge a record or bring it back into the ISR, it fsyncs what the flush policy
owes (:meth:`TieredLog.flush_if_due <tiered_log.partition.log.TieredLog.flush_if_due>`).
An in-sync follower therefore fsyncs before every fetch that follows an append, as it
did after every append, and "acknowledged is never lost" holds under the same faults;
one catching up fsyncs once per segment (its seal) instead of once per fetch. A new
fetcher (a new leader or epoch) starts knowing no mark.

Catching up, by the same rule: while this log's end is below that mark, each fetch asks
for up to ``catch_up_max_bytes`` (``max_bytes`` otherwise), and the next fetch is sent
ahead, from the end the batches in hand will leave, in a thread of its own while they
are verified and appended (Kafka's fetch pipelining): the leader hears of an end this
log does not hold yet, which is safe only because an end below the mark counts for
nothing. The answer sent ahead is used only if the next round would have asked exactly
the same (same offset, last epoch and sizes: the append went as planned), else it is
dropped and the round asks again. Memory: a catching-up fetcher holds two answers of up
to ``catch_up_max_bytes`` (the one in hand, the one ahead), and gives the space back once
answers are small. A transport's answer stays valid until the fetch after the next (:class:`~tiered_log.cluster.kafka_fetch.KafkaTransport` takes turns
with two buffers), and only one fetch is in flight at a time.

Invariant: a follower's log is always a prefix of some leader's log in an epoch at
least its own: it appends only what the leader of ``leader_epoch`` sent from exactly
its own log end, and truncates before appending whenever its last epoch's history
differs from the leader's. A leader it cannot reach, or one that refuses its epoch
(fenced: it is the follower that must learn the new leader), is retried with a short
back-off; the node stops this fetcher and starts another when the metadata names a new
leader or epoch.

Thread-safety: one fetcher is the only writer of its partition's log (the service
refuses produce on a follower); its fetch sent ahead runs in a thread of its own that
touches only the transport; :meth:`stop` may be called from any thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

import httpx

from ..errors import (
    CorruptRecordError,
    FencedEpochError,
    InvalidArgumentError,
    LogClosedError,
    NotLeaderError,
    RemoteStorageError,
    TieredLogError,
)
from ..format.records import HEADER_SIZE, batch_header
from ..local.ranges import FetchRanges
from ..partition import TieredLog
from .protocol import PATH, ReplicaAnswer, ReplicaFetch, ReplicaTransport

log = logging.getLogger(__name__)


class HttpTransport:
    """A follower's fetches over the leader's HTTP replication route
    (``GET`` :data:`~tiered_log.cluster.protocol.PATH`; one keep-alive connection).
    ``headers``: sent with every request (the cluster's bearer token when auth is on).
    One thread fetches; :meth:`close` after it stopped."""

    name = "http"

    def __init__(
        self,
        leader_url: str,
        *,
        headers: dict[str, str] | None = None,
        timeout_s: float = 5.0,
        wait_ms: int = 300,
    ) -> None:
        self.address = leader_url.rstrip("/")
        self._client = httpx.Client(
            timeout=httpx.Timeout(timeout_s + wait_ms / 1000), headers=headers or {}
        )

    def fetch(self, topic: str, partition: int, req: ReplicaFetch) -> ReplicaAnswer:
        url = self.address + PATH.format(topic=topic, partition=partition)
        try:
            r = self._client.get(url, params=req.params())
        except httpx.HTTPError as exc:
            raise TieredLogError(f"{exc}", retriable=True) from None
        if r.status_code != 200:
            raise _error_of(r)
        return ReplicaAnswer.parse(r.headers, r.content)

    def close(self) -> None:
        self._client.close()


class ReplicaFetcher:
    """Follows leader ``leader_id`` for ``topic``/``partition`` in ``leader_epoch``
    through ``transport`` (which it closes when it stops).

    ``on_fetched``: called after each successful round (tests and metrics)."""

    def __init__(
        self,
        plog: TieredLog,
        *,
        topic: str,
        partition: int,
        replica_id: int,
        leader_id: int,
        leader_epoch: int,
        transport: ReplicaTransport,
        max_bytes: int = 4 << 20,
        catch_up_max_bytes: int = 8 << 20,
        wait_ms: int = 300,
        on_fetched: Callable[[ReplicaAnswer], None] | None = None,
    ) -> None:
        self.plog = plog
        self.topic = topic
        self.partition = partition
        self.replica_id = replica_id
        self.leader_id = leader_id
        self.transport = transport
        self.leader_epoch = leader_epoch
        self._max_bytes = max_bytes
        self._catch_up_bytes = max(max_bytes, catch_up_max_bytes)
        self._wait_ms = wait_ms
        self._ahead: _FetchAhead | None = None
        self._on_fetched = on_fetched
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run,
            daemon=True,
            name=f"tiered-log-fetcher-{topic}-{partition}-from-{leader_id}",
        )
        self.last_error: str | None = None
        self.rounds = 0
        self.committed_mark = -1
        """The highest high watermark the leader sent in this epoch (-1: none yet): a
        fetch from below it cannot count towards a commit (see the module docstring)."""

    def start(self) -> ReplicaFetcher:
        self._thread.start()
        return self

    def stop_soon(self) -> None:
        """Ask the thread to stop after the round under way, without waiting (a node
        stopping many fetchers asks them all first, then waits: their parked fetches
        end together, not one after the other)."""
        self._stop.set()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop after the round under way (idempotent); the log is left as it is."""
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)
        self.transport.close()

    @property
    def running(self) -> bool:
        return self._thread.is_alive() and not self._stop.is_set()

    def _run(self) -> None:
        backoff = 0.05
        while not self._stop.is_set():
            try:
                self.fetch_once()
                backoff = 0.05
                self.last_error = None
            except (FencedEpochError, NotLeaderError) as exc:
                self._failed(
                    f"leader {self.leader_id} refused epoch {self.leader_epoch}: {exc.message}"
                )
            except LogClosedError:
                return
            except TieredLogError as exc:
                self._failed(
                    f"fetch from node {self.leader_id} ({self.transport.name}) failed: {exc}"
                )
            except Exception:  # a bug: log it, keep the thread (and the replica) alive
                log.exception("replica fetcher %s-%d crashed a round", self.topic, self.partition)
                self.last_error = "unexpected error (see the server log)"
            else:
                continue
            self._stop.wait(backoff)
            backoff = min(backoff * 2, 1.0)

    def _failed(self, why: str) -> None:
        if why != self.last_error:
            log.info("%s-%d: %s", self.topic, self.partition, why)
        self.last_error = why

    def fetch_once(self) -> ReplicaAnswer:
        """One round: fetch and apply. Raises the leader's error (decoded), a
        retriable TieredLogError when it cannot be reached or its answer is malformed
        (nothing is applied), CorruptRecordError for damaged bytes."""
        plog = self.plog
        b = plog.bounds()
        if b.next_offset >= self.committed_mark:
            plog.flush_if_due()  # this end may count: on disk before the leader hears it
        req = self._request(
            b.next_offset, plog.latest_leader_epoch, empty=b.next_offset == b.local_start_offset
        )
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead.req == req:
            ans = ahead.result()
        else:
            if ahead is not None:
                ahead.drop()
            ans = self.transport.fetch(self.topic, self.partition, req)
        self.committed_mark = max(self.committed_mark, ans.high_watermark)
        if self._stop.is_set():
            return ans
        if ans.reset_to is not None:
            log.info(
                "%s-%d: log end %d is below the leader's local start %d: restarting "
                "the local log there",
                self.topic,
                self.partition,
                req.offset,
                ans.reset_to,
            )
            plog.reset_replica(ans.reset_to)
            # Only the epoch in force at the new start: an epoch the leader began past it
            # is recorded by append_replica when its batches arrive (recorded now, it would
            # refuse the older epoch's batches that come first).
            current = [e for e in ans.epochs if e[1] <= ans.reset_to]
            if current:
                plog.record_leader_epoch(max(current, key=lambda e: e[1])[0], ans.reset_to)
            # The next fetch goes at once: the view of the bucket's copies is not read
            # here (it is rebuilt when this replica leads, before it serves archived
            # offsets); only its metadata (lost ranges, log start), one small read.
            try:
                plog.refresh_remote_meta()
            except RemoteStorageError as exc:
                log.warning(
                    "%s-%d: the bucket's metadata not read: %s",
                    self.topic,
                    self.partition,
                    exc.message,
                )
        elif ans.diverging is not None:
            cut = plog.divergence(ans.diverging)
            log.info(
                "%s-%d: log diverges from leader %d (epoch %d ends at %d there): "
                "truncating %d -> %d",
                self.topic,
                self.partition,
                self.leader_id,
                ans.diverging[0],
                ans.diverging[1],
                req.offset,
                cut,
            )
            plog.truncate(cut)
        elif ans.data:
            data = ans.data if not isinstance(ans.data, FetchRanges) else ans.data.read()
            self._send_ahead(data, ans.epochs)
            try:
                plog.append_replica(data, ans.epochs, ans.rolls, sync=False)
            except (CorruptRecordError, InvalidArgumentError) as exc:
                raise TieredLogError(
                    f"leader {self.leader_id} sent batches that do not "
                    f"append at {req.offset}: {exc}"
                ) from None
        plog.set_high_watermark(min(ans.high_watermark, plog.next_offset))
        plog.apply_replica_retention(ans.remote_end_offset)
        plog.follow_log_start(ans.log_start_offset)  # records deleted at the leader
        self.rounds += 1
        if self._on_fetched is not None:
            self._on_fetched(ans)
        return ans

    def _request(self, offset: int, last_epoch: int, *, empty: bool) -> ReplicaFetch:
        """The fetch from ``offset``: ``catch_up_max_bytes`` below the mark."""
        size = self._catch_up_bytes if offset < self.committed_mark else self._max_bytes
        return ReplicaFetch(
            self.replica_id, self.leader_epoch, offset, last_epoch, size, self._wait_ms, empty=empty
        )

    def _send_ahead(self, data: bytes | memoryview, epochs: Sequence[tuple[int, int]]) -> None:
        """Send the fetch that follows ``data`` (about to be appended) now, if the end it
        leaves is below the mark (see the module docstring)."""
        end = _end_offset(data)
        if end is None or end >= self.committed_mark or self._stop.is_set():
            return
        last = max([self.plog.latest_leader_epoch, *(e for e, s in epochs if s < end)])
        req = self._request(end, last, empty=False)
        self._ahead = _FetchAhead(self.transport, self.topic, self.partition, req)


class _FetchAhead:
    """One fetch sent from a thread of its own (see :class:`ReplicaFetcher`): its
    request, and its answer or error once :meth:`result` joined it."""

    def __init__(
        self, transport: ReplicaTransport, topic: str, partition: int, req: ReplicaFetch
    ) -> None:
        self.req = req
        self._answer: ReplicaAnswer | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run,
            args=(transport, topic, partition),
            daemon=True,
            name=f"tiered-log-fetch-ahead-{topic}-{partition}",
        )
        self._thread.start()

    def _run(self, transport: ReplicaTransport, topic: str, partition: int) -> None:
        try:
            self._answer = transport.fetch(topic, partition, self.req)
        except BaseException as exc:  # handed to the fetcher's thread by result()
            self._error = exc

    def result(self) -> ReplicaAnswer:
        """The answer (waits for it); raises what the fetch raised."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._answer is not None
        return self._answer

    def drop(self) -> None:
        """Wait for the fetch to end and forget it (the transport is free again)."""
        self._thread.join()


def _end_offset(data: bytes | bytearray | memoryview) -> int | None:
    """The offset after the last of the leader's batches ``data``, from their headers
    (not verified: the append verifies them); None when they do not frame exactly."""
    pos, end, size = 0, None, len(data)
    while pos + HEADER_SIZE <= size:
        base, n, count = batch_header(data, pos)
        if n < HEADER_SIZE:
            return None
        pos, end = pos + n, base + count
    return end if pos == size else None


def _error_of(r: httpx.Response) -> TieredLogError:
    """The leader's JSON error answer as our exception (its class by code)."""
    from ..errors import error_class

    try:
        err = r.json()["error"]
        cls = error_class(err["code"]) or TieredLogError
        msg = str(err.get("message", ""))
    except (ValueError, KeyError, TypeError):
        return TieredLogError(f"leader answered {r.status_code}", retriable=True)
    if cls is FencedEpochError:
        return FencedEpochError(msg)
    if cls is NotLeaderError:
        return NotLeaderError(msg)
    return TieredLogError(
        f"leader answered {r.status_code} {err.get('code')}: {msg}", retriable=True
    )


__all__ = ["HttpTransport", "ReplicaFetcher"]
