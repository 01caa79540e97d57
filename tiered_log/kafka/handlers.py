"""The Kafka APIs this listener serves, one handler each: a decoded request in, the
response body out (as a dict for :func:`tiered_log.kafka.messages.encode_body`, one for
every version of the API; the fields a version lacks are dropped there).

- ApiVersions: the served ranges (:data:`~tiered_log.kafka.messages.APIS`).
- Metadata: the brokers, the topics asked for (every one when null) with each
  partition's leader, epoch, replicas and ISR and the topic id; a missing topic is
  created when the request and ``kafka_auto_create_topics`` allow it.
- Produce: each partition's batches verified and appended as sent, compression
  included (:func:`~tiered_log.kafka.backend.produce_batches`), through the HTTP
  produce's path (:class:`~tiered_log.kafka.backend.Backend`), the partitions of a
  request concurrently (each appears once in a request, so its order is the request's);
  ``acks=0`` gets no answer.
- Fetch: the stored batches from each partition's fetch offset (either tier), as they
  lie in the files (the connection sends them with ``sendfile``), waiting up to
  ``max_wait_ms`` until ``min_bytes`` are there; no fetch sessions (session id 0:
  every fetch is a full one, which Kafka's clients accept).
- Fetch with ``replica_id`` >= 0: a follower's replication fetch (v12 only), each
  partition through the broker's
  :meth:`~tiered_log.broker.Broker.replica_fetch` (parked at the leader's log end as
  the HTTP route is), its answer in Kafka's fields plus the tagged fields of
  :mod:`tiered_log.cluster.protocol`.
- The consumer-group APIs (FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
  LeaveGroup, OffsetCommit, OffsetFetch, ListGroups, DescribeGroups, DeleteGroups):
  :mod:`tiered_log.kafka.groups.handlers`, registered here.
- InitProducerId: a producer id for an idempotent producer; a transactional id is
  refused (:mod:`tiered_log.kafka.producers`).
- DescribeConfigs, IncrementalAlterConfigs, AlterConfigs: a topic's settings under
  Kafka's names (:mod:`tiered_log.kafka.configs`).
- ListOffsets: -1 latest (the high watermark), -2 earliest (the log start, the bucket
  included), -3 the record with the largest timestamp (v7+), -4 the local tier's first
  offset (v8+), -5 the last archived offset (v9+), else the first offset at or after a
  timestamp in either tier; each with the leader epoch it was written in (latest: the
  current one; :meth:`~tiered_log.kafka.backend.Backend.leader_epoch_at`).
- CreateTopics, DeleteTopics, OffsetForLeaderEpoch, DescribeLogDirs, DescribeCluster:
  :mod:`tiered_log.kafka.admin`.
- DescribeAcls, CreateAcls, DeleteAcls: SECURITY_DISABLED, as Kafka without an
  authorizer (:mod:`tiered_log.kafka.acls`).
- Authorized operations, when Metadata, DescribeCluster or DescribeGroups asks for them:
  every operation the resource supports (:mod:`tiered_log.kafka.operations`), cut down
  to a token's grants by :class:`~tiered_log.kafka.auth.KafkaGuard`.

Every refusal is a per-partition (or per-topic) Kafka error code; a handler raises only
for a request it cannot answer at all. Concurrency: coroutines of the listener's event
loop; what blocks runs in worker threads inside the backend.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from kio.schema.errors import ErrorCode

from ..cluster.protocol import ReplicaFetch
from ..errors import InvalidTopicNameError, TieredLogError, TopicNotFoundError
from .acls import ACL_APIS, AclHandlers
from .admin import ADMIN_APIS, AdminHandlers
from .backend import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    Backend,
    Page,
)
from .configs import CONFIG_APIS, ConfigHandlers
from .errors import InvalidAcksError, InvalidRecordError, error_code, error_message
from .groups.handlers import GROUP_APIS, GroupHandlers
from .groups.offsets import is_internal
from .messages import (
    API_VERSIONS,
    APIS,
    EXTRA_TAGS,
    FETCH,
    LIST_OFFSETS,
    METADATA,
    PRODUCE,
    ApiSpec,
    Request,
    millis,
)
from .operations import CLUSTER_OPERATIONS, TOPIC_OPERATIONS, when_asked
from .producers import PRODUCER_APIS, ProducerHandlers

log = logging.getLogger("tiered_log.kafka")

MAX_WAIT_MS = 30_000
"""The longest a fetch waits for ``min_bytes`` whatever its ``max_wait_ms`` says (the
HTTP fetch's ``wait_ms`` has the same bound)."""

APIS.update({k: ApiSpec(k, n, lo, hi, lo) for k, (n, lo, hi) in GROUP_APIS.items()})
APIS.update({k: ApiSpec(k, n, lo, hi, lo) for k, (n, lo, hi) in PRODUCER_APIS.items()})
APIS.update({k: ApiSpec(k, n, lo, hi, lo) for k, (n, lo, hi) in CONFIG_APIS.items()})
APIS.update({k: ApiSpec(k, n, lo, hi, lo) for k, (n, lo, hi) in ADMIN_APIS.items()})
APIS.update({k: ApiSpec(k, n, lo, hi, lo) for k, (n, lo, hi) in ACL_APIS.items()})

_SPECIAL_SINCE = {
    LATEST_TIMESTAMP: 0,
    EARLIEST_TIMESTAMP: 0,
    MAX_TIMESTAMP: 7,
    EARLIEST_LOCAL_TIMESTAMP: 8,
    LATEST_TIERED_TIMESTAMP: 9,
}
"""ListOffsets' special timestamps and the version each came with (an older version, or
an unknown negative timestamp: UNSUPPORTED_VERSION)."""


def api_versions_body(error: ErrorCode = ErrorCode.none) -> dict[str, Any]:
    """The ApiVersions answer (also for an unsupported ApiVersions version)."""
    return {
        "error_code": error,
        "api_keys": [
            {"api_key": s.key, "min_version": s.advertised_min, "max_version": s.max_version}
            for s in sorted(APIS.values(), key=lambda s: s.key)
        ],
        "throttle_time": 0,
    }


class Handlers:
    """The handlers over one :class:`Backend`. Event-loop thread only."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self._by_key = {
            API_VERSIONS: self.api_versions,
            METADATA: self.metadata,
            PRODUCE: self.produce,
            FETCH: self.fetch,
            LIST_OFFSETS: self.list_offsets,
            **GroupHandlers(backend).handlers(),
            **ProducerHandlers(backend).handlers(),
            **ConfigHandlers(backend).handlers(),
            **AdminHandlers(backend).handlers(),
            **AclHandlers(backend).handlers(),
        }

    async def handle(self, req: Request) -> dict[str, Any] | None:
        """The response body of ``req`` (None: no response, an ``acks=0`` produce)."""
        return await self._by_key[req.api_key](req)

    async def api_versions(self, req: Request) -> dict[str, Any]:
        return api_versions_body()

    async def metadata(self, req: Request) -> dict[str, Any]:
        body = req.body
        be = self.backend
        names: list[str] | None
        if body.topics is None:
            names = None
        else:
            names = [t.name for t in body.topics if getattr(t, "name", None) is not None]
        auto = bool(getattr(body, "allow_auto_topic_creation", True))
        topics = await be.topics(names, auto)
        brokers = await be.brokers()
        # A leader that is not among the live brokers (its process died; the cluster has
        # not moved its partitions yet) is answered as Kafka's broker does: no leader,
        # LEADER_NOT_AVAILABLE, so a client waits for the next leader instead of
        # looking up a broker the answer does not list.
        live = {b.node_id for b in brokers}
        topic_ops = when_asked(
            getattr(body, "include_topic_authorized_operations", False), TOPIC_OPERATIONS
        )
        cluster_ops = when_asked(
            getattr(body, "include_cluster_authorized_operations", False), CLUSTER_OPERATIONS
        )
        return {
            "throttle_time": 0,
            "brokers": [
                {"node_id": b.node_id, "host": b.host, "port": b.port, "rack": None}
                for b in brokers
            ],
            "cluster_id": be.cluster_id,
            "controller_id": be.controller_id(),
            "topics": [
                {
                    "error_code": error_code(t.error) if t.error else ErrorCode.none,
                    "name": t.name,
                    "topic_id": t.topic_id,
                    "is_internal": is_internal(t.name),
                    "partitions": [
                        {
                            "error_code": ErrorCode.none
                            if p.leader in live
                            else ErrorCode.leader_not_available,
                            "partition_index": p.index,
                            "leader_id": p.leader if p.leader in live else -1,
                            "leader_epoch": p.leader_epoch,
                            "replica_nodes": p.replicas,
                            "isr_nodes": p.isr,
                            "offline_replicas": (),
                        }
                        for p in t.partitions
                    ],
                    "topic_authorized_operations": topic_ops,
                }
                for t in topics
            ],
            "cluster_authorized_operations": cluster_ops,
        }

    async def produce(self, req: Request) -> dict[str, Any] | None:
        body = req.body
        acks = int(body.acks)
        timeout_ms = millis(body.timeout)
        be = self.backend
        fail: TieredLogError | None = None
        if body.transactional_id is not None:
            fail = InvalidRecordError("transactions are not supported yet")
        if acks not in (-1, 0, 1):
            fail = InvalidAcksError(f"acks must be -1, 0 or 1, not {acks}")
        # The partitions of one request are appended (and, acks=all, replicated)
        # concurrently: each appears once in a request, so its order is the request's.
        wanted = [(t.name, p) for t in body.topic_data for p in t.partition_data]
        answers = await asyncio.gather(
            *(
                self._produce_one(be, name, int(p.index), p.records, acks, timeout_ms, fail)
                for name, p in wanted
            )
        )
        topics: dict[str, list[dict[str, Any]]] = {}
        for (name, _), answer in zip(wanted, answers, strict=True):
            topics.setdefault(name, []).append(answer)
        if acks == 0:
            return None
        return {
            "responses": [{"name": n, "partition_responses": ps} for n, ps in topics.items()],
            "throttle_time": 0,
        }

    async def _produce_one(
        self,
        be: Backend,
        topic: str,
        partition: int,
        records: bytes | memoryview | None,
        acks: int,
        timeout_ms: int,
        fail: TieredLogError | None,
    ) -> dict[str, Any]:
        out: dict[str, Any] = {
            "index": partition,
            "base_offset": -1,
            "log_append_time": -1,
            "log_start_offset": -1,
            "record_errors": (),
            "error_message": None,
        }
        try:
            if fail is not None:
                raise fail
            if is_internal(topic):
                raise InvalidTopicNameError(f"{topic} is internal: clients cannot produce to it")
            if not records:
                raise InvalidRecordError("the partition's data holds no records")
            done = await be.produce(topic, partition, records, acks, timeout_ms)
            out["base_offset"] = done.base_offset
            out["log_append_time"] = done.log_append_time
            out["error_code"] = ErrorCode.none
            out["log_start_offset"] = be.log_start(topic, partition)
        except TieredLogError as exc:
            code = error_code(exc)
            out["error_code"] = code
            out["error_message"] = error_message(exc)
            if code != ErrorCode.not_leader_or_follower:
                log.info("kafka produce to %s/%d refused: %s", topic, partition, exc.message)
        return out

    async def fetch(self, req: Request) -> dict[str, Any]:
        body = req.body
        be = self.backend
        if int(getattr(body, "replica_id", -1)) >= 0:
            return await self.replica_fetch(req)
        session_id = int(getattr(body, "session_id", 0))
        session_epoch = int(getattr(body, "session_epoch", -1))
        if session_id != 0 and session_epoch > 0:  # an incremental fetch: no sessions here
            return {
                "throttle_time": 0,
                "error_code": ErrorCode.fetch_session_id_not_found,
                "session_id": 0,
                "responses": [],
            }
        state = be.state
        cap = state.settings.max_fetch_bytes
        max_bytes = min(int(getattr(body, "max_bytes", cap)), cap)
        min_bytes = int(body.min_bytes)
        wait_ms = min(max(0, millis(body.max_wait)), MAX_WAIT_MS)
        wanted = [
            (t.topic, int(p.partition), int(p.fetch_offset), int(p.partition_max_bytes))
            for t in body.topics
            for p in t.partitions
        ]

        def enough(round_: tuple[list[dict[str, Any]], int, bool]) -> bool:
            _, total, failed = round_
            return total >= min_bytes or failed or not wanted

        results, _, _ = await state.broker.fetch_many(
            [(t, p) for t, p, _, _ in wanted],
            lambda: self._fetch_round(wanted, max_bytes),
            enough,
            _close_pages,
            wait_ms,
        )
        topics: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition, _, _), r in zip(wanted, results, strict=True):
            page = r.pop("_page", None)
            if page is not None:
                be.count_fetch(topic, page)
            topics.setdefault(topic, []).append(r | {"partition_index": partition})
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.none,
            "session_id": 0,
            "responses": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
        }

    async def replica_fetch(self, req: Request) -> dict[str, Any]:
        """A follower's fetch (``replica_id`` >= 0; see
        :mod:`tiered_log.cluster.protocol`): its partitions answered concurrently, each
        parked at the leader's log end up to ``max_wait_ms``."""
        body = req.body
        wait_ms = min(max(0, millis(body.max_wait)), MAX_WAIT_MS)
        max_bytes = max(1, min(int(body.max_bytes), self.backend.state.settings.max_fetch_bytes))
        wanted = [(t.topic, p) for t in body.topics for p in t.partitions]
        answers = await asyncio.gather(
            *(
                self._replica_one(req.api_version, int(body.replica_id), t, p, wait_ms, max_bytes)
                for t, p in wanted
            )
        )
        topics: dict[str, list[dict[str, Any]]] = {}
        for (topic, _), r in zip(wanted, answers, strict=True):
            topics.setdefault(topic, []).append(r)
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.none,
            "session_id": 0,
            "responses": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
        }

    async def _replica_one(
        self, version: int, replica_id: int, topic: str, p: Any, wait_ms: int, max_bytes: int
    ) -> dict[str, Any]:
        state = self.backend.state
        partition = int(p.partition)
        r = {"partition_index": partition, **no_records()}
        epoch, offset = int(p.current_leader_epoch), int(p.fetch_offset)
        if version < 12:  # this service's fields ride v12's tagged fields
            r["error_code"] = ErrorCode.unsupported_version
            return r
        if state.cluster is None:
            r["error_code"] = ErrorCode.not_leader_or_follower
            return r
        if epoch < 0:
            r["error_code"] = ErrorCode.unknown_leader_epoch
            return r
        if offset < 0:
            r["error_code"] = ErrorCode.offset_out_of_range
            return r
        fetch = ReplicaFetch(
            replica_id,
            epoch,
            offset,
            max(-1, int(p.last_fetched_epoch)),
            max(1, min(int(p.partition_max_bytes), max_bytes)),
            wait_ms,
            empty=int(p.log_start_offset) == offset,
        )
        try:
            ans = await state.broker.replica_fetch(topic, partition, fetch)
        except TieredLogError as exc:
            r["error_code"] = error_code(exc)
            return r
        state.metrics.replica_fetches.inc("kafka")
        r.update(
            high_watermark=ans.high_watermark,
            last_stable_offset=ans.high_watermark,
            log_start_offset=ans.log_start_offset,
            records=ans.data,
        )
        r[EXTRA_TAGS] = ans.kafka_tags()
        if ans.diverging is not None:
            r["diverging_epoch"] = {"epoch": ans.diverging[0], "end_offset": ans.diverging[1]}
        if ans.reset_to is not None:
            r["error_code"] = ErrorCode.offset_moved_to_tiered_storage
        return r

    async def _fetch_round(
        self, wanted: list[tuple[str, int, int, int]], max_bytes: int
    ) -> tuple[list[dict[str, Any]], int, bool]:
        """One read of every partition asked: their answers, the bytes and whether one
        failed (an error answers at once)."""
        be = self.backend
        left = max_bytes
        total = 0
        failed = False
        out = []
        for topic, partition, offset, part_max in wanted:
            r = no_records()
            try:
                plog = await be.state.broker.fetch_log(topic, partition)
                if left <= 0 and total > 0:  # the answer is full: bounds only
                    _fill(r, be.bounds(plog))
                else:
                    page = await be.read(topic, plog, offset, max(1, min(part_max, left)))
                    _fill(r, page)
                    r["_page"] = page
                    total += page.size
                    left -= page.size
            except TieredLogError as exc:
                failed = True
                r["error_code"] = error_code(exc)
                r["log_start_offset"] = be.log_start(topic, partition)
                if not isinstance(exc, TopicNotFoundError):
                    log.debug("kafka fetch of %s/%d: %s", topic, partition, exc.message)
            out.append(r)
        return out, total, failed

    async def list_offsets(self, req: Request) -> dict[str, Any]:
        be = self.backend
        topics = []
        for t in req.body.topics:
            parts = []
            for p in t.partitions:
                index = int(p.partition_index)
                r: dict[str, Any] = {
                    "partition_index": index,
                    "error_code": ErrorCode.none,
                    "timestamp": -1,
                    "offset": -1,
                    "leader_epoch": -1,
                }
                ts = int(p.timestamp)
                try:
                    if ts < 0 and req.api_version < _SPECIAL_SINCE.get(ts, 1 << 15):
                        r["error_code"] = ErrorCode.unsupported_version
                    else:
                        got = await be.list_offset(t.name, index, ts)
                        r["offset"], r["timestamp"], r["leader_epoch"] = got
                except TieredLogError as exc:
                    r["error_code"] = error_code(exc)
                parts.append(r)
            topics.append({"name": t.name, "partitions": parts})
        return {"throttle_time": 0, "topics": topics}


def _close_pages(round_: tuple[list[dict[str, Any]], int, bool]) -> None:
    """Close the pages of a fetch's read that is not sent (it is read again)."""
    for r in round_[0]:
        page = r.get("_page")
        if page is not None:
            page.close()


def no_records() -> dict[str, Any]:
    """A Fetch answer's partition fields before anything is known (no records)."""
    return {
        "error_code": ErrorCode.none,
        "high_watermark": -1,
        "last_stable_offset": -1,
        "log_start_offset": -1,
        "aborted_transactions": None,
        "preferred_read_replica": -1,
        "records": b"",
    }


def _fill(r: dict[str, Any], page: Page) -> None:
    r.update(
        high_watermark=page.high_watermark,
        last_stable_offset=page.high_watermark,
        log_start_offset=page.log_start_offset,
        records=page.records,
    )


__all__ = ["Handlers", "api_versions_body", "no_records"]
