"""Routes of the cluster: ``GET /v1/cluster`` (nodes, controller, partition leadership),
``POST /v1/cluster/reassign`` (move a node's replicas), ``POST /v1/cluster/restore``
(recreate the bucket's topics in a new cluster) and the followers' replication fetch
``GET /v1/internal/replicate/{topic}/{p}`` (:mod:`tiered_log.cluster.protocol`). A node
started without cluster settings answers every one of them with 404 ``not_a_cluster``
(:class:`~tiered_log.errors.NotAClusterError`), once the caller is authenticated and
before the body is looked at (a single node has nothing to reassign or restore, whatever
the body says).

The replication route needs ``admin`` on the topic when authentication is on (nodes use
the cluster token, ``Settings.cluster_token``).

Concurrency: handlers run on the event loop; the replication answer is the broker's
(computed on its read executor, parked on the loop while it waits for records).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field

from ...cluster.protocol import PATH, REPLICA_BATCHES_PATH, ReplicaFetch
from ...errors import NotAClusterError, OffsetOutOfRangeError
from ...local.ranges import FetchRanges
from ..cluster_view import ClusterView
from ..deps import (
    AdminGrant,
    Authenticated,
    JsonContent,
    PartitionPath,
    State,
    TopicPath,
    partition_log,
)
from ..openapi import errs
from ..state import ServiceState
from ..wire import BINARY
from ..zerocopy import RangesResponse

if TYPE_CHECKING:  # a single node never loads the cluster node (nor its etcd client)
    from ...cluster.node import ClusterNode

router = APIRouter(tags=["cluster"])


NOT_A_CLUSTER = (
    "this node is not part of a cluster: it runs alone (start it with "
    "cluster_etcd, node_id and advertised_url to join or form one)"
)
"""The message of :class:`~tiered_log.errors.NotAClusterError`."""

_NOT_A_CLUSTER = {404: "Not a cluster: this node runs alone (`not_a_cluster`)"}
"""What 404 means on the cluster routes (errs' description of a 404 names topics)."""


def cluster_of(state: ServiceState) -> ClusterNode:
    """The node's cluster part; NotAClusterError (404) when this node is not clustered."""
    node = state.cluster
    if node is None:
        raise NotAClusterError(NOT_A_CLUSTER)
    return node


async def on_a_cluster(request: Request) -> None:
    """Dependency of the cluster routes that take a body: NotAClusterError on a single
    node. Declared after authentication and before the JSON body's checks, so a single
    node says what it is rather than what is wrong with a body it could not use."""
    cluster_of(request.app.state.service)


OnACluster = Annotated[None, Depends(on_a_cluster)]


@router.get("/v1/cluster", responses=errs(401, 404, described=_NOT_A_CLUSTER))
async def describe_cluster(_: Authenticated, state: State) -> ClusterView:
    """The nodes (alive, address), the controller, and per partition its leader, leader
    epoch, replicas and in-sync replicas, as this node last read them from etcd. While
    etcd cannot be reached it answers the last view read, with ``stale`` true and its
    age in ``metadata_age_ms`` (leaders keep serving meanwhile)."""
    return ClusterView.model_validate(cluster_of(state).describe())


class ReassignRequest(BaseModel):
    """``POST /v1/cluster/reassign``."""

    model_config = ConfigDict(extra="forbid")

    from_node: int = Field(ge=0, description="The node whose replicas move (e.g. a dead one).")
    to_node: int = Field(ge=0, description="The live node that takes them.")


@router.post(
    "/v1/cluster/reassign",
    status_code=202,
    responses=errs(400, 401, 403, 404, 503, described=_NOT_A_CLUSTER),
)
async def reassign(
    body: ReassignRequest,
    principal: Authenticated,
    _cluster: OnACluster,
    _json: JsonContent,
    state: State,
) -> dict[str, Any]:
    """Move every replica ``from_node`` holds to ``to_node`` (needs ``admin`` on every
    topic): ``to_node`` joins each such partition's replicas and rebuilds from the bucket
    plus the unshipped tail; ``from_node`` is dropped from the replicas once the others
    are all in sync (the controller does that). Answers at once with the partitions
    started; ``tiered-log cluster status --wait`` follows the rest."""
    state.auth.authorize(principal, "*", "admin")  # "*": a grant on every topic
    node = cluster_of(state)
    started = await asyncio.to_thread(node.reassign, body.from_node, body.to_node)
    return {"from_node": body.from_node, "to_node": body.to_node, "partitions": started}


class RestoreRequest(BaseModel):
    """``POST /v1/cluster/restore``."""

    model_config = ConfigDict(extra="forbid")

    topics: list[str] | None = Field(
        default=None,
        description="Only these topics (default: every topic the bucket keeps "
        "and the cluster lacks).",
    )
    replication_factor: int | None = Field(
        default=None,
        ge=1,
        description="Replicas of each restored partition (default: min(3, live nodes)).",
    )
    min_insync_replicas: int | None = Field(
        default=None, ge=1, description="As for a new topic (default: min(2, replication factor))."
    )
    to_timestamp: int | None = Field(
        default=None,
        ge=0,
        description="Restore each topic to this time (ms since the epoch): only its records "
        "up to the last one at or before it, in new logs (a new topic id).",
    )


@router.post(
    "/v1/cluster/restore", responses=errs(400, 401, 403, 404, 503, described=_NOT_A_CLUSTER)
)
async def restore(
    body: RestoreRequest,
    principal: Authenticated,
    _cluster: OnACluster,
    _json: JsonContent,
    state: State,
) -> dict[str, Any]:
    """Whole-cluster restore from the bucket (needs ``admin`` on every topic): a new
    cluster (fresh etcd, empty disks) pointed at the bucket recreates the topics the
    bucket keeps, each with its own id and config; each partition continues above every
    offset it handed out, and the offsets never shipped are reported lost (per
    partition: ``GET /v1/cluster``'s replication section, topic describe, ``/metrics``).
    Answers once the topics exist: ``restored``, ``skipped`` (with why), ``missing``
    (asked for, not in the bucket)."""
    state.auth.authorize(principal, "*", "admin")
    node = cluster_of(state)
    from ..clustering import restore_cluster_topics  # a single node never loads it

    return await asyncio.to_thread(
        restore_cluster_topics,
        node,
        state.settings,
        state.topics,
        body.topics,
        body.replication_factor,
        body.min_insync_replicas,
        body.to_timestamp,
    )


@router.get(
    PATH,
    response_class=Response,
    responses=errs(400, 401, 403, 404, 409, 421),
    include_in_schema=False,
)
async def replicate(
    topic: TopicPath,
    partition: PartitionPath,
    _: AdminGrant,
    state: State,
    replica_id: Annotated[int, Query(ge=0)],
    leader_epoch: Annotated[int, Query(ge=0)],
    offset: Annotated[int, Query(ge=0)],
    last_fetched_epoch: Annotated[int, Query(ge=-1)] = -1,
    max_bytes: Annotated[int, Query(ge=1, le=1 << 30)] = 4 << 20,
    wait_ms: Annotated[int, Query(ge=0, le=30_000)] = 0,
    empty: Annotated[int, Query(ge=0, le=1)] = 0,
) -> Response:
    """A follower's fetch (see :mod:`tiered_log.cluster.protocol`): the broker's
    :meth:`~tiered_log.broker.Broker.replica_fetch`, parked at the leader's log end up
    to ``wait_ms`` (no thread per waiting follower)."""
    cluster_of(state)
    req = ReplicaFetch(
        replica_id, leader_epoch, offset, last_fetched_epoch, max_bytes, wait_ms, bool(empty)
    )
    ans = await state.broker.replica_fetch(topic, partition, req)
    state.metrics.replica_fetches.inc("http")
    if isinstance(ans.data, FetchRanges):  # sent from the files (zerocopy.py)
        return RangesResponse(ans.data, media_type=BINARY, headers=ans.headers())
    return Response(ans.data, media_type=BINARY, headers=ans.headers())


@router.get(
    REPLICA_BATCHES_PATH,
    response_class=Response,
    responses=errs(400, 401, 403, 404, 416),
    include_in_schema=False,
)
async def replica_batches(
    topic: TopicPath,
    partition: PartitionPath,
    _: AdminGrant,
    state: State,
    offset: Annotated[int, Query(ge=0)],
    end: Annotated[int, Query(ge=1)],
) -> Response:
    """This node's own replica's local batches of exactly ``[offset, end)``, each
    verified (:func:`~tiered_log.partition.scrub.local_batches`): what another node's
    scrubber repairs a damaged segment or archived copy from. 416 when this replica does
    not hold them all, whole and good. Any role; changes nothing."""
    from ...partition.scrub import local_batches

    cluster_of(state)
    plog = await partition_log(state, topic, partition)
    if end <= offset:
        raise OffsetOutOfRangeError(f"end {end} must be above offset {offset}")
    data = await asyncio.to_thread(local_batches, plog, offset, end)
    if data is None:
        segs = plog.local_segments()
        raise OffsetOutOfRangeError(
            f"this replica does not hold the batches [{offset}, {end}) whole and good",
            log_start=segs[0].base_offset if segs else 0,
            next_offset=segs[-1].next_offset if segs else 0,
        )
    return Response(data, media_type=BINARY)


__all__ = ["router"]
