"""The cluster's metadata as plain values: nodes, topics, partition leadership.

What it is for: the controller decides and the nodes obey through values stored in etcd
(:mod:`tiered_log.cluster.etcd`); this module is the one definition of those values and
of their JSON, so both sides read and write the same thing, and the rules of a
leadership change (Kafka's, KIP-101 / KRaft's PartitionChangeBuilder) are pure functions
that can be tested without etcd. No I/O, no clock, no randomness.

- :class:`NodeInfo`: a registered node (id, URL).
- :class:`TopicMeta`: a topic's partition count, replication factor, ``min.insync.replicas``
  and log config (defined in :mod:`tiered_log.broker.topic_meta`, the one definition the
  single node's topics share; re-exported here).
- :class:`PartitionState`: one partition's replicas, leader, leader epoch, ISR and
  partition epoch; with the transitions :func:`elect_leader`,
  :func:`elect_preferred_leader`, :func:`shrink_isr`, :func:`expand_isr`, and
  :func:`initial_state`.
- :func:`assign_replicas`: Kafka's round-robin placement of a new topic's replicas.

Invariants of a :class:`PartitionState` (checked by its constructor, so by
``from_json`` too; every transition keeps them):

1. ``replicas`` is non-empty, without duplicates, ids >= 0;
2. ``isr`` is a subset of ``replicas``, without duplicates;
3. ``leader`` is None (offline) or a member of ``isr`` (so the ISR is never empty while
   there is a leader);
4. ``leader_epoch`` and ``partition_epoch`` are >= 0.

And of the transitions (what fences a deposed leader): a transition returns a NEW state,
or None when it would change nothing (nothing to write); in the new state
``partition_epoch`` is one more (every change), and ``leader_epoch`` is one more exactly
when ``leader`` differs (a leader change, including to and from None, as KRaft's
``PartitionRegistration.merge``), never otherwise. So no two leaders ever hold the same
leader epoch, and a request carrying an older epoch is known stale.

JSON (:meth:`PartitionState.to_json`; etcd stores the dict of ``to_dict``)::

    {"version": 1, "topic": "orders", "partition": 3, "replicas": [2, 0, 1],
     "leader": 2, "leader_epoch": 7, "isr": [2, 0], "partition_epoch": 12}

``leader`` is ``null`` when the partition is offline. Decoding is strict: a missing field,
a wrong type (``true`` is not an integer), a broken invariant or another ``version``
raises :class:`~tiered_log.errors.InvalidArgumentError` with one line naming the field;
keys it does not know are ignored (a newer writer may add some).

Thread-safety: every value here is immutable (frozen dataclasses, tuples) and every
function pure: safe from any thread.
"""

from __future__ import annotations

from collections.abc import Iterable, Set
from dataclasses import dataclass, replace
from typing import Any

from ..broker.topic_meta import TopicMeta, validate_topic_name
from ..errors import InvalidArgumentError
from ..json_fields import (
    FORMAT_VERSION,
    check_version,
    decode,
    dumps,
    int_field,
    mapping,
    required,
    shown,
    str_field,
)

# ---- strict field readers -------------------------------------------------------------


def _ids(value: object, what: str) -> tuple[int, ...]:
    if not isinstance(value, (list, tuple)):
        raise InvalidArgumentError(f"{what} must be a list of node ids, not {shown(value)}")
    ids = tuple(int_field(v, f"{what} entry") for v in value)
    if len(set(ids)) != len(ids):
        raise InvalidArgumentError(f"{what} {list(ids)} has duplicates")
    return ids


# ---- nodes ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """A node of the cluster: its id (>= 0, unique, stable across restarts) and the base
    URL its HTTP service answers at (what clients and followers connect to)."""

    node_id: int
    url: str

    def __post_init__(self) -> None:
        int_field(self.node_id, "node id")
        if not isinstance(self.url, str) or not self.url or any(c.isspace() for c in self.url):
            raise InvalidArgumentError(
                f"node {self.node_id} url must be a non-empty string "
                f"without spaces, not {shown(self.url)}"
            )

    def to_dict(self) -> dict[str, Any]:
        return {"version": FORMAT_VERSION, "node_id": self.node_id, "url": self.url}

    @classmethod
    def from_dict(cls, obj: object) -> NodeInfo:
        d = mapping(obj, "node info")
        check_version(d, "node info")
        return cls(
            int_field(required(d, "node_id", "node info"), "node id"),
            str_field(required(d, "url", "node info"), "node url"),
        )

    def to_json(self) -> str:
        return dumps(self.to_dict())

    @classmethod
    def from_json(cls, data: str | bytes) -> NodeInfo:
        return cls.from_dict(decode(data, "node info"))


# ---- partitions -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PartitionState:
    """One partition's leadership: who holds it, who may take it over, and the epochs that
    fence the rest. The invariants are in the module docstring; the constructor refuses
    a state that breaks one (InvalidArgumentError, one line).

    ``replicas``: the nodes holding a copy, the first one the preferred leader;
    ``leader``: the node that takes writes (None: offline); ``leader_epoch``: bumped on
    every leader change, stamped on every batch the leader writes (see
    :mod:`tiered_log.local.leader_epoch`); ``isr``: the in-sync replicas, those holding
    every committed record, the only ones a clean election picks from;
    ``partition_epoch``: bumped on every change, the version a change is made against.
    """

    topic: str
    partition: int
    replicas: tuple[int, ...]
    leader: int | None
    leader_epoch: int
    isr: tuple[int, ...]
    partition_epoch: int
    removing: tuple[int, ...] = ()
    """Replicas on their way out (a reassignment, :func:`begin_reassign`): dropped by
    :func:`finish_reassign` once every other replica is in the ISR."""

    def __post_init__(self) -> None:
        validate_topic_name(self.topic)
        int_field(self.partition, f"topic {self.topic} partition")
        what = f"partition {self.topic}/{self.partition}"
        object.__setattr__(self, "replicas", _ids(self.replicas, f"{what} replicas"))
        object.__setattr__(self, "isr", _ids(self.isr, f"{what} isr"))
        if not self.replicas:
            raise InvalidArgumentError(f"{what} has no replicas")
        if not set(self.isr) <= set(self.replicas):
            raise InvalidArgumentError(
                f"{what} isr {list(self.isr)} is not a subset of its replicas {list(self.replicas)}"
            )
        if self.leader is not None:
            int_field(self.leader, f"{what} leader")
            if self.leader not in self.isr:
                raise InvalidArgumentError(
                    f"{what} leader {self.leader} is not in its isr {list(self.isr)}"
                )
        int_field(self.leader_epoch, f"{what} leader epoch")
        int_field(self.partition_epoch, f"{what} partition epoch")
        object.__setattr__(self, "removing", _ids(self.removing, f"{what} removing"))
        if not set(self.removing) < set(self.replicas):
            raise InvalidArgumentError(
                f"{what} removes {list(self.removing)}: not some of its replicas "
                f"{list(self.replicas)}"
            )

    @property
    def name(self) -> str:
        """``topic/partition``, for messages."""
        return f"{self.topic}/{self.partition}"

    def to_dict(self) -> dict[str, Any]:
        d = {
            "version": FORMAT_VERSION,
            "topic": self.topic,
            "partition": self.partition,
            "replicas": list(self.replicas),
            "leader": self.leader,
            "leader_epoch": self.leader_epoch,
            "isr": list(self.isr),
            "partition_epoch": self.partition_epoch,
        }
        if self.removing:  # written only during a reassignment
            d["removing"] = list(self.removing)
        return d

    @classmethod
    def from_dict(cls, obj: object) -> PartitionState:
        d = mapping(obj, "partition state")
        check_version(d, "partition state")
        topic = validate_topic_name(required(d, "topic", "partition state"))
        partition = int_field(
            required(d, "partition", f"topic {topic} partition state"), f"topic {topic} partition"
        )
        what = f"partition {topic}/{partition} state"
        leader = required(d, "leader", what)
        return cls(
            topic=topic,
            partition=partition,
            replicas=_ids(required(d, "replicas", what), f"{what} replicas"),
            leader=None if leader is None else int_field(leader, f"{what} leader"),
            leader_epoch=int_field(required(d, "leader_epoch", what), f"{what} leader_epoch"),
            isr=_ids(required(d, "isr", what), f"{what} isr"),
            partition_epoch=int_field(
                required(d, "partition_epoch", what), f"{what} partition_epoch"
            ),
            removing=_ids(d.get("removing", []), f"{what} removing"),
        )

    def to_json(self) -> str:
        return dumps(self.to_dict())

    @classmethod
    def from_json(cls, data: str | bytes) -> PartitionState:
        return cls.from_dict(decode(data, "partition state"))


def begin_reassign(state: PartitionState, old: int, new: int) -> PartitionState:
    """Start moving ``state``'s replica on node ``old`` to node ``new`` (a node replaced
    for good): ``new`` joins the replicas (it rebuilds and catches up as a follower) and
    ``old`` is marked removing; :func:`finish_reassign` drops it once every other
    replica is in the ISR, so the partition never has fewer in-sync copies than before.
    InvalidArgumentError (one line) when ``old`` is not a replica, ``new`` is one, or a
    reassignment is under way."""
    if state.removing:
        raise InvalidArgumentError(
            f"partition {state.name} is being reassigned already (removing {list(state.removing)})"
        )
    if old not in state.replicas:
        raise InvalidArgumentError(f"node {old} holds no replica of {state.name}")
    if new in state.replicas:
        raise InvalidArgumentError(f"node {new} holds a replica of {state.name} already")
    return replace(
        state,
        replicas=(*state.replicas, int_field(new, "node")),
        removing=(old,),
        partition_epoch=state.partition_epoch + 1,
    )


def finish_reassign(state: PartitionState, live: Set[int]) -> PartitionState | None:
    """The end of a reassignment, once every replica not being removed is in the ISR:
    the removed replicas leave the replicas and the ISR; a removed leader hands over to
    the first live ISR member left (a leader change: epoch + 1). None: nothing to do yet."""
    if not state.removing:
        return None
    keep = tuple(r for r in state.replicas if r not in state.removing)
    if not set(keep) <= set(state.isr):
        return None
    isr = tuple(r for r in state.isr if r not in state.removing)
    leader, epoch = state.leader, state.leader_epoch
    if leader in state.removing:
        leader = next((r for r in isr if r in live), None)
        if leader is None:
            return None
        epoch += 1
    return replace(
        state,
        replicas=keep,
        isr=isr,
        leader=leader,
        leader_epoch=epoch,
        removing=(),
        partition_epoch=state.partition_epoch + 1,
    )


def _in_replica_order(state: PartitionState, members: Set[int]) -> tuple[int, ...]:
    return tuple(r for r in state.replicas if r in members)


def _change(
    state: PartitionState, *, leader: int | None, isr: tuple[int, ...]
) -> PartitionState | None:
    """The state with ``leader`` and ``isr``, epochs bumped by the rules; None if equal."""
    if leader == state.leader and isr == state.isr:
        return None
    return replace(
        state,
        leader=leader,
        isr=isr,
        leader_epoch=state.leader_epoch + (leader != state.leader),
        partition_epoch=state.partition_epoch + 1,
    )


def initial_state(
    topic: str, partition: int, replicas: Iterable[int], live: Set[int] | None = None
) -> PartitionState:
    """A new partition (epochs 0): the ISR is its live replicas (``live`` None: all of
    them), the leader the first of those in ``replicas`` order (the preferred one when
    it is alive). InvalidArgumentError when no replica is alive (as KRaft, which refuses
    to create a partition nobody can lead)."""
    reps = _ids(tuple(replicas), f"partition {topic}/{partition} replicas")
    isr = tuple(r for r in reps if live is None or r in live)
    if not isr and reps:
        raise InvalidArgumentError(
            f"partition {topic}/{partition}: none of its replicas {list(reps)} is alive"
        )
    return PartitionState(topic, partition, reps, isr[0] if isr else None, 0, isr, 0)


def elect_leader(
    state: PartitionState, live: Set[int], unclean: bool = False
) -> PartitionState | None:
    """Kafka's offline-partition election: a leader for ``state`` given the ``live`` nodes.

    - the leader is alive: no election, None (moving leadership to the preferred replica
      is :func:`elect_preferred_leader`);
    - else the first replica, in ``replicas`` order, in the ISR and alive leads; the ISR
      keeps its live members only (the dead ones may hold records past the new leader's
      end: they rejoin through :func:`expand_isr` after they truncate and catch up);
    - else, ``unclean``: the first live replica leads, alone in the ISR (records the
      others acknowledged may be lost: Kafka's ``unclean.leader.election.enable``);
    - else the partition is offline: leader None, leader epoch bumped (a leader change,
      as KRaft: the old leader's epoch is stale at once, before anyone replaces it), ISR
      unchanged so that any of its members coming back can be elected cleanly; None if it
      was offline already.
    """
    if state.leader is not None and state.leader in live:
        return None
    isr = set(state.isr)
    clean = [r for r in state.replicas if r in isr and r in live]
    if clean:
        return _change(state, leader=clean[0], isr=_in_replica_order(state, isr & set(live)))
    alive = [r for r in state.replicas if r in live]
    if unclean and alive:
        return _change(state, leader=alive[0], isr=(alive[0],))
    return _change(state, leader=None, isr=state.isr)


def elect_preferred_leader(state: PartitionState, live: Set[int]) -> PartitionState | None:
    """Kafka's preferred-replica election: hand leadership to ``replicas[0]`` when it is
    alive, in the ISR and not the leader already (else None). The ISR is unchanged."""
    preferred = state.replicas[0]
    if state.leader == preferred or preferred not in live or preferred not in state.isr:
        return None
    return _change(state, leader=preferred, isr=state.isr)


def shrink_isr(state: PartitionState, remove: Set[int]) -> PartitionState | None:
    """``state`` without the nodes of ``remove`` in its ISR (followers that fell behind or
    died); None if none of them is a member.

    Refused (InvalidArgumentError): removing the leader (it never leaves its own ISR: a
    leader is replaced by an election, not shrunk out), and, for an offline partition,
    removing the last members (an empty ISR would leave only unclean elections)."""
    if state.leader is not None and state.leader in remove:
        raise InvalidArgumentError(
            f"partition {state.name}: leader {state.leader} cannot leave its own isr"
        )
    isr = tuple(r for r in state.isr if r not in remove)
    if not isr and state.isr:
        raise InvalidArgumentError(
            f"partition {state.name}: removing {sorted(remove)} would leave the isr empty"
        )
    return _change(state, leader=state.leader, isr=isr)


def expand_isr(state: PartitionState, add: int) -> PartitionState | None:
    """``state`` with replica ``add`` back in its ISR (it caught up with the leader); None
    if it is a member already. The ISR is kept in ``replicas`` order.

    Refused (InvalidArgumentError): a node that is not a replica, and an offline partition
    (the leader admits followers; without one nobody can vouch that ``add`` caught up)."""
    if add not in state.replicas:
        raise InvalidArgumentError(
            f"partition {state.name}: node {add} is not one of its replicas {list(state.replicas)}"
        )
    if add in state.isr:
        return None
    if state.leader is None:
        raise InvalidArgumentError(
            f"partition {state.name} has no leader to admit node {add} to its isr"
        )
    return _change(state, leader=state.leader, isr=_in_replica_order(state, {*state.isr, add}))


# ---- replica placement ----------------------------------------------------------------


def assign_replicas(
    partitions: int,
    replication_factor: int,
    live_nodes: Iterable[int],
    start: int,
    *,
    first_partition: int = 0,
) -> list[tuple[int, ...]]:
    """The replicas of ``partitions`` new partitions, first one the preferred leader:
    Kafka's rack-unaware assignment (``AdminUtils.assignReplicasToBrokersRackUnaware``).

    Nodes are sorted by id. Partition ``p``'s first replica is node ``(p + start) % n``
    (round robin: leaders spread evenly); its followers follow at a shift of
    ``1 + (shift + j) % (n - 1)`` from it, where ``shift`` starts at ``start`` and grows by
    one each time ``p`` wraps around the nodes, so that the followers of one node's
    partitions are spread over the others too, not always its right-hand neighbour.
    ``start`` >= 0 (Kafka draws it at random; pass a random one for the same effect);
    ``first_partition``: the index of the first new partition (adding partitions to a
    topic continues its pattern). Refused (InvalidArgumentError, one line) when fewer
    nodes are alive than ``replication_factor``.
    """
    int_field(partitions, "partitions", minimum=1)
    int_field(replication_factor, "replication factor", minimum=1)
    int_field(start, "start")
    int_field(first_partition, "first partition")
    nodes = sorted(_ids(tuple(live_nodes), "live nodes"))
    n = len(nodes)
    if replication_factor > n:
        raise InvalidArgumentError(
            f"replication factor {replication_factor} is more than the {n} live nodes"
        )
    shift = start
    out = []
    for p in range(first_partition, first_partition + partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        followers = [
            nodes[(first + 1 + (shift + j) % (n - 1)) % n] for j in range(replication_factor - 1)
        ]
        out.append((nodes[first], *followers))
    return out


__all__ = [
    "FORMAT_VERSION",
    "NodeInfo",
    "PartitionState",
    "TopicMeta",
    "assign_replicas",
    "begin_reassign",
    "elect_leader",
    "elect_preferred_leader",
    "expand_isr",
    "finish_reassign",
    "initial_state",
    "shrink_isr",
    "validate_topic_name",
]
