"""The admin and offset APIs Kafka's tools call: CreateTopics (API key 19, versions 2-7),
DeleteTopics (20, 1-6), DeleteRecords (21, 0-2), OffsetForLeaderEpoch (23, 2-4),
DescribeLogDirs (35, 1-4),
CreatePartitions (37, 0-3) and DescribeCluster (60, 0-2).
The versions are Kafka 4.0's (the older ones are gone from Kafka's message specs, and
from kio).

CreateTopics creates each topic as ``POST /v1/topics`` and auto-creation do
(:meth:`Backend.create_topic <tiered_log.kafka.backend.Backend.create_topic>`): on a
single node in its topic manager, in a cluster through the metadata store, so any node
takes the request (as Kafka's brokers forward it to the controller). Each topic is
checked first, in this order, each refusal a Kafka code with a message: a name used
twice in the request (INVALID_REQUEST), a bad name (INVALID_TOPIC_EXCEPTION), the
internal ``__consumer_offsets`` or manual replica assignments (INVALID_REQUEST), the
partition count (INVALID_PARTITIONS; -1 is the default, 1), the replication factor
(INVALID_REPLICATION_FACTOR; -1 is the default, ``min(3, live nodes)`` in a cluster, 1
on a single node, which takes no other), the configs under Kafka's names
(:data:`~tiered_log.kafka.configs.KAFKA_NAMES`, plus ``min.insync.replicas``, and
``cleanup.policy=delete`` and ``compression.type=producer``, the one value of each
here: :data:`~tiered_log.kafka.configs.FIXED`; INVALID_CONFIG), then whether it exists
(TOPIC_ALREADY_EXISTS). ``validate_only`` stops there. Versions 5+ answer the partition
count, the replication factor and the topic's configs (as DescribeConfigs describes
them), 7 its id.

DeleteTopics deletes each topic as ``DELETE /v1/topics/{t}`` does
(:func:`tiered_log.service.topic_delete.delete_topic`), by name, or (v6) by topic id: a
missing name is UNKNOWN_TOPIC_OR_PARTITION, a missing id UNKNOWN_TOPIC_ID; the internal
``__consumer_offsets`` is refused (INVALID_REQUEST): the group coordinator owns it.

DeleteRecords moves each partition's log start up to the offset given (-1: the high
watermark), at its leader (NOT_LEADER_OR_FOLLOWER elsewhere), as ``POST
.../partitions/{p}/delete-records`` does (:meth:`Broker.delete_records
<tiered_log.broker.broker.Broker.delete_records>`): above the high watermark is
OFFSET_OUT_OF_RANGE; the answer, once the ISR's followers have the new start (they take
it from their fetch answers), carries the log start as its low watermark.

CreatePartitions grows each topic to its ``count`` as ``PATCH /v1/topics/{t}``
``{"partitions": N}`` does (:func:`tiered_log.service.topic_alter.add_partitions`):
a count not above the current one is INVALID_PARTITIONS (as Kafka's "topic currently
has N partitions"), manual assignments INVALID_REPLICA_ASSIGNMENT (replicas are placed
over the live nodes), an unknown topic UNKNOWN_TOPIC_OR_PARTITION, the internal
``__consumer_offsets`` INVALID_REQUEST; ``validate_only`` checks only.

OffsetForLeaderEpoch answers, for each partition and leader epoch asked, where that
epoch ends in the leader's log, from the partition's leader-epoch file
(:meth:`LeaderEpochCache.end_offset_for
<tiered_log.local.leader_epoch.LeaderEpochCache.end_offset_for>`, Kafka's semantics: the
current epoch ends at the log end; an older one at the start of the first epoch above
it; one below the oldest known at the oldest's start; an unknown one, or -1: epoch -1,
offset -1). Consumers (librdkafka) ask it after a leader change to check that their
position was not truncated away. As Kafka's broker, ``current_leader_epoch`` (when not
-1) is checked against the partition's epoch as this node knows it first: older is
FENCED_LEADER_EPOCH, newer UNKNOWN_LEADER_EPOCH; then only the leader answers
(NOT_LEADER_OR_FOLLOWER elsewhere). A single node leads every partition in epoch 0 (what
its Metadata says); its log records no epochs (its batches carry -1), so epoch 0 ends at
its log end there.

DescribeCluster answers the cluster's id, the controller id and the brokers exactly as
Metadata does (:meth:`Backend.brokers <tiered_log.kafka.backend.Backend.brokers>`: this
node, and in a cluster every live node with a Kafka listener; none is fenced), endpoint
type 1 (brokers). Endpoint type 2 (KRaft's controllers, which this service does not
have) is UNSUPPORTED_ENDPOINT_TYPE, as a Kafka broker answers it. The cluster's
authorized operations, when asked, are :mod:`tiered_log.kafka.operations`'.

DescribeLogDirs describes the one log directory, the data directory: each partition
replica held there (in a cluster, those this node is a replica of; of the topics and
partitions asked, null: all, an unknown one left out, as Kafka does), its size on the
local disk (its local segments: the bucket's copies are not in the directory) and its
offset lag as Kafka computes it for a current log (the high watermark minus the log end,
at least 0); v4 adds the file system's total and usable bytes.

Concurrency: coroutines of the listener's loop; checks that read etcd, the creation and
deletion, and the leader-epoch lookups run in worker threads.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode
from pydantic import ValidationError

from ..broker.topics import MAX_PARTITIONS, validate_topic_name
from ..errors import (
    InvalidArgumentError,
    InvalidTopicNameError,
    NotLeaderError,
    OffsetOutOfRangeError,
    TieredLogError,
    TopicExistsError,
    TopicNotFoundError,
)
from ..local.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
from ..local.log import LogConfig
from ..service.topic_alter import add_partitions
from ..service.topic_delete import delete_topic
from ..topic_config import TopicConfig
from .backend import SINGLE_NODE_EPOCH, Backend, topic_uuid
from .configs import (
    DEFAULT_PARTITIONS,
    FIXED,
    KAFKA_NAMES,
    REMOTE_COPY_DISABLE,
    REMOTE_DELETE_ON_DISABLE,
    check_fixed,
    default_replication_factor,
    described,
    kafka_message,
    setting_value,
)
from .errors import error_code, error_message
from .groups.offsets import is_internal
from .messages import Request
from .operations import CLUSTER_OPERATIONS, when_asked

log = logging.getLogger("tiered_log.kafka")

CREATE_TOPICS = 19
DELETE_TOPICS = 20
DELETE_RECORDS = 21
OFFSET_FOR_LEADER_EPOCH = 23
DESCRIBE_LOG_DIRS = 35
CREATE_PARTITIONS = 37
DESCRIBE_CLUSTER = 60
ADMIN_APIS: dict[int, tuple[str, int, int]] = {
    CREATE_TOPICS: ("create_topics", 2, 7),
    DELETE_TOPICS: ("delete_topics", 1, 6),
    DELETE_RECORDS: ("delete_records", 0, 2),
    CREATE_PARTITIONS: ("create_partitions", 0, 3),
    OFFSET_FOR_LEADER_EPOCH: ("offset_for_leader_epoch", 2, 4),
    DESCRIBE_CLUSTER: ("describe_cluster", 0, 2),
    DESCRIBE_LOG_DIRS: ("describe_log_dirs", 1, 4),
}
"""The admin APIs served: key -> (kio's module name, first and last version)."""

DEFAULT = -1
"""CreateTopics' ``num_partitions``/``replication_factor`` for the broker's default."""
MIN_INSYNC_REPLICAS = "min.insync.replicas"
NO_TOPIC_ID = uuid.UUID(int=0)
BROKERS_ENDPOINT = 1
"""DescribeCluster's endpoint type of brokers (2, controllers, is KRaft's quorum)."""


class Refused(Exception):
    """A topic or partition refused with ``code`` and ``message`` (a handler's own)."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class TopicPlan:
    """A CreateTopics topic once checked: what is created (``replication_factor`` /
    ``min_insync_replicas`` None: the cluster's default, ``rf`` what that comes to)."""

    name: str
    partitions: int
    overrides: dict[str, Any]
    config: TopicConfig
    rf: int
    replication_factor: int | None
    min_insync_replicas: int | None


def topic_overrides(configs: Any) -> tuple[dict[str, Any], int | None]:
    """A CreateTopics topic's ``configs`` (Kafka's names) as TopicConfig overrides and
    ``min.insync.replicas`` (None: not given); Refused (INVALID_CONFIG) naming the first
    config that is unknown or has a bad value."""
    changes: dict[str, Any] = {}
    min_isr: int | None = None
    for c in configs:
        name, raw = c.name, c.value
        try:
            if name == MIN_INSYNC_REPLICAS:
                if raw is None or not raw.strip().isdigit() or int(raw) < 1:
                    raise InvalidArgumentError(f"{name}: {raw!r} is not an integer >= 1")
                min_isr = int(raw)
            elif name in FIXED:
                check_fixed(name, raw)
            elif name in (REMOTE_COPY_DISABLE, REMOTE_DELETE_ON_DISABLE):
                flag = (raw or "").strip().lower()
                if flag not in ("true", "false"):
                    raise InvalidArgumentError(f"{name}: {raw!r} is not true or false")
                if name == REMOTE_COPY_DISABLE and flag == "true":
                    changes["remote_enabled"] = False  # nothing is ever copied
            elif name in KAFKA_NAMES:
                changes[KAFKA_NAMES[name].setting] = setting_value(name, raw)
            else:
                raise InvalidArgumentError(
                    f"{name}: not a topic config this broker supports; it supports "
                    f"{', '.join(KAFKA_NAMES)}, {MIN_INSYNC_REPLICAS}, {', '.join(FIXED)}, "
                    f"{REMOTE_COPY_DISABLE}, {REMOTE_DELETE_ON_DISABLE}"
                )
        except InvalidArgumentError as exc:
            raise Refused(ErrorCode.invalid_config, exc.message) from None
    return changes, min_isr


def refusal(exc: Refused | TieredLogError, bad_argument: ErrorCode) -> tuple[ErrorCode, str]:
    """The code and message a CreateTopics or CreatePartitions topic answers ``exc``
    with: a handler's own Refused as it says, a name taken, unknown or bad as Kafka
    names them, another bad argument ``bad_argument``, the rest as every API maps it."""
    if isinstance(exc, Refused):
        return exc.code, exc.message
    if isinstance(exc, TopicExistsError):
        return ErrorCode.topic_already_exists, exc.message
    if isinstance(exc, TopicNotFoundError):
        return ErrorCode.unknown_topic_or_partition, exc.message
    if isinstance(exc, InvalidTopicNameError):
        return ErrorCode.invalid_topic_exception, exc.message
    if isinstance(exc, InvalidArgumentError):
        return bad_argument, kafka_message(exc.message)
    return error_code(exc), error_message(exc)


class AdminHandlers:
    """CreateTopics, DeleteTopics and OffsetForLeaderEpoch over one backend. Event-loop
    thread only."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def handlers(self) -> dict[int, Callable[[Request], Awaitable[dict[str, Any]]]]:
        """The handler of each admin API key."""
        return {
            CREATE_TOPICS: self.create_topics,
            DELETE_TOPICS: self.delete_topics,
            DELETE_RECORDS: self.delete_records,
            CREATE_PARTITIONS: self.create_partitions,
            OFFSET_FOR_LEADER_EPOCH: self.offset_for_leader_epoch,
            DESCRIBE_CLUSTER: self.describe_cluster,
            DESCRIBE_LOG_DIRS: self.describe_log_dirs,
        }

    # ---- CreateTopics --------------------------------------------------------------------

    async def create_topics(self, req: Request) -> dict[str, Any]:
        body = req.body
        validate_only = bool(getattr(body, "validate_only", False))
        names = [t.name for t in body.topics]
        twice = {n for n in names if names.count(n) > 1}
        results = [await self._create_one(t, validate_only, twice) for t in body.topics]
        return {"throttle_time": 0, "topics": results}

    async def _create_one(self, t: Any, validate_only: bool, twice: set[str]) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": t.name,
            "topic_id": NO_TOPIC_ID,
            "error_code": ErrorCode.none,
            "error_message": None,
            "num_partitions": -1,
            "replication_factor": -1,
            "configs": (),
        }
        try:
            if t.name in twice:
                raise Refused(ErrorCode.invalid_request, f"topic {t.name} appears more than once")
            plan = await asyncio.to_thread(self._plan, t)
            if not validate_only:
                await self.backend.create_topic(
                    plan.name,
                    plan.partitions,
                    plan.overrides,
                    plan.replication_factor,
                    plan.min_insync_replicas,
                    exist_ok=False,
                )
                out["topic_id"] = await asyncio.to_thread(self._topic_id, plan.name)
                log.info("kafka CreateTopics: created %s", plan.name)
            defaults = self.backend.state.settings.topic_defaults
            out.update(
                num_partitions=plan.partitions,
                replication_factor=plan.rf,
                configs=described(plan.config, defaults, None),
            )
        except (Refused, TieredLogError) as exc:  # a bad argument: a limit met meanwhile
            out["error_code"], out["error_message"] = refusal(exc, ErrorCode.invalid_request)
        return out

    # ---- DeleteRecords -----------------------------------------------------------------

    async def delete_records(self, req: Request) -> dict[str, Any]:
        topics = []
        for t in req.body.topics:
            parts = [
                await self._delete_below(t.name, int(p.partition_index), int(p.offset))
                for p in t.partitions
            ]
            topics.append({"name": t.name, "partitions": parts})
        return {"throttle_time": 0, "topics": topics}

    async def _delete_below(self, topic: str, partition: int, offset: int) -> dict[str, Any]:
        out: dict[str, Any] = {
            "partition_index": partition,
            "low_watermark": -1,
            "error_code": ErrorCode.none,
        }
        try:
            if offset < DEFAULT:
                raise OffsetOutOfRangeError(f"offset {offset} is negative (-1: the high watermark)")
            broker = self.backend.state.broker
            out["low_watermark"] = await broker.delete_records(topic, partition, offset)
            log.info("kafka DeleteRecords: %s-%d below %d", topic, partition, offset)
        except TieredLogError as exc:
            out["error_code"] = error_code(exc)
        return out

    # ---- CreatePartitions -----------------------------------------------------------------

    async def create_partitions(self, req: Request) -> dict[str, Any]:
        body = req.body
        validate_only = bool(body.validate_only)
        names = [t.name for t in body.topics]
        twice = {n for n in names if names.count(n) > 1}
        results = [await self._grow_one(t, validate_only, twice) for t in body.topics]
        return {"throttle_time": 0, "results": results}

    async def _grow_one(self, t: Any, validate_only: bool, twice: set[str]) -> dict[str, Any]:
        out: dict[str, Any] = {"name": t.name, "error_code": ErrorCode.none, "error_message": None}
        try:
            if t.name in twice:
                raise Refused(ErrorCode.invalid_request, f"topic {t.name} appears more than once")
            if t.assignments:
                raise Refused(
                    ErrorCode.invalid_replica_assignment,
                    "manual replica assignments are not supported: give the count only "
                    "(the new partitions' replicas are placed over the live nodes)",
                )
            if is_internal(t.name):
                raise Refused(
                    ErrorCode.invalid_request,
                    f"{t.name} is internal: the group coordinator owns its partitions",
                )
            state = self.backend.state
            was = await asyncio.to_thread(
                add_partitions, state, t.name, int(t.count), validate_only=validate_only
            )
            if not validate_only:
                log.info("kafka CreatePartitions: %s from %d to %d", t.name, was, t.count)
        except (Refused, TieredLogError) as exc:  # a bad argument: the count
            out["error_code"], out["error_message"] = refusal(exc, ErrorCode.invalid_partitions)
        return out

    def _plan(self, t: Any) -> TopicPlan:
        """Check a CreateTopics topic (see the module docstring for the order); in a
        worker thread (a cluster's checks read etcd)."""
        state = self.backend.state
        name = validate_topic_name(t.name)
        state.topics.check_writable(f"cannot create topic {name!r}")  # a read-only mount
        if is_internal(name):
            raise Refused(
                ErrorCode.invalid_request,
                f"{name} is internal: the group coordinator creates it",
            )
        if t.assignments:
            raise Refused(
                ErrorCode.invalid_request,
                "manual replica assignments are not supported: give num_partitions and "
                "replication_factor (replicas are placed over the live nodes)",
            )
        partitions = int(t.num_partitions)
        if partitions == DEFAULT:
            partitions = DEFAULT_PARTITIONS
        if not 1 <= partitions <= MAX_PARTITIONS:
            raise Refused(
                ErrorCode.invalid_partitions,
                f"num_partitions must be from 1 to {MAX_PARTITIONS} (or -1: the default, "
                f"{DEFAULT_PARTITIONS}), not {partitions}",
            )
        asked_rf = int(t.replication_factor)
        overrides, min_isr = topic_overrides(t.configs)
        try:
            config = state.settings.topic_defaults.with_overrides(overrides)
            LogConfig.of(config)
        except ValidationError as exc:
            err = exc.errors(include_url=False, include_input=False)[0]
            where = ".".join(str(p) for p in err.get("loc", ())) or "config"
            raise Refused(
                ErrorCode.invalid_config, kafka_message(f"invalid {where}: {err['msg']}")
            ) from None
        cluster = state.cluster
        if cluster is None:
            if asked_rf not in (DEFAULT, 1):
                raise Refused(
                    ErrorCode.invalid_replication_factor,
                    f"replication factor {asked_rf}: this is a single node, which keeps 1 copy",
                )
            if min_isr not in (None, 1):
                raise Refused(
                    ErrorCode.invalid_config,
                    f"{MIN_INSYNC_REPLICAS} {min_isr}: this is a single node, which keeps 1 copy",
                )
            if state.topics.exists(name):
                raise TopicExistsError(f"topic {name!r} exists already")
            limit = state.settings.max_total_partitions
            if state.topics.total_partitions + partitions > limit:
                raise Refused(
                    ErrorCode.invalid_partitions,
                    f"creating {partitions} partition(s) would pass this server's limit of "
                    f"{limit} partitions",
                )
            return TopicPlan(name, partitions, overrides, config, 1, None, None)
        live = len(cluster.membership.live_nodes())
        if asked_rf == DEFAULT:
            rf, given_rf = default_replication_factor(live), None
        elif 1 <= asked_rf <= live:
            rf, given_rf = asked_rf, asked_rf
        else:
            raise Refused(
                ErrorCode.invalid_replication_factor,
                f"replication factor {asked_rf} must be from 1 to the {live} live nodes "
                "(or -1: the default, min(3, live nodes))",
            )
        if min_isr is not None and min_isr > rf:
            raise Refused(
                ErrorCode.invalid_config,
                f"{MIN_INSYNC_REPLICAS} {min_isr} is more than the replication factor {rf}",
            )
        if cluster.metadata.topic(name) is not None:
            raise TopicExistsError(f"topic {name!r} exists already")
        return TopicPlan(name, partitions, overrides, config, rf, given_rf, min_isr)

    def _topic_id(self, name: str) -> uuid.UUID:
        """The Kafka topic id of a topic just created (in a worker thread)."""
        state = self.backend.state
        cluster = state.cluster
        meta = cluster.topic_meta(name) if cluster is not None else None
        if meta is not None and meta.topic_id:
            return topic_uuid(meta.topic_id)
        try:
            return topic_uuid(state.topics.get(name).meta.topic_id)
        except TieredLogError:
            return NO_TOPIC_ID

    # ---- DeleteTopics --------------------------------------------------------------------

    async def delete_topics(self, req: Request) -> dict[str, Any]:
        body = req.body
        wanted: list[tuple[str | None, uuid.UUID | None]]
        if hasattr(body, "topic_names"):
            wanted = [(n, None) for n in body.topic_names]
        else:
            wanted = [(t.name, t.topic_id) for t in body.topics]
        results = [await self._delete_one(name, tid) for name, tid in wanted]
        return {"throttle_time": 0, "responses": results}

    async def _delete_one(self, name: str | None, tid: uuid.UUID | None) -> dict[str, Any]:
        be = self.backend
        by_id = tid is not None and tid != NO_TOPIC_ID
        out: dict[str, Any] = {
            "name": name,
            "topic_id": tid if by_id else NO_TOPIC_ID,
            "error_code": ErrorCode.none,
            "error_message": None,
        }
        try:
            if name is not None and by_id:
                raise Refused(ErrorCode.invalid_request, "give a topic's name or its id, not both")
            if name is None:
                if not by_id:
                    raise Refused(ErrorCode.invalid_request, "a topic needs a name or an id")
                name = self._name_of(tid)
                out["name"] = name
            validate_topic_name(name)
            if is_internal(name):
                raise Refused(
                    ErrorCode.invalid_request,
                    f"{name} is internal: the group coordinator keeps the committed offsets there",
                )
            await be.state.broker.partition(name, 0)  # a cluster looks at etcd on a miss
            out["topic_id"] = topic_uuid(be.state.topics.get(name).meta.topic_id)
            await delete_topic(be.state, name)
            log.info("kafka DeleteTopics: deleted %s", name)
        except Refused as exc:
            out["error_code"], out["error_message"] = exc.code, exc.message
        except TieredLogError as exc:
            out["error_code"], out["error_message"] = error_code(exc), error_message(exc)
        return out

    def _name_of(self, tid: uuid.UUID | None) -> str:
        """The name of the topic whose Kafka id is ``tid``; Refused (UNKNOWN_TOPIC_ID)."""
        for t in self.backend.state.topics.list():
            if topic_uuid(t.meta.topic_id) == tid:
                return t.name
        raise Refused(ErrorCode.unknown_topic_id, f"no topic has the id {tid}")

    # ---- DescribeCluster -----------------------------------------------------------------

    async def describe_cluster(self, req: Request) -> dict[str, Any]:
        be = self.backend
        out: dict[str, Any] = {
            "throttle_time": 0,
            "error_code": ErrorCode.none,
            "error_message": None,
            "endpoint_type": BROKERS_ENDPOINT,
            "cluster_id": be.cluster_id,
            "controller_id": be.controller_id(),
            "brokers": [],
            "cluster_authorized_operations": when_asked(
                getattr(req.body, "include_cluster_authorized_operations", False),
                CLUSTER_OPERATIONS,
            ),
        }
        endpoint = int(getattr(req.body, "endpoint_type", BROKERS_ENDPOINT))
        if endpoint != BROKERS_ENDPOINT:
            out["error_code"] = ErrorCode.unsupported_endpoint_type
            out["error_message"] = (
                f"endpoint type {endpoint} is not served: a broker describes brokers (1); "
                "there are no separate controllers here"
            )
            return out
        out["brokers"] = [
            {"broker_id": b.node_id, "host": b.host, "port": b.port, "is_fenced": False}
            for b in await be.brokers()
        ]
        return out

    # ---- DescribeLogDirs -----------------------------------------------------------------

    async def describe_log_dirs(self, req: Request) -> dict[str, Any]:
        topics = req.body.topics
        wanted = None if topics is None else {t.topic: set(t.partitions) for t in topics}
        result = await asyncio.to_thread(self._log_dir, wanted)
        return {"throttle_time": 0, "error_code": ErrorCode.none, "results": [result]}

    def _log_dir(self, wanted: dict[str, set[int]] | None) -> dict[str, Any]:
        """The data directory's answer: each partition replica held here (of ``wanted``,
        None: all) with its size and offset lag (see the module docstring). In a worker
        thread: the cluster's view is read under its lock, the disk is asked its size."""
        state = self.backend.state
        cluster = state.cluster
        me = self.backend.node_id
        data_dir = state.settings.data_dir.resolve()
        topics = []
        for t in sorted(state.topics.list(), key=lambda t: t.name):
            asked = None if wanted is None else wanted.get(t.name)
            if wanted is not None and asked is None:
                continue
            parts = []
            for index, plog in enumerate(t.logs):
                if asked is not None and index not in asked:
                    continue
                if cluster is not None:
                    st = cluster.partition_state(t.name, index)
                    if st is None or me not in st.replicas:
                        continue  # not a replica here
                parts.append(
                    {
                        "partition_index": index,
                        "partition_size": sum(s.size for s in plog.local_segments()),
                        "offset_lag": max(plog.high_watermark - plog.next_offset, 0),
                        "is_future_key": False,
                    }
                )
            if parts:
                topics.append({"name": t.name, "partitions": parts})
        usage = shutil.disk_usage(data_dir)
        return {
            "error_code": ErrorCode.none,
            "log_dir": str(data_dir),
            "topics": topics,
            "total_bytes": usage.total,
            "usable_bytes": usage.free,
        }

    # ---- OffsetForLeaderEpoch ------------------------------------------------------------

    async def offset_for_leader_epoch(self, req: Request) -> dict[str, Any]:
        wanted = [
            (t.topic, int(p.partition), int(p.current_leader_epoch), int(p.leader_epoch))
            for t in req.body.topics
            for p in t.partitions
        ]
        answers = await asyncio.to_thread(lambda: [self._epoch_end(*w) for w in wanted])
        topics: dict[str, list[dict[str, Any]]] = {}
        for (topic, _, _, _), answer in zip(wanted, answers, strict=True):
            topics.setdefault(topic, []).append(answer)
        return {
            "throttle_time": 0,
            "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
        }

    def _epoch_end(self, topic: str, partition: int, current: int, epoch: int) -> dict[str, Any]:
        """One partition's answer (in a worker thread: the cache's lock may be held
        across its file's rewrite)."""
        state = self.backend.state
        out: dict[str, Any] = {
            "partition": partition,
            "error_code": ErrorCode.none,
            "leader_epoch": UNDEFINED_EPOCH,
            "end_offset": UNDEFINED_EPOCH_OFFSET,
        }
        try:
            plog = state.topics.partition(topic, partition)
            cluster = state.cluster
            leads = True
            if cluster is None:
                local_epoch = SINGLE_NODE_EPOCH
            else:
                try:
                    local_epoch = cluster.leader_of(topic, partition).leader_epoch
                except NotLeaderError:
                    leads = False
                    st = cluster.partition_state(topic, partition)
                    local_epoch = st.leader_epoch if st is not None else UNDEFINED_EPOCH
            if current != UNDEFINED_EPOCH and local_epoch > current:
                raise Refused(ErrorCode.fenced_leader_epoch, "")
            if current != UNDEFINED_EPOCH and local_epoch < current:
                raise Refused(ErrorCode.unknown_leader_epoch, "")
            if not leads:
                raise Refused(ErrorCode.not_leader_or_follower, "")
            if (
                cluster is None
                and epoch == SINGLE_NODE_EPOCH
                and plog.latest_leader_epoch == UNDEFINED_EPOCH
            ):
                found, end = epoch, plog.next_offset
            else:
                found, end = plog.end_offset_for_epoch(epoch)
            out["leader_epoch"], out["end_offset"] = found, end
        except Refused as exc:
            out["error_code"] = exc.code
        except TopicNotFoundError:
            out["error_code"] = ErrorCode.unknown_topic_or_partition
        except TieredLogError as exc:
            out["error_code"] = error_code(exc)
        return out


__all__ = [
    "ADMIN_APIS",
    "CREATE_TOPICS",
    "DELETE_TOPICS",
    "DESCRIBE_CLUSTER",
    "DESCRIBE_LOG_DIRS",
    "OFFSET_FOR_LEADER_EPOCH",
    "AdminHandlers",
    "Refused",
    "TopicPlan",
    "topic_overrides",
]
