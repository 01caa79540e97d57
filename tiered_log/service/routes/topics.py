"""Routes of topics: create (``POST /v1/topics``), list, describe, alter (``PATCH``) and
delete a topic.

Creating needs ``admin`` on the new name (checked in the handler: the name is in the
body, not the path); describe needs ``read``, alter and delete ``admin``; the list shows
the topics the token has any grant on.

Concurrency: handlers run on the event loop; topic creation, deletion and describing
(which reads every partition's bounds) run in worker threads.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter
from fastapi.responses import Response

from ...broker.topics import Topic, partition_bounds, validate_topic_name
from ...errors import (
    InvalidArgumentError,
    LogClosedError,
    PartitionNotReadyError,
)
from ...kafka.groups.offsets import is_internal
from .. import topic_alter, topic_delete
from ..deps import AdminGrant, Authenticated, JsonContent, ReadGrant, State, TopicPath
from ..openapi import errs
from ..wire import AlterTopicRequest, CreateTopicRequest, TopicDescription, TopicList
from .partitions import tiering_fields

if TYPE_CHECKING:
    from ...cluster.node import ClusterNode
    from ...remote.scrub import Scrubber

router = APIRouter(tags=["topics"])


def _describe(
    topic: Topic, cluster: ClusterNode | None = None, scrubber: Scrubber | None = None
) -> dict[str, Any]:
    """A topic's description: its metadata and each open partition's bounds, remote
    damage and what this node's scrubber last found there (``anomalies``, when a pass
    found any) (in a worker thread: reads the logs); in a cluster also the replication
    factor and each partition's leader, epoch, replicas and ISR (as this node last read
    them)."""
    infos = []
    for i, plog in enumerate(topic.logs):
        not_ready = None
        try:
            try:
                b = partition_bounds(plog)
            except PartitionNotReadyError as exc:  # a new leader reading the bucket
                not_ready, b = exc.message, plog.bounds()
        except LogClosedError:
            continue
        info = {
            "partition": i,
            **b.as_dict(),
            **tiering_fields(plog, b),
            "remote_damage": plog.remote_damage(),
        }
        if not_ready is not None:
            info["not_ready"] = not_ready
        lost = plog.lost_offsets()
        if lost:
            info["lost_offsets"] = lost
        found = scrubber.partition_anomalies(topic.name, i) if scrubber is not None else []
        if found:
            info["anomalies"] = found
        st = cluster.partition_state(topic.name, i) if cluster is not None else None
        if st is not None:
            info.update(
                leader=st.leader,
                leader_epoch=st.leader_epoch,
                replicas=list(st.replicas),
                isr=list(st.isr),
            )
        infos.append(info)
    out = {**topic.meta.as_dict(), "partition_info": infos}
    meta = cluster.topic_meta(topic.name) if cluster is not None else None
    if meta is not None:
        out.update(
            replication_factor=meta.replication_factor, min_insync_replicas=meta.min_insync_replicas
        )
    return out


@router.post(
    "/v1/topics",
    status_code=201,
    response_model=TopicDescription,
    response_model_exclude_unset=True,
    responses=errs(400, 401, 403, 409, 413, 415, 503),
)
async def create_topic(
    body: CreateTopicRequest, principal: Authenticated, _json: JsonContent, state: State
) -> dict[str, Any]:
    """Create a topic (needs ``admin`` on its name). Per-topic config overrides the
    server's topic defaults."""
    validate_topic_name(body.name)
    state.auth.authorize(principal, body.name, "admin")
    overrides = body.config.model_dump(exclude_unset=True)
    if state.cluster is not None:
        from ..clustering import create_cluster_topic  # a single node never loads it

        await asyncio.to_thread(
            create_cluster_topic,
            state.cluster,
            state.settings,
            body.name,
            body.partitions,
            overrides,
            body.replication_factor,
            body.min_insync_replicas,
        )
        return await asyncio.to_thread(
            _describe, state.topics.get(body.name), state.cluster, state.scrubber
        )
    for name in ("replication_factor", "min_insync_replicas"):
        if (getattr(body, name) or 1) != 1:
            raise InvalidArgumentError(
                f"{name} {getattr(body, name)} needs a cluster: this "
                "is a single node (start it with cluster_etcd)"
            )
    topic = await asyncio.to_thread(state.topics.create, body.name, body.partitions, overrides)
    return await asyncio.to_thread(_describe, topic)


@router.get("/v1/topics", response_model=TopicList, responses=errs(401))
async def list_topics(
    principal: Authenticated, state: State, internal: bool = False
) -> dict[str, Any]:
    """Every topic the token has any grant on (the internal ``__consumer_offsets`` only
    with ``?internal=true``)."""
    return {
        "topics": [
            t.meta.as_dict()
            for t in state.topics.list()
            if principal.allows_any(t.name) and (internal or not is_internal(t.name))
        ]
    }


@router.get(
    "/v1/topics/{topic}",
    response_model=TopicDescription,
    response_model_exclude_unset=True,
    responses=errs(400, 401, 403, 404),
)
async def describe_topic(topic: TopicPath, _: ReadGrant, state: State) -> dict[str, Any]:
    """A topic's config and the bounds of each partition."""
    t = state.topics.get(topic)
    return await asyncio.to_thread(_describe, t, state.cluster, state.scrubber)


@router.patch(
    "/v1/topics/{topic}",
    response_model=TopicDescription,
    response_model_exclude_unset=True,
    responses=errs(400, 401, 403, 404, 415, 503),
)
async def alter_topic(
    topic: TopicPath, body: AlterTopicRequest, _: AdminGrant, _json: JsonContent, state: State
) -> dict[str, Any]:
    """Change a topic's settings while it serves (needs ``admin``): ``config`` sets,
    ``delete_config`` resets to the server's defaults; every open partition takes them
    at once (retention at its next round, segment settings for segments rolled from
    then on, compression for segments shipped from then on) and a restart keeps them.
    Turning ``remote_enabled`` off needs ``remote_disable_policy``. ``partitions`` grows
    the topic to that many partitions (the count only grows). Answers the topic's new
    description."""
    changes = body.config.model_dump(exclude_unset=True)
    if body.partitions is not None:
        await asyncio.to_thread(topic_alter.add_partitions, state, topic, body.partitions)
    if changes or body.delete_config or body.partitions is None:
        await asyncio.to_thread(
            topic_alter.alter_topic,
            state,
            topic,
            changes,
            body.delete_config,
            remote_disable_policy=body.remote_disable_policy,
        )
    return await asyncio.to_thread(
        _describe, state.topics.get(topic), state.cluster, state.scrubber
    )


@router.delete(
    "/v1/topics/{topic}",
    status_code=204,
    response_class=Response,
    responses=errs(400, 401, 403, 404),
)
async def delete_topic(topic: TopicPath, _: AdminGrant, state: State) -> Response:
    """Delete a topic and all of its records."""
    await topic_delete.delete_topic(state, topic)
    return Response(status_code=204)


__all__ = ["router"]
