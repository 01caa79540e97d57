"""The group APIs of the Kafka listener, one handler each (a decoded request in, the
answer's fields out, for every version; see :mod:`tiered_log.kafka.handlers`):

- FindCoordinator (group keys; v4's batch of keys): the leader of the group's internal
  partition (:mod:`.offsets`), COORDINATOR_NOT_AVAILABLE while it has none. A
  transaction key gets the node asked: there are no transactions, and a transactional
  producer must reach InitProducerId to be refused with the code clients treat as fatal
  (:mod:`tiered_log.kafka.producers`); an error here would be retried until the
  producer's timeout.
- JoinGroup, SyncGroup, Heartbeat, LeaveGroup: :class:`~.coordinator.GroupCoordinator`.
- OffsetCommit, OffsetFetch (v8's batch of groups): :class:`~.offsets.OffsetStore`.
- ListGroups (v4's state filter, v5's type filter: every group is ``classic``),
  DescribeGroups, DeleteGroups.

Every group request first checks that this node coordinates the group (it leads the
group's internal partition, whose offsets are loaded then): NOT_COORDINATOR otherwise,
and the client asks FindCoordinator again. Concurrency: coroutines of the listener's
event loop.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Awaitable, Callable
from typing import Any

from kio.schema.errors import ErrorCode

from ...errors import (
    MetadataUnavailableError,
    NotEnoughReplicasError,
    NotLeaderError,
    PartitionNotReadyError,
    ReplicationTimeoutError,
    TieredLogError,
    TopicNotFoundError,
)
from ..backend import Backend
from ..messages import Request, millis
from ..operations import GROUP_OPERATIONS, when_asked
from .coordinator import Group, GroupCoordinator, coordinator_of
from .offsets import MAX_METADATA, Committed, LoadInProgressError, now_ms, partition_for

log = logging.getLogger("tiered_log.kafka.groups")

FIND_COORDINATOR = 10
JOIN_GROUP = 11
HEARTBEAT = 12
LEAVE_GROUP = 13
SYNC_GROUP = 14
DESCRIBE_GROUPS = 15
LIST_GROUPS = 16
OFFSET_COMMIT = 8
OFFSET_FETCH = 9
DELETE_GROUPS = 42
OFFSET_DELETE = 47

GROUP_TYPE = "classic"
"""Every group here speaks the classic group protocol (JoinGroup/SyncGroup), the type
ListGroups v5 answers and filters on (KIP-848's ``consumer`` and ``share`` groups are
not served: a filter naming only those lists none)."""

GROUP_APIS: dict[int, tuple[str, int, int]] = {
    OFFSET_COMMIT: ("offset_commit", 2, 8),
    OFFSET_FETCH: ("offset_fetch", 1, 8),
    FIND_COORDINATOR: ("find_coordinator", 0, 4),
    JOIN_GROUP: ("join_group", 0, 9),
    HEARTBEAT: ("heartbeat", 0, 4),
    LEAVE_GROUP: ("leave_group", 0, 5),
    SYNC_GROUP: ("sync_group", 0, 5),
    DESCRIBE_GROUPS: ("describe_groups", 0, 5),
    LIST_GROUPS: ("list_groups", 0, 5),
    DELETE_GROUPS: ("delete_groups", 0, 2),
    OFFSET_DELETE: ("offset_delete", 0, 0),
}
"""The group APIs served: key -> (kio's module name, first and last version)."""


def storage_code(exc: BaseException) -> ErrorCode:
    """The code a group request answers when its internal partition fails it (Kafka's
    mapping for the offsets topic)."""
    if isinstance(exc, LoadInProgressError):
        return ErrorCode.coordinator_load_in_progress
    if isinstance(exc, NotLeaderError):
        return ErrorCode.not_coordinator
    if isinstance(
        exc,
        NotEnoughReplicasError
        | ReplicationTimeoutError
        | TopicNotFoundError
        | PartitionNotReadyError
        | MetadataUnavailableError,
    ):
        return ErrorCode.coordinator_not_available
    return ErrorCode.unknown_server_error


class GroupHandlers:
    """The group APIs over the service's coordinator. Event-loop thread only."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.coordinator: GroupCoordinator = coordinator_of(backend.state)

    def handlers(self) -> dict[int, Callable[[Request], Awaitable[dict[str, Any]]]]:
        """The handler of each group API key."""
        return {
            FIND_COORDINATOR: self.find_coordinator,
            JOIN_GROUP: self.join_group,
            SYNC_GROUP: self.sync_group,
            HEARTBEAT: self.heartbeat,
            LEAVE_GROUP: self.leave_group,
            OFFSET_COMMIT: self.offset_commit,
            OFFSET_FETCH: self.offset_fetch,
            LIST_GROUPS: self.list_groups,
            DESCRIBE_GROUPS: self.describe_groups,
            DELETE_GROUPS: self.delete_groups,
            OFFSET_DELETE: self.offset_delete,
        }

    async def _coordinates(self, group_id: str) -> ErrorCode:
        """NONE when this node coordinates ``group_id`` now (its offsets loaded, the
        membership of groups it lost dropped), else the code to answer."""
        store = self.coordinator.offsets
        try:
            partition = await store.partition_of(group_id)
            _, reloaded = await store.load(partition)
        except TieredLogError as exc:
            return storage_code(exc)
        if reloaded:  # a new leader epoch: members known before rejoin
            n = store.partitions() or 1
            keep = {g for g in self.coordinator.groups if partition_for(g, n) != partition}
            self.coordinator.forget(keep)
        return ErrorCode.none

    # ---- FindCoordinator ---------------------------------------------------------------

    async def find_coordinator(self, req: Request) -> dict[str, Any]:
        body = req.body
        key_type = int(getattr(body, "key_type", 0))
        keys = list(body.coordinator_keys) if req.api_version >= 4 else [body.key]
        found = [await self._find(k, key_type) for k in keys]
        if req.api_version >= 4:
            return {"throttle_time": 0, "coordinators": found}
        one = found[0]
        return {"throttle_time": 0, **{k: v for k, v in one.items() if k != "key"}}

    async def _find(self, key: str, key_type: int) -> dict[str, Any]:
        out: dict[str, Any] = {
            "key": key,
            "node_id": -1,
            "host": "",
            "port": -1,
            "error_code": ErrorCode.none,
            "error_message": None,
        }
        if key_type == 1:  # a transaction key: this node, which refuses it at once
            me = next(b for b in await self.backend.brokers() if b.node_id == self.backend.node_id)
            out.update(node_id=me.node_id, host=me.host, port=me.port)
            return out
        if key_type != 0:
            out["error_code"] = ErrorCode.invalid_request
            out["error_message"] = f"unknown coordinator key type {key_type}"
            return out
        if not key:
            out["error_code"] = ErrorCode.invalid_group_id
            return out
        store = self.coordinator.offsets
        try:
            partition = await store.partition_of(key)
            leader = await asyncio.to_thread(store.leader_node, partition)
            brokers = {b.node_id: b for b in await self.backend.brokers()}
        except TieredLogError as exc:
            out["error_code"] = ErrorCode.coordinator_not_available
            out["error_message"] = exc.message
            return out
        b = brokers.get(leader) if leader is not None else None
        if b is None:
            out["error_code"] = ErrorCode.coordinator_not_available
            out["error_message"] = "the group's offsets partition has no leader now"
            return out
        out.update(node_id=b.node_id, host=b.host, port=b.port)
        return out

    # ---- membership --------------------------------------------------------------------

    async def join_group(self, req: Request) -> dict[str, Any]:
        b = req.body
        base = {
            "throttle_time": 0,
            "generation_id": -1,
            "protocol_type": None,
            "protocol_name": "",
            "leader": "",
            "skip_assignment": False,
            "member_id": b.member_id,
            "members": [],
        }
        code = await self._coordinates(b.group_id)
        if code != ErrorCode.none:
            return base | {"error_code": code}
        session = millis(b.session_timeout)
        rebalance = millis(b.rebalance_timeout) if req.api_version >= 1 else session
        got = await self.coordinator.join(
            b.group_id,
            b.member_id,
            getattr(b, "group_instance_id", None),
            req.client_id or "",
            req.client_host,
            session,
            rebalance,
            b.protocol_type,
            [(p.name, p.metadata) for p in b.protocols],
            req.api_version >= 4,
        )
        out = base | got
        if out["protocol_name"] is None and req.api_version < 7:  # nullable from v7 only
            out["protocol_name"] = ""
        return out

    async def sync_group(self, req: Request) -> dict[str, Any]:
        b = req.body
        base = {"throttle_time": 0, "protocol_type": None, "protocol_name": None, "assignment": b""}
        code = await self._coordinates(b.group_id)
        if code != ErrorCode.none:
            return base | {"error_code": code}
        got = await self.coordinator.sync(
            b.group_id,
            int(b.generation_id),
            b.member_id,
            getattr(b, "group_instance_id", None),
            [(a.member_id, a.assignment) for a in b.assignments],
        )
        return base | got

    async def heartbeat(self, req: Request) -> dict[str, Any]:
        b = req.body
        code = await self._coordinates(b.group_id)
        if code == ErrorCode.none:
            code = self.coordinator.heartbeat(
                b.group_id, int(b.generation_id), b.member_id, getattr(b, "group_instance_id", None)
            )
        return {"throttle_time": 0, "error_code": code}

    async def leave_group(self, req: Request) -> dict[str, Any]:
        b = req.body
        if req.api_version >= 3:
            who = [(m.member_id, getattr(m, "group_instance_id", None)) for m in b.members]
        else:
            who = [(b.member_id, None)]
        code = await self._coordinates(b.group_id)
        if code != ErrorCode.none:
            return {"throttle_time": 0, "error_code": code, "members": []}
        codes = self.coordinator.leave(b.group_id, who)
        members = [
            {"member_id": m, "group_instance_id": i, "error_code": c}
            for (m, i), c in zip(who, codes, strict=True)
        ]
        top = ErrorCode.none if req.api_version >= 3 else codes[0]
        return {"throttle_time": 0, "error_code": top, "members": members}

    # ---- offsets -----------------------------------------------------------------------

    async def offset_commit(self, req: Request) -> dict[str, Any]:
        b = req.body
        generation = int(
            getattr(b, "generation_id_or_member_epoch", getattr(b, "generation_id", -1))
        )
        code = await self._coordinates(b.group_id)
        if code == ErrorCode.none:
            code = self.coordinator.may_commit(
                b.group_id, generation, b.member_id, getattr(b, "group_instance_id", None)
            )
        codes: dict[tuple[str, int], ErrorCode] = {}
        wanted: list[tuple[str, int, Committed]] = []
        ts = now_ms()
        for t in b.topics:
            for p in t.partitions:
                key = (t.name, int(p.partition_index))
                meta = p.committed_metadata or ""
                if code != ErrorCode.none:
                    codes[key] = code
                elif len(meta.encode()) > MAX_METADATA:
                    codes[key] = ErrorCode.offset_metadata_too_large
                else:
                    codes[key] = ErrorCode.none
                    epoch = int(getattr(p, "committed_leader_epoch", -1))
                    wanted.append(
                        (t.name, key[1], Committed(int(p.committed_offset), epoch, meta, ts))
                    )
        if wanted:
            try:
                await self.coordinator.offsets.commit(b.group_id, wanted)
            except TieredLogError as exc:
                failed = storage_code(exc)
                log.info("group %s: commit failed: %s", b.group_id, exc.message)
                for t, p, _ in wanted:
                    codes[(t, p)] = failed
        topics: dict[str, list[dict[str, Any]]] = {}
        for (t, p), c in codes.items():
            topics.setdefault(t, []).append({"partition_index": p, "error_code": c})
        return {
            "throttle_time": 0,
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
        }

    async def offset_fetch(self, req: Request) -> dict[str, Any]:
        b = req.body
        if req.api_version >= 8:
            groups = [await self._fetch_group(g.group_id, g.topics) for g in b.groups]
            return {"throttle_time": 0, "groups": groups}
        one = await self._fetch_group(b.group_id, b.topics)
        return {"throttle_time": 0, "topics": one["topics"], "error_code": one["error_code"]}

    async def _fetch_group(self, group_id: str, topics: Any) -> dict[str, Any]:
        code = await self._coordinates(group_id)
        if code != ErrorCode.none:
            return {"group_id": group_id, "topics": [], "error_code": code}
        try:
            have = await self.coordinator.offsets.offsets(group_id)
        except TieredLogError as exc:
            return {"group_id": group_id, "topics": [], "error_code": storage_code(exc)}
        wanted: dict[str, list[int]] = {}
        if topics is None:
            for t, p in sorted(have):
                wanted.setdefault(t, []).append(p)
        else:
            for t in topics:
                wanted[t.name] = [int(i) for i in t.partition_indexes]
        out = []
        for name, parts in wanted.items():
            rows = []
            for p in parts:
                c = have.get((name, p))
                rows.append(
                    {
                        "partition_index": p,
                        "committed_offset": c.offset if c else -1,
                        "committed_leader_epoch": c.leader_epoch if c else -1,
                        "metadata": c.metadata if c else "",
                        "error_code": ErrorCode.none,
                    }
                )
            out.append({"name": name, "partitions": rows})
        return {"group_id": group_id, "topics": out, "error_code": ErrorCode.none}

    # ---- admin -------------------------------------------------------------------------

    async def list_groups(self, req: Request) -> dict[str, Any]:
        states = {s.lower() for s in getattr(req.body, "states_filter", ()) or ()}
        types = {t.lower() for t in getattr(req.body, "types_filter", ()) or ()}
        if types and GROUP_TYPE not in types:
            return {"throttle_time": 0, "error_code": ErrorCode.none, "groups": []}
        listed = await groups_here(self.coordinator)
        rows = [
            {"group_id": gid, "protocol_type": ptype, "group_state": st, "group_type": GROUP_TYPE}
            for gid, (st, ptype) in sorted(listed.items())
            if not states or st.lower() in states
        ]
        return {"throttle_time": 0, "error_code": ErrorCode.none, "groups": rows}

    async def describe_groups(self, req: Request) -> dict[str, Any]:
        out = []
        ops = when_asked(
            getattr(req.body, "include_authorized_operations", False), GROUP_OPERATIONS
        )
        for gid in req.body.groups:
            row: dict[str, Any] = {
                "group_id": gid,
                "group_state": "Dead",
                "protocol_type": "",
                "protocol_data": "",
                "members": [],
                "authorized_operations": ops,
            }
            code = await self._coordinates(gid)
            row["error_code"] = code
            if code == ErrorCode.none:
                g = self.coordinator.group(gid)
                have = await self.coordinator.offsets.offsets(gid)
                if g is not None and (g.members or g.state != "Empty"):
                    row.update(
                        group_state=g.state,
                        protocol_type=g.protocol_type or "",
                        protocol_data=g.protocol or "",
                        members=[
                            {
                                "member_id": m.member_id,
                                "group_instance_id": m.instance_id,
                                "client_id": m.client_id,
                                "client_host": m.client_host,
                                "member_metadata": m.metadata(g.protocol or ""),
                                "member_assignment": m.assignment,
                            }
                            for m in g.members.values()
                        ],
                    )
                elif have or g is not None:
                    row.update(group_state="Empty", protocol_type="consumer")
            out.append(row)
        return {"throttle_time": 0, "groups": out}

    async def delete_groups(self, req: Request) -> dict[str, Any]:
        results = []
        for gid in req.body.groups_names:
            code = await self._coordinates(gid)
            if code == ErrorCode.none:
                have = await self.coordinator.offsets.offsets(gid)
                known = self.coordinator.group(gid) is not None or bool(have)
                code = self.coordinator.delete(gid) if known else ErrorCode.group_id_not_found
                if code == ErrorCode.none:
                    try:
                        await self.coordinator.offsets.delete(gid)
                    except TieredLogError as exc:
                        code = storage_code(exc)
            results.append({"group_id": gid, "error_code": code})
        return {"throttle_time": 0, "results": results}

    async def offset_delete(self, req: Request) -> dict[str, Any]:
        """OffsetDelete: drop the group's committed offsets of the partitions named, as
        Kafka's coordinator does: only of topics no live member subscribes to
        (GROUP_SUBSCRIBED_TO_TOPIC per partition otherwise); an unknown group is
        GROUP_ID_NOT_FOUND."""
        body = req.body
        gid = body.group_id
        code = await self._coordinates(gid)
        if code == ErrorCode.none:
            have = await self.coordinator.offsets.offsets(gid)
            g = self.coordinator.group(gid)
            if g is None and not have:
                code = ErrorCode.group_id_not_found
        if code != ErrorCode.none:
            return {"error_code": code, "throttle_time": 0, "topics": []}
        g = self.coordinator.group(gid)
        subscribed = subscribed_topics(g) if g is not None else set()
        doomed: list[tuple[str, int]] = []
        topics = []
        for t in body.topics:
            parts = []
            for p in t.partitions:
                index = int(p.partition_index)
                if t.name in subscribed:
                    pc = ErrorCode.group_subscribed_to_topic
                else:
                    pc = ErrorCode.none
                    doomed.append((t.name, index))
                parts.append({"partition_index": index, "error_code": pc})
            topics.append({"name": t.name, "partitions": parts})
        try:
            await self.coordinator.offsets.delete_offsets(gid, doomed)
        except TieredLogError as exc:
            return {"error_code": storage_code(exc), "throttle_time": 0, "topics": []}
        if doomed:
            log.info("group %s: committed offsets of %d partition(s) deleted", gid, len(doomed))
        return {"error_code": ErrorCode.none, "throttle_time": 0, "topics": topics}


def subscribed_topics(g: Group) -> set[str]:
    """The topics the live members of a consumer group subscribe to: the topic lists of
    their ``ConsumerProtocolSubscription`` metadata for the group's protocol (big-endian:
    version int16, topic count int32, each topic an int16-length string; what follows
    is not read). A member whose metadata does not parse counts as subscribed to
    nothing it names."""
    out: set[str] = set()
    if g.protocol_type not in (None, "consumer"):
        return out
    for m in g.members.values():
        meta = m.metadata(g.protocol or "")
        try:
            (n,) = struct.unpack_from(">i", meta, 2)
            pos = 6
            for _ in range(max(n, 0)):
                (size,) = struct.unpack_from(">h", meta, pos)
                out.add(meta[pos + 2 : pos + 2 + size].decode("utf-8"))
                pos += 2 + size
        except (struct.error, UnicodeDecodeError):
            continue
    return out


async def groups_here(coordinator: GroupCoordinator) -> dict[str, tuple[str, str]]:
    """Every group this node coordinates: group -> (state, protocol type); groups with
    only committed offsets are Empty. Loads the internal partitions it leads."""
    store = coordinator.offsets
    n = store.partitions()
    out: dict[str, tuple[str, str]] = {}
    if n is None:
        return out
    for p in range(n):
        try:
            loaded, _ = await store.load(p)
        except TieredLogError:
            continue
        for gid in loaded.groups:
            out[gid] = ("Empty", "consumer")
    for gid, g in coordinator.groups.items():
        try:
            await store.load(partition_for(gid, n))
        except TieredLogError:
            continue
        if g.members or gid not in out:
            out[gid] = (g.state, g.protocol_type or "consumer")
    return out


__all__ = ["GROUP_APIS", "GroupHandlers", "groups_here", "storage_code"]
