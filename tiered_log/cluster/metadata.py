"""The cluster's topic and partition metadata in etcd, as typed values.

:class:`ClusterMetadata` is the one place that knows the key layout (relative to the
:class:`~tiered_log.cluster.etcd.MetaStore`'s ``/tiered_log/<cluster>/`` prefix)::

    topics/<name>                  -> TopicMeta.to_dict()       (model.TopicMeta)
    partitions/<topic>/<p>         -> PartitionState.to_dict()  (model.PartitionState)

``<p>`` is the partition number in decimal (no padding); topic names cannot hold ``/``
(:func:`~tiered_log.cluster.model.validate_topic_name`), so ``partitions/<topic>/`` is
exactly one topic's partitions. (``nodes/<id>`` and ``controller`` belong to
:mod:`~tiered_log.cluster.membership`; :meth:`ClusterMetadata.change_isr` reads
``nodes/`` to add only live nodes.)

Who writes what, and the invariants kept:

- **A topic and its partitions appear together**: :meth:`ClusterMetadata.create_topic`
  writes them in one etcd transaction, only if none of the keys exists
  (:meth:`~tiered_log.cluster.etcd.MetaStore.create_all`).
- **No lost update**: a partition state changes only by compare-and-swap on the
  ``mod_revision`` the writer read (:meth:`ClusterMetadata.update_partition`); a writer
  that lost the race gets False, re-reads and decides again.
- **Leadership is written by the controller only**, each write carrying the
  controller's :class:`~tiered_log.cluster.etcd.Fence` (see
  :mod:`~tiered_log.cluster.controller`), so a deposed controller's writes fail.
- **ISR changes are written by the partition's leader** through
  :meth:`ClusterMetadata.change_isr`, in the same compare-and-swap as the check that the
  stored leader and leader epoch are still the caller's: a deposed leader (a new leader
  epoch) cannot change the ISR; given the ISR its proposal was based on, only its own
  difference is applied (a dead node the controller removed meanwhile stays out), and
  a node that is not live is never added.
- **Epochs only grow, and never two leaders in one leader epoch**:
  :meth:`ClusterMetadata.update_partition` refuses (InvalidArgumentError) a new state
  whose ``partition_epoch`` is not larger, or whose ``leader`` differs without a larger
  ``leader_epoch`` (or is the same with another one): since the old state is the stored
  one (the compare-and-swap), every stored history obeys the model's rules.

Thread-safety: a :class:`ClusterMetadata` keeps no state of its own but a set of the
undecodable keys already warned about (under a lock); share it between threads freely.
Errors reaching etcd are :class:`~tiered_log.errors.MetadataUnavailableError` as raised
by the store.
"""

from __future__ import annotations

import logging
import random
import threading
import uuid
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from tiered_log.broker.topic_meta import check_growth
from tiered_log.cluster.etcd import MAX_TXN_OPS, Fence, MetaStore, Versioned
from tiered_log.cluster.membership import NODES_PREFIX
from tiered_log.cluster.model import (
    PartitionState,
    TopicMeta,
    assign_replicas,
    initial_state,
    validate_topic_name,
)
from tiered_log.config import TopicConfig
from tiered_log.errors import (
    InvalidArgumentError,
    MetadataUnavailableError,
    TopicExistsError,
    TopicNotFoundError,
)

log = logging.getLogger(__name__)

TOPICS_PREFIX = "topics/"
PARTITIONS_PREFIX = "partitions/"
MAX_PARTITIONS = MAX_TXN_OPS - 2
"""The most partitions a topic may have: its keys and the topic's are created in one
etcd transaction (one op is kept for a fence)."""
CAS_RETRIES = 5
"""How many times :meth:`ClusterMetadata.change_isr` and
:meth:`ClusterMetadata.delete_topic` re-read and try again after losing a
compare-and-swap to another writer."""

PartitionKey = tuple[str, int]


def topic_key(name: str) -> str:
    """The key of topic ``name``'s :class:`TopicMeta`."""
    return f"{TOPICS_PREFIX}{name}"


def partition_key(topic: str, partition: int) -> str:
    """The key of one partition's :class:`PartitionState`."""
    return f"{PARTITIONS_PREFIX}{topic}/{partition}"


class ClusterMetadata:
    """Typed reads and compare-and-swap writes of topics and partition states.

    See the module docstring for the key layout and who may write what. Every method
    reads or writes etcd directly (no cache): what it returns is etcd's state at that
    moment, with the ``mod_revision`` a later :meth:`update_partition` compares.
    """

    def __init__(self, store: MetaStore) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._warned: set[tuple[str, int]] = set()  # (key, mod_revision) undecodable

    # ---- reads ---------------------------------------------------------------------

    def _warn_once(self, v: Versioned, exc: Exception) -> None:
        with self._lock:
            if (v.key, v.mod_revision) in self._warned:
                return
            self._warned.add((v.key, v.mod_revision))
        log.warning(
            "ignoring undecodable metadata %s (revision %d): %s", v.key, v.mod_revision, exc
        )

    def topics(self) -> dict[str, TopicMeta]:
        """Every topic by name (one read). An undecodable value is logged once and left out."""
        out: dict[str, TopicMeta] = {}
        for key, v in sorted(self.store.get_prefix(TOPICS_PREFIX).items()):
            try:
                meta = TopicMeta.from_dict(v.value)
            except InvalidArgumentError as exc:
                self._warn_once(v, exc)
                continue
            if topic_key(meta.name) != key:
                self._warn_once(v, InvalidArgumentError(f"names topic {meta.name!r}"))
                continue
            out[meta.name] = meta
        return out

    def topic(self, name: str) -> TopicMeta | None:
        """Topic ``name``'s metadata; None if it does not exist. InvalidArgumentError if
        its stored value cannot be decoded."""
        v = self.store.get(topic_key(validate_topic_name(name)))
        return None if v is None else TopicMeta.from_dict(v.value)

    def partitions(
        self, topic: str | None = None
    ) -> dict[PartitionKey, tuple[PartitionState, int]]:
        """``(topic, partition) -> (state, mod_revision)`` of every partition, or of
        ``topic``'s only, in one read (a consistent snapshot), ordered by topic then
        partition. An undecodable value (or one whose topic/partition disagree with its
        key) is logged once and left out."""
        prefix = (
            PARTITIONS_PREFIX
            if topic is None
            else f"{PARTITIONS_PREFIX}{validate_topic_name(topic)}/"
        )
        out: dict[PartitionKey, tuple[PartitionState, int]] = {}
        for key, v in self.store.get_prefix(prefix).items():
            try:
                state = PartitionState.from_dict(v.value)
            except InvalidArgumentError as exc:
                self._warn_once(v, exc)
                continue
            if partition_key(state.topic, state.partition) != key:
                self._warn_once(v, InvalidArgumentError(f"names partition {state.name}"))
                continue
            out[(state.topic, state.partition)] = (state, v.mod_revision)
        return dict(sorted(out.items()))

    def partition(self, topic: str, partition: int) -> tuple[PartitionState, int] | None:
        """One partition's ``(state, mod_revision)``; None if it does not exist."""
        v = self.store.get(partition_key(validate_topic_name(topic), partition))
        return None if v is None else (PartitionState.from_dict(v.value), v.mod_revision)

    # ---- topics --------------------------------------------------------------------

    def create_topic(
        self,
        meta: TopicMeta,
        live_nodes: Iterable[int],
        *,
        fence: Fence | None = None,
        start: int | None = None,
    ) -> list[PartitionState]:
        """Create topic ``meta`` with its partitions placed over ``live_nodes``; their
        initial states (epochs 0, every replica in the ISR, the preferred replica
        leading), in partition order.

        Replicas by :func:`~tiered_log.cluster.model.assign_replicas` from ``start``
        (default: random, as Kafka, so leaders of small topics do not all land on the
        lowest node). A ``meta`` without ``topic_id`` gets a fresh one (a topic created
        again under an old name is another topic). The topic key and every partition key
        are written in one transaction, only if none exists (and ``fence`` holds).

        Raises InvalidArgumentError (one line) when fewer nodes are live than the
        replication factor or the topic has more than :data:`MAX_PARTITIONS` partitions;
        TopicExistsError when the topic (or a partition key left by an unfinished
        :meth:`delete_topic`) exists; MetadataUnavailableError (retriable) when the fence
        failed (the caller is no longer the controller: retry at the new one).
        """
        live = sorted(set(live_nodes))
        if meta.replication_factor > len(live):
            raise InvalidArgumentError(
                f"topic {meta.name}: replication factor {meta.replication_factor} is more "
                f"than the {len(live)} live nodes {live}"
            )
        if meta.partitions > MAX_PARTITIONS:
            raise InvalidArgumentError(
                f"topic {meta.name}: {meta.partitions} partitions, at most {MAX_PARTITIONS}"
            )
        if not meta.topic_id:
            meta = replace(meta, topic_id=uuid.uuid4().hex)
        first = random.randrange(len(live)) if start is None else start
        placement = assign_replicas(meta.partitions, meta.replication_factor, live, first)
        states = [initial_state(meta.name, p, replicas) for p, replicas in enumerate(placement)]
        values = {topic_key(meta.name): meta.to_dict()}
        values.update({partition_key(s.topic, s.partition): s.to_dict() for s in states})
        if not self.store.create_all(values, fence=fence):
            if self.store.get(topic_key(meta.name)) is not None:
                raise TopicExistsError(f"topic {meta.name} already exists")
            if self.store.get_prefix(f"{PARTITIONS_PREFIX}{meta.name}/"):
                raise TopicExistsError(
                    f"topic {meta.name} is still being deleted: partition keys remain"
                )
            raise MetadataUnavailableError(  # only the fence can have failed
                f"topic {meta.name} not created: this node is no longer the controller"
            )
        log.info(
            "created topic %s (%d partitions, replication factor %d) on nodes %s",
            meta.name,
            meta.partitions,
            meta.replication_factor,
            live,
        )
        return states

    def add_partitions(
        self, name: str, count: int, live_nodes: Iterable[int]
    ) -> list[PartitionState]:
        """Grow topic ``name`` to ``count`` partitions (Kafka's CreatePartitions): the new
        ones placed over ``live_nodes`` as :meth:`create_topic` places a topic's,
        continuing its pattern, and the topic key's new count written with their keys in
        one transaction, compare-and-swapped on the topic key's revision (retried on a
        conflict). Returns the new partitions' initial states.

        Raises TopicNotFoundError; InvalidArgumentError (one line) when ``count`` is not
        above the current count, passes :data:`MAX_PARTITIONS`, or fewer nodes are live
        than the replication factor; MetadataUnavailableError after :data:`CAS_RETRIES`
        lost races."""
        validate_topic_name(name)
        live = sorted(set(live_nodes))
        for _ in range(CAS_RETRIES):
            v = self.store.get(topic_key(name))
            if v is None:
                raise TopicNotFoundError(f"topic {name} does not exist")
            meta = TopicMeta.from_dict(v.value)
            check_growth(name, meta.partitions, count)
            if count > MAX_PARTITIONS:
                raise InvalidArgumentError(
                    f"topic {name}: {count} partitions, at most {MAX_PARTITIONS}"
                )
            if meta.replication_factor > len(live):
                raise InvalidArgumentError(
                    f"topic {name}: replication factor {meta.replication_factor} is more "
                    f"than the {len(live)} live nodes {live}"
                )
            placement = assign_replicas(
                count - meta.partitions,
                meta.replication_factor,
                live,
                random.randrange(len(live)),
                first_partition=meta.partitions,
            )
            states = [
                initial_state(name, meta.partitions + i, replicas)
                for i, replicas in enumerate(placement)
            ]
            grown = replace(meta, partitions=count)
            creates = {partition_key(s.topic, s.partition): s.to_dict() for s in states}
            if self.store.put_if_and_create(v.key, grown.to_dict(), v.mod_revision, creates):
                log.info("topic %s: %d partitions now (was %d)", name, count, meta.partitions)
                return states
        raise MetadataUnavailableError(
            f"topic {name}: adding partitions lost {CAS_RETRIES} races to other writers"
        )

    def delete_topic(self, name: str, *, fence: Fence | None = None) -> bool:
        """Delete topic ``name``: its partition keys, then its topic key (each
        compare-and-swapped on the revision just read, retried on a conflict). True if
        this call deleted the topic key; TopicNotFoundError if there is none.

        Not one transaction (a topic may have more partitions than one etcd transaction
        holds): partitions go first, so a topic is never gone while partition keys of it
        remain unless a call was interrupted; calling it again finishes the job, and
        :meth:`create_topic` refuses the name until then. Raises MetadataUnavailableError
        (retriable) after :data:`CAS_RETRIES` lost races (a controller busy with the
        partitions)."""
        validate_topic_name(name)
        for _ in range(CAS_RETRIES):
            topic = self.store.get(topic_key(name))
            parts = self.store.get_prefix(f"{PARTITIONS_PREFIX}{name}/")
            if topic is None and not parts:
                raise TopicNotFoundError(f"topic {name} does not exist")
            lost = [
                k
                for k, v in parts.items()
                if not self.store.delete_if(k, v.mod_revision, fence=fence)
            ]
            if lost:
                continue
            if topic is None:  # an earlier call was interrupted: now finished
                return False
            if self.store.delete_if(topic.key, topic.mod_revision, fence=fence):
                log.info("deleted topic %s", name)
                return True
        raise MetadataUnavailableError(
            f"topic {name}: deleting lost {CAS_RETRIES} races to other writers (or the fence failed)"
        )

    def update_topic_config(self, name: str, config: dict[str, Any]) -> TopicMeta:
        """Replace topic ``name``'s ``config`` (its log settings, as JSON), compare-and-
        swapped on the revision just read (retried on a conflict), everything else kept;
        every node applies it at its next metadata read. Returns the new TopicMeta.
        TopicNotFoundError; MetadataUnavailableError after :data:`CAS_RETRIES` lost races.

        No fence: a topic's settings are not the controller's (it writes partition
        states only); two alters racing each win on the revision they read."""
        validate_topic_name(name)
        for _ in range(CAS_RETRIES):
            v = self.store.get(topic_key(name))
            if v is None:
                raise TopicNotFoundError(f"topic {name} does not exist")
            meta = replace(TopicMeta.from_dict(v.value), config=TopicConfig.model_validate(config))
            if self.store.put_if(v.key, meta.to_dict(), v.mod_revision):
                log.info("topic %s: configuration changed", name)
                return meta
        raise MetadataUnavailableError(
            f"topic {name}: changing its configuration lost {CAS_RETRIES} races to other writers"
        )

    # ---- partition states ---------------------------------------------------------

    def update_partition(
        self,
        old_state: PartitionState,
        mod_revision: int,
        new_state: PartitionState,
        *,
        fence: Fence | None = None,
    ) -> bool:
        """Replace ``old_state`` (read at ``mod_revision``) by ``new_state``, only if the
        stored state is still that revision (and ``fence`` holds). True if written;
        False if another writer changed it first (or the fence failed): re-read.

        InvalidArgumentError (nothing written) unless ``new_state`` is a successor of
        ``old_state`` (:func:`check_successor`): same topic and partition,
        ``partition_epoch`` larger, ``leader_epoch`` larger exactly when the
        leader differs, equal otherwise (never two leaders in one leader epoch)."""
        check_successor(old_state, new_state)
        return self.store.put_if(
            partition_key(new_state.topic, new_state.partition),
            new_state.to_dict(),
            mod_revision,
            fence=fence,
        )

    def change_isr(
        self,
        topic: str,
        partition: int,
        leader_id: int,
        leader_epoch: int,
        new_isr: Iterable[int],
        *,
        base_isr: Iterable[int] | None = None,
    ) -> PartitionState | None:
        """A partition LEADER's ISR change: make the ISR of ``topic``/``partition``
        ``new_isr`` (kept in replicas order), as leader ``leader_id`` of ``leader_epoch``.

        ``base_isr``: the (committed) ISR the leader's proposal was computed from. When
        given, only the difference is applied, to the ISR stored now: the members
        ``base_isr`` has and ``new_isr`` lacks leave, those ``new_isr`` adds join, so a
        change someone else made meanwhile (the controller removing a dead node) is not
        undone by a proposal computed before it. Without it the ISR is set to
        ``new_isr``. Either way a node is only added while it is registered (live, under
        ``nodes/``), as KRaft refuses fenced brokers: a dead node is left out, and the
        returned state shows it.

        Re-reads the state; returns None, writing nothing, if the stored leader or
        leader epoch is not the caller's (it was deposed: it must stop acting as leader).
        Else writes the change by compare-and-swap (``partition_epoch`` + 1, leader and
        leader epoch unchanged), re-reading and deciding again up to
        :data:`CAS_RETRIES` times when another writer (the controller) got in first.
        Returns the state now stored (unchanged, nothing written, when the change makes
        no difference).

        InvalidArgumentError if ``new_isr`` leaves out the leader, names a node that is
        not a replica or has duplicates; TopicNotFoundError if the partition does not
        exist; MetadataUnavailableError (retriable) after :data:`CAS_RETRIES` lost races.
        """
        wanted = tuple(new_isr)
        base = None if base_isr is None else set(base_isr)
        for _ in range(CAS_RETRIES):
            read = self.partition(topic, partition)
            if read is None:
                raise TopicNotFoundError(f"partition {topic}/{partition} does not exist")
            state, revision = read
            if state.leader != leader_id or state.leader_epoch != leader_epoch:
                log.info(
                    "partition %s: ISR change by node %s of leader epoch %d refused: "
                    "the leader is %s of epoch %d",
                    state.name,
                    leader_id,
                    leader_epoch,
                    state.leader,
                    state.leader_epoch,
                )
                return None
            if len(set(wanted)) != len(wanted):
                raise InvalidArgumentError(
                    f"partition {state.name}: isr {list(wanted)} has duplicates"
                )
            if leader_id not in wanted:
                raise InvalidArgumentError(
                    f"partition {state.name}: leader {leader_id} cannot leave its own isr"
                )
            if not set(wanted) <= set(state.replicas):
                raise InvalidArgumentError(
                    f"partition {state.name}: isr {list(wanted)} names nodes that are not "
                    f"replicas {list(state.replicas)}"
                )
            target = (
                set(wanted)
                if base is None
                else ((set(state.isr) - (base - set(wanted))) | (set(wanted) - base))
            )
            joining = target - set(state.isr)
            if joining:
                dead = joining - self._registered_nodes()
                if dead:
                    log.info(
                        "partition %s: not adding %s to the isr: not live", state.name, sorted(dead)
                    )
                    target -= dead
            isr = tuple(r for r in state.replicas if r in target)
            if isr == state.isr:
                return state
            new = replace(state, isr=isr, partition_epoch=state.partition_epoch + 1)
            if self.update_partition(state, revision, new):
                log.info(
                    "partition %s: isr %s -> %s (leader %d, epoch %d)",
                    state.name,
                    list(state.isr),
                    list(isr),
                    leader_id,
                    leader_epoch,
                )
                return new
        raise MetadataUnavailableError(
            f"partition {topic}/{partition}: ISR change lost {CAS_RETRIES} races to other writers"
        )

    def _registered_nodes(self) -> set[int]:
        """The ids of the nodes registered now (``nodes/<id>``, lease-bound: live)."""
        out = set()
        for v in self.store.get_prefix(NODES_PREFIX).values():
            node = v.value.get("node_id") if isinstance(v.value, dict) else None
            if isinstance(node, int) and not isinstance(node, bool):
                out.add(node)
        return out


def check_successor(old: PartitionState, new: PartitionState) -> None:
    """Raise InvalidArgumentError unless ``new`` may follow ``old`` in a partition's
    stored history: same topic and partition, a larger partition epoch, and a larger
    leader epoch exactly when the leader changes (equal otherwise)."""
    if (old.topic, old.partition) != (new.topic, new.partition):
        raise InvalidArgumentError(f"partition {new.name} cannot replace partition {old.name}")
    if new.partition_epoch <= old.partition_epoch:
        raise InvalidArgumentError(
            f"partition {new.name}: partition epoch {new.partition_epoch} does not follow "
            f"{old.partition_epoch}"
        )
    if new.leader != old.leader and new.leader_epoch <= old.leader_epoch:
        raise InvalidArgumentError(
            f"partition {new.name}: leader {old.leader} -> {new.leader} without a larger "
            f"leader epoch than {old.leader_epoch}"
        )
    if new.leader == old.leader and new.leader_epoch != old.leader_epoch:
        raise InvalidArgumentError(
            f"partition {new.name}: leader epoch {old.leader_epoch} -> {new.leader_epoch} "
            f"without a leader change"
        )


__all__ = [
    "CAS_RETRIES",
    "MAX_PARTITIONS",
    "PARTITIONS_PREFIX",
    "TOPICS_PREFIX",
    "ClusterMetadata",
    "check_successor",
    "partition_key",
    "topic_key",
]
