"""The groups as the HTTP API and the CLI show them: each group's state, members and
their assignments, committed offsets and lag (the partition's high watermark minus the
committed offset), and a commit made outside the group protocol (a "simple" consumer:
``tiered-log consume --group``).

A consumer protocol assignment (what the consumers' leader sends in SyncGroup, Kafka's
``ConsumerProtocolAssignment``; big-endian)::

    version int16 | topics int32 count, each: name int16 length + UTF-8,
                    partitions int32 count + int32 each | user_data int32 length + bytes

Only the coordinator of a group answers for it: elsewhere :class:`NotLeaderError` names
the node that does. Concurrency: coroutines of the event loop (partition bounds are
read without I/O).
"""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from ...errors import InvalidArgumentError, NotLeaderError, TieredLogError
from .coordinator import GroupCoordinator
from .handlers import groups_here
from .offsets import Committed, now_ms

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class GroupNotFoundError(TieredLogError):
    """No group of that name: no members and no committed offsets."""

    code = "group_not_found"
    status = 404


class GroupBusyError(TieredLogError):
    """A commit outside the group protocol while the group has members (Kafka answers
    such a commit UNKNOWN_MEMBER_ID): only its members commit then."""

    code = "group_has_members"
    status = 409


@dataclass(frozen=True, slots=True)
class OffsetRow:
    """A group's committed offset of one partition and its lag (None: the partition's
    end is not known here)."""

    topic: str
    partition: int
    committed: int
    metadata: str
    end: int | None

    @property
    def lag(self) -> int | None:
        return None if self.end is None else max(0, self.end - self.committed)


def decode_assignment(data: bytes) -> dict[str, list[int]] | None:
    """The topic -> partitions of a consumer protocol assignment (None when ``data``
    is not one: another protocol type)."""
    try:
        pos = _I16.size
        (count,) = _I32.unpack_from(data, pos)
        pos += 4
        out: dict[str, list[int]] = {}
        for _ in range(count):
            (n,) = _I16.unpack_from(data, pos)
            pos += 2
            name = bytes(data[pos : pos + n]).decode()
            pos += n
            (k,) = _I32.unpack_from(data, pos)
            pos += 4
            out[name] = list(struct.unpack_from(f">{k}i", data, pos))
            pos += 4 * k
        return out
    except (struct.error, UnicodeDecodeError, ValueError):
        return None


async def _check_coordinator(coord: GroupCoordinator, group: str) -> None:
    """NotLeaderError (naming the coordinator) unless this node coordinates ``group``."""
    store = coord.offsets
    partition = await store.partition_of(group)
    try:
        await store.load(partition)
    except NotLeaderError:
        leader = await asyncio.to_thread(store.leader_node, partition)
        raise NotLeaderError(
            f"group {group!r} is coordinated by node {leader}"
            if leader is not None
            else f"group {group!r} has no coordinator now",
            leader_id=leader,
        ) from None


def _ends(coord: GroupCoordinator, keys: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """The high watermark of each partition this node has (the log's end on a single
    node)."""
    be = coord.offsets.backend
    out = {}
    for topic, p in keys:
        try:
            out[(topic, p)] = be.bounds(coord.state.topics.partition(topic, p)).high_watermark
        except TieredLogError:
            continue
    return out


async def list_groups(coord: GroupCoordinator) -> list[dict[str, Any]]:
    """Every group this node coordinates: name, state, protocol type, member count and
    the coordinator's node id (as a Kafka client knows it, as :func:`describe_group`)."""
    listed = await groups_here(coord)
    out = []
    for gid, (st, ptype) in sorted(listed.items()):
        g = coord.group(gid)
        out.append(
            {
                "group": gid,
                "state": st,
                "protocol_type": ptype,
                "members": len(g.members) if g is not None else 0,
                "coordinator": coord.offsets.backend.node_id,
            }
        )
    return out


async def describe_group(coord: GroupCoordinator, group: str) -> dict[str, Any]:
    """A group's state, members (with their assignments), committed offsets and lag."""
    await _check_coordinator(coord, group)
    have = await coord.offsets.offsets(group)
    g = coord.group(group)
    if g is None and not have:
        raise GroupNotFoundError(f"no group {group!r} (no members, no committed offsets)")
    keys = sorted(have)
    ends = _ends(coord, keys)
    rows = [
        OffsetRow(t, p, have[(t, p)].offset, have[(t, p)].metadata, ends.get((t, p)))
        for t, p in keys
    ]
    members = []
    if g is not None:
        for m in g.members.values():
            members.append(
                {
                    "member_id": m.member_id,
                    "instance_id": m.instance_id,
                    "client_id": m.client_id,
                    "assignment": decode_assignment(m.assignment) or {},
                }
            )
    lags = [r.lag for r in rows if r.lag is not None]
    return {
        "group": group,
        "state": g.state if g is not None and (g.members or g.state != "Empty") else "Empty",
        "protocol_type": (g.protocol_type if g is not None else None) or "consumer",
        "protocol": g.protocol if g is not None else None,
        "generation": g.generation if g is not None else 0,
        "coordinator": coord.offsets.backend.node_id,
        "members": members,
        "offsets": [
            {
                "topic": r.topic,
                "partition": r.partition,
                "committed_offset": r.committed,
                "metadata": r.metadata,
                "high_watermark": r.end,
                "lag": r.lag,
            }
            for r in rows
        ],
        "total_lag": sum(lags),
    }


async def commit_outside(
    coord: GroupCoordinator, group: str, offsets: list[tuple[str, int, int]]
) -> None:
    """Commit ``(topic, partition, offset)`` for ``group`` as a consumer outside the
    group protocol (generation -1): GroupBusyError while the group has members."""
    if not group:
        raise InvalidArgumentError("the group name must not be empty")
    await _check_coordinator(coord, group)
    if coord.may_commit(group, -1, "", None) != ErrorCode.none:
        raise GroupBusyError(
            f"group {group!r} has members consuming through the Kafka protocol: "
            "only they commit its offsets now"
        )
    ts = now_ms()
    await coord.offsets.commit(group, [(t, p, Committed(o, -1, "", ts)) for t, p, o in offsets])


__all__ = [
    "GroupBusyError",
    "GroupNotFoundError",
    "OffsetRow",
    "commit_outside",
    "decode_assignment",
    "describe_group",
    "list_groups",
]
