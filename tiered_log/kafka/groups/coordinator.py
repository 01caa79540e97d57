"""The group coordinator of Kafka's classic consumer-group protocol: members join, the
leader's assignment is relayed to every member, liveness is a session kept by
heartbeats, and committed offsets go to :class:`~.offsets.OffsetStore`.

A group's life (Kafka's states)::

    Empty --join--> PreparingRebalance --every member joined, or the rebalance
        timeout--> CompletingRebalance --the leader's SyncGroup--> Stable
    Stable / CompletingRebalance --a join, a leave, a session expired--> PreparingRebalance
    PreparingRebalance --no member left--> Empty

Each completed join starts a new generation; a member's request names the generation
and member id it believes in and is fenced otherwise: UNKNOWN_MEMBER_ID (not a member:
it rejoins), ILLEGAL_GENERATION (an older generation: it rejoins),
REBALANCE_IN_PROGRESS (heartbeat or sync while the group rebalances: it rejoins). A
JoinGroup v4+ without a member id is answered MEMBER_ID_REQUIRED with the id to use,
and the rebalance waits for it (as Kafka's pending members). The assignors run in the
clients (range, roundrobin, cooperative-sticky...): the coordinator picks the protocol
every member supports, preferring the members' first choices, and relays bytes.

Static membership (``group.instance.id``): a join with a known instance id and no
member id replaces the old member (its id is fenced: FENCED_INSTANCE_ID) and rejoins
the group.

Invariants: a group's generation only grows; only members of the current generation
commit (or, for a group with no members, a commit with generation -1, Kafka's "simple"
consumer); membership lives in this node's memory only (a new coordinator starts every
group Empty and its members rejoin), offsets live in the internal topic.

Concurrency: event-loop only. A JoinGroup or SyncGroup answer waits on a future that
the rebalance completes; one timer task (:meth:`GroupCoordinator._tick`) expires
sessions and rebalance deadlines.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
import weakref
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from ...service.state import ServiceState
from ..backend import Backend
from .offsets import OffsetStore

log = logging.getLogger("tiered_log.kafka.groups")

EMPTY = "Empty"
PREPARING = "PreparingRebalance"
COMPLETING = "CompletingRebalance"
STABLE = "Stable"
DEAD = "Dead"

MIN_SESSION_MS = 1_000
"""The shortest session a member may ask for (Kafka's ``group.min.session.timeout.ms`` is
6 s; lower here so tests and laptops notice a dead consumer sooner)."""

MAX_SESSION_MS = 1_800_000
"""The longest session (Kafka's ``group.max.session.timeout.ms``)."""

TICK_S = 0.1
"""How often sessions and rebalance deadlines are checked."""


@dataclass(slots=True)
class Member:
    """One member of a group. ``deadline``: loop time its session expires (not while
    it waits in a JoinGroup); ``join``/``sync``: its waiting request's answer."""

    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_ms: int
    rebalance_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    deadline: float = 0.0
    join: asyncio.Future[dict[str, Any]] | None = None
    sync: asyncio.Future[dict[str, Any]] | None = None

    def metadata(self, protocol: str) -> bytes:
        return next((m for n, m in self.protocols if n == protocol), b"")


@dataclass(slots=True)
class Group:
    """One group's membership (see the module docstring)."""

    group_id: str
    state: str = EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending: dict[str, float] = field(default_factory=dict)
    instances: dict[str, str] = field(default_factory=dict)
    rebalance_deadline: float = 0.0


def _answer(fut: asyncio.Future[dict[str, Any]] | None, value: dict[str, Any]) -> None:
    if fut is not None and not fut.done():
        fut.set_result(value)


class GroupCoordinator:
    """Every group this node coordinates, and their offsets (see the module docstring).
    One per service (:func:`coordinator_of`). Event-loop only."""

    def __init__(self, state: ServiceState) -> None:
        self.state = state
        self.offsets = OffsetStore(Backend(state, ("", 0)))
        self.groups: dict[str, Group] = {}
        self._ticker: asyncio.Task[None] | None = None

    def _loop_time(self) -> float:
        return asyncio.get_running_loop().time()

    def _start_ticker(self) -> None:
        if self._ticker is None or self._ticker.done():
            self._ticker = asyncio.get_running_loop().create_task(self._tick())

    async def _tick(self) -> None:
        while not self.state.is_stopping:
            await asyncio.sleep(TICK_S)
            try:
                self.expire(self._loop_time())
            except Exception:  # a bug here must not stop the expiry of other groups
                log.exception("group expiry failed")

    def group(self, group_id: str) -> Group | None:
        return self.groups.get(group_id)

    def forget(self, keep: set[str]) -> None:
        """Drop the membership of groups not in ``keep`` (this node no longer
        coordinates them); their waiting members are told NOT_COORDINATOR."""
        for gid in [g for g in self.groups if g not in keep]:
            g = self.groups.pop(gid)
            for m in g.members.values():
                _answer(m.join, {"error_code": ErrorCode.not_coordinator})
                _answer(m.sync, {"error_code": ErrorCode.not_coordinator})

    # ---- expiry ------------------------------------------------------------------------

    def expire(self, now: float) -> None:
        """Remove members whose session passed, pending ids not used in time, and
        complete joins whose rebalance timeout passed."""
        for g in list(self.groups.values()):
            for mid, until in list(g.pending.items()):
                if until <= now:
                    del g.pending[mid]
            gone = [m for m in g.members.values() if m.join is None and m.deadline <= now]
            for m in gone:
                log.info("group %s: member %s session expired", g.group_id, m.member_id)
                self._remove(g, m, ErrorCode.unknown_member_id)
            if g.state == PREPARING and g.rebalance_deadline <= now:
                self._complete_join(g, now)
            elif gone or g.state == PREPARING:
                self._after_change(g, now)

    # ---- join --------------------------------------------------------------------------

    async def join(
        self,
        group_id: str,
        member_id: str,
        instance_id: str | None,
        client_id: str,
        client_host: str,
        session_ms: int,
        rebalance_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        require_known_id: bool,
    ) -> dict[str, Any]:
        """A JoinGroup: waits until the rebalance completes; the answer's fields."""
        self._start_ticker()
        now = self._loop_time()
        if not group_id:
            return {"error_code": ErrorCode.invalid_group_id, "member_id": member_id}
        if not MIN_SESSION_MS <= session_ms <= MAX_SESSION_MS:
            return {"error_code": ErrorCode.invalid_session_timeout, "member_id": member_id}
        g = self.groups.setdefault(group_id, Group(group_id))
        names = [n for n, _ in protocols]
        if (
            not protocols
            or not protocol_type
            or (
                g.members
                and (
                    g.protocol_type != protocol_type
                    or not set(names).intersection(
                        *(set(n for n, _ in m.protocols) for m in g.members.values())
                    )
                )
            )
        ):
            return {"error_code": ErrorCode.inconsistent_group_protocol, "member_id": member_id}
        if member_id == "":
            new_id = f"{client_id or 'member'}-{uuid.uuid4()}"
            if instance_id is not None and instance_id in g.instances:
                old = g.members.get(g.instances[instance_id])
                if old is not None:
                    log.info("group %s: static member %s replaced", group_id, instance_id)
                    self._remove(g, old, ErrorCode.fenced_instance_id)
            elif require_known_id and instance_id is None:
                g.pending[new_id] = now + session_ms / 1000
                return {"error_code": ErrorCode.member_id_required, "member_id": new_id}
            member_id = new_id
        elif member_id not in g.members and member_id not in g.pending:
            return {"error_code": ErrorCode.unknown_member_id, "member_id": member_id}
        elif instance_id is not None and g.instances.get(instance_id, member_id) != member_id:
            return {"error_code": ErrorCode.fenced_instance_id, "member_id": member_id}
        g.pending.pop(member_id, None)
        m = g.members.get(member_id)
        if m is None:
            m = Member(
                member_id,
                instance_id,
                client_id,
                client_host,
                session_ms,
                rebalance_ms,
                protocol_type,
                protocols,
            )
            g.members[member_id] = m
            if instance_id is not None:
                g.instances[instance_id] = member_id
        else:
            m.session_ms, m.rebalance_ms, m.protocols = session_ms, rebalance_ms, protocols
            _answer(m.join, {"error_code": ErrorCode.unknown_member_id, "member_id": member_id})
        g.protocol_type = protocol_type
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        m.join = fut
        if g.state != PREPARING:
            self._prepare(g, now)
        self._after_change(g, now)
        try:
            return await fut
        finally:
            if m.join is fut:  # the connection went away mid-join: its session runs again
                m.join = None
                m.deadline = self._loop_time() + m.session_ms / 1000

    def _prepare(self, g: Group, now: float) -> None:
        """Start a rebalance: members must rejoin within the longest rebalance timeout."""
        for m in g.members.values():
            _answer(m.sync, {"error_code": ErrorCode.rebalance_in_progress})
            m.sync = None
        g.state = PREPARING
        longest = max((m.rebalance_ms for m in g.members.values()), default=0)
        g.rebalance_deadline = now + longest / 1000
        log.info("group %s: rebalancing (generation %d)", g.group_id, g.generation)

    def _after_change(self, g: Group, now: float) -> None:
        """After a member joined or left: complete the join when every member (and every
        id handed out) has joined; a settled group that lost a member rebalances."""
        if g.state == PREPARING:
            if not g.pending and all(m.join is not None for m in g.members.values()):
                self._complete_join(g, now)
        elif g.state in (STABLE, COMPLETING) and not g.members:
            self._prepare(g, now)
            self._complete_join(g, now)

    def _complete_join(self, g: Group, now: float) -> None:
        for m in [m for m in g.members.values() if m.join is None]:
            log.info("group %s: member %s did not rejoin in time", g.group_id, m.member_id)
            self._remove(g, m, ErrorCode.unknown_member_id)
        g.pending.clear()
        g.generation += 1
        if not g.members:
            g.state, g.protocol, g.leader, g.protocol_type = EMPTY, None, None, None
            log.info("group %s: empty (generation %d)", g.group_id, g.generation)
            return
        g.protocol = self._choose(g)
        if g.leader not in g.members:
            g.leader = next(iter(g.members))
        g.state = COMPLETING
        everyone = [
            {
                "member_id": m.member_id,
                "group_instance_id": m.instance_id,
                "metadata": m.metadata(g.protocol),
            }
            for m in g.members.values()
        ]
        log.info(
            "group %s: generation %d, %d members, protocol %s",
            g.group_id,
            g.generation,
            len(g.members),
            g.protocol,
        )
        for m in g.members.values():
            m.deadline = now + m.session_ms / 1000
            fut, m.join = m.join, None
            _answer(
                fut,
                {
                    "error_code": ErrorCode.none,
                    "generation_id": g.generation,
                    "protocol_type": g.protocol_type,
                    "protocol_name": g.protocol,
                    "leader": g.leader,
                    "member_id": m.member_id,
                    "members": everyone if m.member_id == g.leader else [],
                },
            )

    def _choose(self, g: Group) -> str:
        """The protocol every member supports that most members list first among those
        (ties: the leader's order)."""
        common = set.intersection(*(set(n for n, _ in m.protocols) for m in g.members.values()))
        votes: dict[str, int] = {}
        for m in g.members.values():
            first = next(n for n, _ in m.protocols if n in common)
            votes[first] = votes.get(first, 0) + 1
        order = [n for n, _ in next(iter(g.members.values())).protocols if n in common]
        return max(order, key=lambda n: (votes.get(n, 0), -order.index(n)))

    def _remove(self, g: Group, m: Member, code: ErrorCode) -> None:
        g.members.pop(m.member_id, None)
        if m.instance_id is not None and g.instances.get(m.instance_id) == m.member_id:
            del g.instances[m.instance_id]
        _answer(m.join, {"error_code": code, "member_id": m.member_id})
        _answer(m.sync, {"error_code": code})
        m.join = m.sync = None
        if g.state in (STABLE, COMPLETING):
            self._prepare(g, self._loop_time())

    # ---- sync, heartbeat, leave ----------------------------------------------------------

    def _check(
        self, g: Group | None, member_id: str, generation: int, instance_id: str | None
    ) -> ErrorCode | Member:
        if g is None or member_id not in g.members:
            if g is not None and instance_id is not None and instance_id in g.instances:
                return ErrorCode.fenced_instance_id
            return ErrorCode.unknown_member_id
        if generation != g.generation:
            return ErrorCode.illegal_generation
        return g.members[member_id]

    async def sync(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        instance_id: str | None,
        assignments: list[tuple[str, bytes]],
    ) -> dict[str, Any]:
        """A SyncGroup: the member's assignment once the leader has sent them all."""
        g = self.groups.get(group_id)
        got = self._check(g, member_id, generation, instance_id)
        if isinstance(got, ErrorCode):
            return {"error_code": got}
        assert g is not None
        m = got
        if g.state == PREPARING:
            return {"error_code": ErrorCode.rebalance_in_progress}
        m.deadline = self._loop_time() + m.session_ms / 1000
        if g.state == STABLE:
            return self._sync_answer(g, m)
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        _answer(m.sync, {"error_code": ErrorCode.rebalance_in_progress})
        m.sync = fut
        if member_id == g.leader:
            given = dict(assignments)
            for other in g.members.values():
                other.assignment = given.get(other.member_id, b"")
            g.state = STABLE
            log.info("group %s: stable at generation %d", g.group_id, g.generation)
            for other in g.members.values():
                waiting, other.sync = other.sync, None
                _answer(waiting, self._sync_answer(g, other))
        try:
            return await fut
        finally:
            if m.sync is fut:
                m.sync = None

    def _sync_answer(self, g: Group, m: Member) -> dict[str, Any]:
        return {
            "error_code": ErrorCode.none,
            "protocol_type": g.protocol_type,
            "protocol_name": g.protocol,
            "assignment": m.assignment,
        }

    def heartbeat(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None
    ) -> ErrorCode:
        """A Heartbeat: keeps the session; tells the member to rejoin when the group
        rebalances."""
        g = self.groups.get(group_id)
        got = self._check(g, member_id, generation, instance_id)
        if isinstance(got, ErrorCode):
            return got
        assert g is not None
        got.deadline = self._loop_time() + got.session_ms / 1000
        return ErrorCode.rebalance_in_progress if g.state == PREPARING else ErrorCode.none

    def leave(self, group_id: str, members: list[tuple[str, str | None]]) -> list[ErrorCode]:
        """A LeaveGroup of ``(member id, instance id)`` pairs: a code for each."""
        g = self.groups.get(group_id)
        out = []
        now = self._loop_time()
        for member_id, instance_id in members:
            if g is None:
                out.append(ErrorCode.unknown_member_id)
                continue
            if member_id == "" and instance_id is not None:
                member_id = g.instances.get(instance_id, "")
            elif instance_id is not None and g.instances.get(instance_id) != member_id:
                out.append(ErrorCode.fenced_instance_id)
                continue
            m = g.members.get(member_id)
            if m is None:
                out.append(ErrorCode.unknown_member_id)
                continue
            log.info("group %s: member %s left", group_id, member_id)
            self._remove(g, m, ErrorCode.unknown_member_id)
            out.append(ErrorCode.none)
        if g is not None:
            self._after_change(g, now)
            if g.state == PREPARING and not g.members:
                self._complete_join(g, now)
        return out

    def may_commit(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None
    ) -> ErrorCode:
        """Whether a commit with these ids is accepted now (Kafka's rules: a member of
        the current generation outside CompletingRebalance, or generation -1 and no
        member id for a group without members)."""
        g = self.groups.get(group_id)
        if generation < 0 and member_id == "":
            return ErrorCode.none if g is None or not g.members else ErrorCode.unknown_member_id
        got = self._check(g, member_id, generation, instance_id)
        if isinstance(got, ErrorCode):
            return got
        assert g is not None
        if g.state == COMPLETING:
            return ErrorCode.rebalance_in_progress
        got.deadline = self._loop_time() + got.session_ms / 1000
        return ErrorCode.none

    def delete(self, group_id: str) -> ErrorCode:
        """Whether ``group_id`` may be deleted (no members), forgetting it if so."""
        g = self.groups.get(group_id)
        if g is not None and g.members:
            return ErrorCode.non_empty_group
        self.groups.pop(group_id, None)
        return ErrorCode.none

    def close(self) -> None:
        """Stop the timer task."""
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(Exception):
                self._ticker = None


_COORDINATORS: weakref.WeakKeyDictionary[ServiceState, GroupCoordinator] = (
    weakref.WeakKeyDictionary()
)


def coordinator_of(state: ServiceState) -> GroupCoordinator:
    """The service's group coordinator (made on first use; the Kafka listener and the
    HTTP routes share it)."""
    got = _COORDINATORS.get(state)
    if got is None:
        got = _COORDINATORS[state] = GroupCoordinator(state)
    return got


__all__ = [
    "COMPLETING",
    "DEAD",
    "EMPTY",
    "PREPARING",
    "STABLE",
    "Group",
    "GroupCoordinator",
    "Member",
    "coordinator_of",
]
