"""Routes of consumer groups (the Kafka listener's groups): ``GET /v1/groups`` (the
groups this node coordinates, and ``kafka_address``, the listener members join
through: ``tiered-log consume --group`` learns it there), ``GET /v1/groups/{group}``
(state, members and their assignments, committed offsets and lag per partition) and
``POST /v1/groups/{group}/offsets`` (a commit outside the group protocol, as
``tiered-log consume --group -o stored`` makes: refused with 409 while the group has
members). A group's
answers come from its coordinator: another node answers 421 ``not_leader`` naming it.

Grants: any token lists and describes groups, and sees the offsets of the topics it may
read; a commit needs ``read`` on every topic it names.

Concurrency: handlers run on the event loop; the offsets partition is loaded in the
broker's read executor (:mod:`tiered_log.kafka.groups.view`).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from ...kafka.groups import coordinator_of
from ...kafka.groups.view import commit_outside, describe_group, list_groups
from ...kafka.listener import kafka_address
from ..deps import Authenticated, JsonContent, State
from ..openapi import errs

router = APIRouter(tags=["groups"])


class GroupSummary(BaseModel):
    group: str
    state: str
    protocol_type: str
    members: int
    coordinator: int = Field(description="the coordinator's node id, as Kafka clients know it")


class GroupList(BaseModel):
    groups: list[GroupSummary]
    kafka_address: str | None = Field(
        description="host:port of this node's Kafka listener, as Kafka clients are told to "
        "reach it (kafka_advertised_host): where a group's members connect; null when it "
        "has none (kafka_port 0)"
    )


class GroupMember(BaseModel):
    member_id: str
    instance_id: str | None
    client_id: str
    assignment: dict[str, list[int]] = Field(description="topic -> assigned partitions")


class GroupOffset(BaseModel):
    topic: str
    partition: int
    committed_offset: int
    metadata: str
    high_watermark: int | None = Field(description="the partition's end here (None: unknown)")
    lag: int | None


class GroupDescription(BaseModel):
    group: str
    state: str
    protocol_type: str
    protocol: str | None
    generation: int
    coordinator: int
    members: list[GroupMember]
    offsets: list[GroupOffset]
    total_lag: int


class OffsetIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    topic: str
    partition: int = Field(ge=0)
    offset: int = Field(ge=0, description="the next offset to consume")


class CommitRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    offsets: list[OffsetIn] = Field(min_length=1)


@router.get("/v1/groups", response_model=GroupList, responses=errs(401, 503))
async def get_groups(_: Authenticated, state: State) -> dict[str, Any]:
    """The groups this node coordinates (in a cluster, ask each node) and the address of
    the Kafka listener they are joined through."""
    return {
        "groups": await list_groups(coordinator_of(state)),
        "kafka_address": kafka_address(state.settings),
    }


@router.get("/v1/groups/{group}", response_model=GroupDescription, responses=errs(401, 404, 503))
async def get_group(group: str, principal: Authenticated, state: State) -> dict[str, Any]:
    """A group's state, members and assignments, committed offsets and lag."""
    out = await describe_group(coordinator_of(state), group)
    out["offsets"] = [r for r in out["offsets"] if principal.allows(r["topic"], "read")]
    out["total_lag"] = sum(r["lag"] or 0 for r in out["offsets"])
    return out


@router.post(
    "/v1/groups/{group}/offsets",
    status_code=204,
    responses=errs(400, 401, 403, 409, 415, 503),
)
async def commit_offsets(
    group: str, body: CommitRequest, principal: Authenticated, _json: JsonContent, state: State
) -> None:
    """Commit offsets for ``group`` outside the group protocol (409 while it has
    members)."""
    for o in body.offsets:
        state.auth.authorize(principal, o.topic, "read")
    await commit_outside(
        coordinator_of(state), group, [(o.topic, o.partition, o.offset) for o in body.offsets]
    )


__all__ = ["router"]
