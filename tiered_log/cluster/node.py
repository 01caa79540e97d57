"""One node of a cluster: its membership, its share of the controller election, and the
role it plays for each partition it holds a replica of (Kafka's ``ReplicaManager``).

The node learns the cluster's metadata by polling etcd (:class:`ClusterMetadata`, every
``poll_interval_s``) and moves each of its replicas to the role the metadata gives it:

- **leader** of epoch E: the log records epoch E from its log end
  (:meth:`~tiered_log.partition.log.TieredLog.assign_leader_epoch`), a
  :class:`~tiered_log.cluster.replica.LeaderReplication` tracks the followers, and the
  node answers produce (``acks=all`` waits for the ISR), consumer fetch (below the high
  watermark) and the followers' replication fetches;
- **follower** of leader L in epoch E: a :class:`~tiered_log.cluster.fetcher.ReplicaFetcher`
  copies L's log; produce and consume are refused with ``not_leader`` naming L;
- **none** (offline partition, or not a replica): every request is ``not_leader``.

Invariants (who may write what):

- A node serves as leader only for the epoch the metadata last named. It does not
  resign when etcd is out of reach (leaders keep serving through an etcd outage; no
  leader changes then): a deposed leader is fenced by its followers instead. A paused
  node that wakes after the controller replaced it acknowledges no ``acks=all`` write:
  its followers have moved to the new leader (they fetch with the new epoch and no
  longer from it), so its high watermark cannot pass what they had; its ISR shrink is
  refused by etcd (its epoch is over), upon which it resigns; and once it reads the new
  metadata it becomes a follower and truncates whatever it appended meanwhile. The
  controller only elects from the ISR, so a leader whose committed ISR is itself alone
  is never replaced by another while it lives.
- The leader proposes ISR changes to etcd compared against the partition's revision
  and its own leader epoch (:meth:`ClusterMetadata.change_isr`), and uses an ISR only
  once it is stored; a refused change means it was deposed: it resigns and waits for
  the metadata.
- Only the controller (one node, elected in etcd) changes leaders; see
  :mod:`~tiered_log.cluster.controller`.

Local logs: the node holds a log for every partition of every topic in the metadata
(the broker's :class:`~tiered_log.broker.topics.TopicManager`, which it drives directly);
those it is not a replica of stay empty.

Thread-safety: one poll thread applies the metadata (role changes serialize on the
node's lock); the broker calls :meth:`leader_of` and :meth:`leads` on its event loop
(they take no lock: a role is read as the poll thread last set it) and
:meth:`appended`, :meth:`replica_fetch` on its executors; every method is safe from any
thread.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..broker.topics import TopicManager
from ..errors import (
    FencedEpochError,
    InvalidArgumentError,
    LogClosedError,
    NotLeaderError,
    TieredLogError,
)
from ..local.ranges import FetchRanges
from ..partition import TieredLog
from .controller import Controller
from .etcd import MetaStore
from .fetcher import HttpTransport, ReplicaFetcher
from .kafka_fetch import KafkaTransport, client_tls
from .lead_views import LeadViews
from .membership import ControllerElection, Membership
from .metadata import ClusterMetadata
from .model import PartitionState, TopicMeta, begin_reassign
from .protocol import ReplicaAnswer, ReplicaFetch, ReplicaTransport, epochs_from
from .replica import LeaderReplication

log = logging.getLogger(__name__)


STALE_AFTER_S = 1.0
"""A node whose last successful read of the metadata is older than this (it polls every
``poll_interval_s``) reports its view as stale: it cannot reach etcd now."""


@dataclass(frozen=True)
class NodeConfig:
    """A node's cluster settings (from the service's :class:`~tiered_log.config.Settings`)."""

    node_id: int
    advertised_url: str
    etcd_url: str
    cluster_name: str = "tiered-log"
    lease_ttl_s: int = 3
    replica_lag_time_max_ms: int = 10_000
    unclean_leader_election: bool = False
    poll_interval_s: float = 0.1
    fetch_headers: dict[str, str] = field(default_factory=dict)
    cluster_token: str | None = None
    """The token this node's followers authenticate with at their leaders' Kafka
    listeners (SASL/PLAIN; the HTTP fetches send it in ``fetch_headers``)."""
    replication_transport: str = "auto"
    """``auto``: followers fetch over the leader's Kafka listener when it registered
    one, else HTTP; ``http``: always HTTP."""
    replica_fetch_wait_ms: int = 300
    """How long this node's followers' fetches wait at their leader for records."""
    kafka_address: str | None = None
    """``host:port`` of this node's Kafka listener, registered with its membership."""


def _lag_bytes(plog: TieredLog | None, replica: dict[str, Any]) -> int | None:
    """Bytes of the leader's local log a replica still lacks (None: unknown)."""
    end = replica["log_end_offset"]
    if plog is None or not isinstance(end, int) or end < 0:
        return None
    return 0 if replica["state"] == "leader" else plog.local_bytes_from(end)


class _Role:
    """What this node does for one partition now (guarded by the node's lock)."""

    def __init__(self, state: PartitionState) -> None:
        self.state = state
        self.replication: LeaderReplication | None = None
        self.fetcher: ReplicaFetcher | None = None

    def stop(self, why: str) -> None:
        if self.replication is not None:
            self.replication.resign(why)
            self.replication = None
        if self.fetcher is not None:
            self.fetcher.stop()
            self.fetcher = None


class _CommitWatermark:
    """A led partition's log as its replication's :class:`~.replica.Watermark`: the
    log's high watermark is the one value; a move of it also tells the broker
    (``ClusterNode.on_commit``: its parked ``acks=all`` produces re-check). Called on
    whichever thread moves the HW (a follower's fetch on the broker's read executor, an
    append on its append executor, an ISR change on the poll thread)."""

    def __init__(self, plog: TieredLog, node: ClusterNode, topic: str, partition: int) -> None:
        self._plog, self._node, self._topic, self._partition = plog, node, topic, partition

    @property
    def high_watermark(self) -> int:
        return self._plog.high_watermark

    def set_high_watermark(self, hw: int) -> int:
        before = self._plog.high_watermark
        try:
            now = self._plog.set_high_watermark(hw)
        except LogClosedError:  # the topic was deleted meanwhile: nothing to commit
            return before
        notify = self._node.on_commit
        if now > before and notify is not None:
            notify(self._topic, self._partition)
        return now


class ClusterNode:
    """This node's part in the cluster; see the module docstring."""

    def __init__(self, config: NodeConfig, logs: TopicManager) -> None:
        self.config = config
        self.node_id = config.node_id
        self._logs = logs
        self._topics_at_start: dict[tuple[str, str], int] | None = None
        """The topics (name, id) the metadata held at this node's start (its first
        round), with their partition counts then: the logs of those partitions it
        creates may be a lost disk's (never marked created empty). None until that
        round."""
        # A stall of etcd two thirds of the lease long can cost a lease (each is renewed
        # every third of it); an answer half the lease late counts as a gap in contact,
        # after which the controller waits (see the Controller's docstring).
        self.store = MetaStore(config.etcd_url, config.cluster_name, slow_s=config.lease_ttl_s / 2)
        self.store.note_gap()  # a node starting knows nothing of etcd's recent past
        self.metadata = ClusterMetadata(self.store)
        self.membership = Membership(
            self.store,
            config.node_id,
            config.advertised_url,
            lease_ttl_s=config.lease_ttl_s,
            kafka_address=config.kafka_address,
        )
        self.election = ControllerElection(self.store, self.membership)
        self.controller = Controller(
            self.store,
            self.membership,
            self.election,
            unclean_leader_election=config.unclean_leader_election,
        )
        self._lock = threading.RLock()
        """Serialises role changes (the poll thread, close): held across fetcher joins,
        so never taken by what answers a request. A bucket read before a lead runs
        outside it (:class:`LeadViews`)."""
        self._lead_views = LeadViews(config.node_id)
        self._view_lock = threading.Lock()
        """Guards the containers below for the few statements that change or copy them:
        readers (describe, partition_state, topic_meta, replication) take only this one,
        so a request never waits for a role change."""
        self._roles: dict[tuple[str, int], _Role] = {}
        self._nodes: dict[int, str] = {}
        self._kafka_addresses: dict[int, str] = {}
        """The nodes' Kafka addresses, read with their URLs at the start of each
        metadata round, so starting a fetcher asks nothing of etcd (poll thread only)."""
        self._seen: dict[int, str] = {}
        """Every node registered since this one started, with its last URL (describe)."""
        self._topics: dict[str, TopicMeta] = {}
        self._controller_id: int | None = None
        self._read_at = 0.0
        """When (monotonic) the last successful read of the metadata began."""
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, daemon=True, name=f"tiered-log-node-{config.node_id}"
        )
        self.last_error: str | None = None
        self.on_commit: Callable[[str, int], None] | None = None
        """Called (from any thread) when a led partition's high watermark moves up: the
        service wakes the consumers long-polling there."""
        self.on_leadership_end: Callable[[str, int], None] | None = None
        """Called (from any thread) when this node's leadership of a partition ends: the
        broker wakes the requests parked there (followers' fetches, ``acks=all``
        produces), which then answer that this node no longer leads it."""

    # ---- life -------------------------------------------------------------------------------

    def start(self) -> ClusterNode:
        """Register (MetadataUnavailableError if etcd cannot be reached), campaign for
        controller, and start applying the metadata. First, a node coming back waits
        until it is out of the ISRs it shares (:meth:`_wait_out_of_isrs`)."""
        self._wait_out_of_isrs()
        self.membership.start()
        self.election.start()
        self.controller.start()
        self.refresh()
        self._thread.start()
        return self

    def _wait_out_of_isrs(self, poll_s: float = 0.2) -> None:
        """A node that starts is a new incarnation: what its ISR memberships said of its
        logs may no longer hold (its disk wiped or replaced, or restarted within its
        lease, so the controller never saw it die). Before it registers, it waits until
        it is in no ISR that has another live member (its previous registration's lease
        ends, the controller drops it as dead); it then rejoins each ISR only by
        fetching up to the high watermark, as Kafka fences a restarted broker's stale ISR
        entries (KIP-903). Restarted on the same host, it first ends its previous
        start's lease (:meth:`Membership.end_previous_incarnation`), so the wait is the
        controller's reaction rather than the rest of the lease. Bounded by three lease
        TTLs and 5 s: then it registers
        anyway, with a WARNING. An ISR it holds alone (an offline partition) is kept: it
        is that partition's only clean leader."""
        # A restart on the same host: its previous start's registration ends now rather
        # than at its lease's end, so the controller drops it from the ISRs at once.
        self.membership.end_previous_incarnation()
        deadline = time.monotonic() + 3 * self.config.lease_ttl_s + 5
        said = False
        while True:
            live = set(self.membership.live_nodes())
            shared = sorted(
                f"{t}-{p}"
                for (t, p), (st, _rev) in self.metadata.partitions().items()
                if self.node_id in st.isr and (set(st.isr) - {self.node_id}) & live
            )
            if not shared:
                if said:
                    log.info("node %d: out of every shared ISR; registering", self.node_id)
                return
            if time.monotonic() >= deadline:
                log.warning(
                    "node %d: still in the ISR of %s; registering anyway",
                    self.node_id,
                    ", ".join(shared[:5]),
                )
                return
            if not said:
                log.info(
                    "node %d: in the ISR of %s from before this start: waiting for the "
                    "controller to drop it (it rejoins by fetching)",
                    self.node_id,
                    ", ".join(shared[:5]),
                )
                said = True
            time.sleep(poll_s)

    def close(self) -> None:
        """Resign every role, stop the threads, leave the cluster (lease revoked)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)
        self._lead_views.close()
        with self._lock:
            for role in self._roles.values():  # all at once: their parked fetches end together
                if role.fetcher is not None:
                    role.fetcher.stop_soon()
            for role in self._roles.values():
                role.stop("the node is shutting down")
            with self._view_lock:
                self._roles.clear()
        for closer in (
            self.controller.close,
            self.election.close,
            self.membership.close,
            self.store.close,
        ):
            try:
                closer()
            except TieredLogError as exc:
                log.warning("leaving the cluster: %s", exc.message)

    def _run(self) -> None:
        interval = self.config.poll_interval_s
        while not self._stop.wait(interval):
            try:
                self.refresh()
                self.maintain_isr()
                self.last_error = None
            except TieredLogError as exc:
                if exc.message != self.last_error:
                    log.warning("node %d: cluster metadata: %s", self.node_id, exc.message)
                self.last_error = exc.message
            except Exception:
                log.exception("node %d: applying the cluster metadata failed", self.node_id)

    # ---- applying the metadata ----------------------------------------------------------------

    def _created_since_start(self, meta: TopicMeta) -> bool:
        """Whether the partitions of ``meta``'s topic this node does not hold yet were
        created after it started (the topic, or partitions added to it since), not
        restored from the bucket: their logs are created empty (see
        :mod:`tiered_log.partition.empty_lead`)."""
        at_start = self._topics_at_start or {}
        count = at_start.get((meta.name, meta.topic_id))
        return (count is None or count < meta.partitions) and not meta.restored

    def refresh(self) -> None:
        """Read the metadata once and move every local replica to its role."""
        began = time.monotonic()
        topics = self.metadata.topics()
        if self._topics_at_start is None:
            self._topics_at_start = {(m.name, m.topic_id): m.partitions for m in topics.values()}
        parts = self.metadata.partitions()
        nodes, self._kafka_addresses = self.membership.registrations()
        controller = self.election.controller_id()
        for meta in topics.values():
            known = self._topics.get(meta.name)
            if (
                known is None
                or known.config != meta.config
                or known.topic_id != meta.topic_id
                or known.partitions != meta.partitions
            ):  # a new topic, its settings changed, or partitions were added
                self._logs.ensure_topic(meta, created_empty=self._created_since_start(meta))
        for st, _rev in parts.values():  # the bucket reads before a lead: no lock held
            if st.topic in topics:
                self._bucket_read_pending(st)
        self._lead_views.wait()
        with self._lock:
            with self._view_lock:
                self._nodes = dict(nodes)
                self._seen.update(nodes)
                self._topics = dict(topics)
                self._controller_id = controller
                self._read_at = max(self._read_at, began)
            seen: set[tuple[str, int]] = set()
            for (topic, p), (state, _rev) in parts.items():
                if topic not in topics:
                    continue
                seen.add((topic, p))
                if self._bucket_read_pending(state):
                    continue  # its bucket read runs on its own thread: a later poll leads
                self._apply(state)
            with self._view_lock:
                gone = [self._roles.pop(k) for k in [k for k in self._roles if k not in seen]]
            for role in gone:
                role.stop("the partition left the metadata")
        for name in self._logs.local_topics() - set(topics):
            self._logs.drop_topic(name)

    def _bucket_read_pending(self, state: PartitionState) -> bool:
        """Whether ``state`` makes this node lead a partition whose log must read the
        bucket first and that read is not done yet (:class:`LeadViews`: started now, or
        running). Starts the read if needed; asks nothing of the bucket itself."""
        if state.leader != self.node_id:
            return False
        role = self._roles.get((state.topic, state.partition))
        rep = role.replication if role is not None else None
        if rep is not None and rep.leader_epoch == state.leader_epoch and not rep.resigned:
            return False  # leads already
        plog = self._logs.partition_log(state.topic, state.partition)
        key = (state.topic, state.partition)
        return plog is not None and not self._lead_views.ready(key, plog, state.leader_epoch)

    def _apply(self, state: PartitionState) -> None:
        """Move one partition to the role ``state`` gives this node (lock held)."""
        key = (state.topic, state.partition)
        role = self._roles.get(key)
        if role is None:
            with self._view_lock:
                role = self._roles[key] = _Role(state)
        plog = self._logs.partition_log(state.topic, state.partition)
        if plog is None:
            return
        me = self.node_id
        if state.leader == me:
            rep = role.replication
            if rep is not None and rep.leader_epoch == state.leader_epoch and not rep.resigned:
                if set(rep.replicas) != set(state.replicas):
                    rep.set_replicas(state.replicas)  # a reassignment adds or drops one
                if rep.isr != frozenset(state.isr):
                    rep.isr_committed(state.isr)
                role.state = state
                return
            role.stop(f"leader epoch {state.leader_epoch} begins")
            epoch = state.leader_epoch
            start = plog.lead(epoch, fence=lambda: self._leads(state.topic, state.partition, epoch))
            topic = self._topics[state.topic]
            role.replication = LeaderReplication(
                leader_id=me,
                leader_epoch=state.leader_epoch,
                replicas=state.replicas,
                isr=state.isr,
                min_insync_replicas=topic.min_insync_replicas,
                lag_time_max_ms=self.config.replica_lag_time_max_ms,
                log_end=lambda: plog.next_offset,
                watermark=_CommitWatermark(plog, self, state.topic, state.partition),
                epoch_start_offset=start,
                on_resign=functools.partial(self._leadership_ended, state.topic, state.partition),
            )
            role.state = state
            plog.start_shipper()  # its first round rebuilds the remote state from the bucket
            log.info(
                "node %d leads %s-%d in epoch %d (ISR %s, from offset %d)",
                me,
                state.topic,
                state.partition,
                state.leader_epoch,
                list(state.isr),
                start,
            )
            return
        if state.leader is not None and state.leader != me and me in state.replicas:
            f = role.fetcher
            if (
                f is not None
                and f.leader_id == state.leader
                and f.leader_epoch == state.leader_epoch
                and f.running
            ):
                role.state = state
                return
            url = self._nodes.get(state.leader)
            role.stop(f"node {state.leader} leads epoch {state.leader_epoch}")
            plog.follow()
            role.state = state
            if url is None:
                return  # the leader is not registered (yet): try again next poll
            role.fetcher = ReplicaFetcher(
                plog,
                topic=state.topic,
                partition=state.partition,
                replica_id=me,
                leader_id=state.leader,
                leader_epoch=state.leader_epoch,
                transport=self._transport_to(state.leader, url),
                wait_ms=self.config.replica_fetch_wait_ms,
            ).start()
            return
        role.stop("not the leader")
        plog.follow()
        role.state = state

    def _transport_to(self, leader: int, url: str) -> ReplicaTransport:
        """How a follower reaches ``leader`` (HTTP address ``url``): its Kafka listener
        when it registered one (and the settings allow), else its HTTP route. Asks
        nothing of etcd: the addresses come with the round's read of the nodes."""
        wait_ms = self.config.replica_fetch_wait_ms
        if self.config.replication_transport == "auto":
            address = self._kafka_addresses.get(leader)
            if address:
                return KafkaTransport(
                    address,
                    replica_id=self.node_id,
                    token=self.config.cluster_token,
                    tls=client_tls(url),
                )
        return HttpTransport(url, headers=self.config.fetch_headers, wait_ms=wait_ms)

    def _leadership_ended(self, topic: str, partition: int) -> None:
        notify = self.on_leadership_end
        if notify is not None:
            notify(topic, partition)

    def _leads(self, topic: str, partition: int, epoch: int) -> bool:
        """Whether this node leads the partition in ``epoch`` as it last read the
        metadata (the fence a copy checks before it is committed). Takes no lock: the
        poll thread may hold the node's while it stops the shipper that asks."""
        role = self._roles.get((topic, partition))
        rep = role.replication if role is not None else None
        return rep is not None and not rep.resigned and rep.leader_epoch == epoch

    def maintain_isr(self) -> None:
        """For each led partition: propose to etcd the ISR shrink (lagging followers) or
        expansion (caught-up ones) its replication state suggests."""
        with self._view_lock:
            led = [(k, r) for k, r in self._roles.items() if r.replication is not None]
        for (topic, p), role in led:
            rep = role.replication
            if rep is None or rep.resigned:
                continue
            isr = set(rep.isr)
            new = (isr - rep.stale_followers()) | rep.catching_up_followers()
            if new == isr:
                continue
            rep.begin_isr_change(new)
            try:
                stored = self.metadata.change_isr(
                    topic,
                    p,
                    self.node_id,
                    rep.leader_epoch,
                    tuple(sorted(new)),
                    base_isr=tuple(sorted(isr)),
                )
            except TieredLogError:
                rep.isr_committed(isr)  # unknown outcome: keep the committed set; retried
                raise
            if stored is None:
                rep.resign("the ISR change was refused: a newer leader epoch exists")
                continue
            log.info("%s-%d: ISR %s -> %s", topic, p, sorted(isr), list(stored.isr))
            rep.isr_committed(stored.isr)

    # ---- what the service asks ------------------------------------------------------------

    def _not_leader(self, topic: str, partition: int, role: _Role | None) -> NotLeaderError:
        leader = role.state.leader if role is not None else None
        url = self._nodes.get(leader) if leader is not None else None
        where = (
            f"node {leader} ({url}) leads it"
            if url
            else "it has no leader now (an election is under way)"
        )
        return NotLeaderError(
            f"node {self.node_id} does not lead {topic}-{partition}: {where}",
            leader_id=leader,
            leader_url=url,
        )

    def leader_of(self, topic: str, partition: int) -> LeaderReplication:
        """This node's leadership of a partition; NotLeaderError naming the leader if it
        is not the leader now. Takes no lock (see :meth:`_role`): the event loop asks."""
        role = self._role(topic, partition)
        rep = role.replication if role is not None else None
        if rep is None or rep.resigned:
            raise self._not_leader(topic, partition, role)
        return rep

    def leads(self, topic: str, partition: int, epoch: int) -> bool:
        """Whether this node leads the partition in ``epoch`` now. Takes no lock (see
        :meth:`_role`): the event loop asks."""
        role = self._role(topic, partition)
        rep = role.replication if role is not None else None
        return rep is not None and not rep.resigned and rep.leader_epoch == epoch

    def _role(self, topic: str, partition: int) -> _Role | None:
        """The partition's role as the poll thread last set it, read without the node's
        lock: the poll thread holds that lock across a whole metadata round, which may
        stop a fetcher (a join of up to 5 s) or read the bucket, and the broker's
        requests must not wait for that. A single dict lookup and attribute read are
        atomic under the GIL; a request that reads the role while it changes sees the
        old role (as one that came a moment earlier) or none (not the leader: retried),
        and a deposed leader is fenced by its followers and by etcd, not by this read."""
        return self._roles.get((topic, partition))

    def appended(self, topic: str, partition: int) -> None:
        """The leader appended to a partition: move the HW (a lone ISR), which may write
        its checkpoint (the broker calls this on its append executor). (The followers'
        fetches waiting at the log end are the broker's to wake.)"""
        role = self._role(topic, partition)
        if role is None:
            return
        rep = role.replication
        if rep is not None:
            rep.record_append()

    def replica_fetch(self, topic: str, partition: int, req: ReplicaFetch) -> ReplicaAnswer:
        """Answer a follower's fetch at once (in a worker thread): an answer without
        records at the log end, which the service's route waits out on its event loop
        for up to ``req.wait_ms`` before it asks again. See
        :mod:`~tiered_log.cluster.protocol`."""
        role = self._role(topic, partition)
        rep = role.replication if role is not None else None
        if role is None or rep is None or rep.resigned:
            raise self._not_leader(topic, partition, role)
        if req.leader_epoch < rep.leader_epoch:
            raise FencedEpochError(
                f"epoch {req.leader_epoch} of {topic}-{partition} is over: node "
                f"{self.node_id} leads epoch {rep.leader_epoch}",
                current_epoch=rep.leader_epoch,
            )
        if req.leader_epoch > rep.leader_epoch:
            raise NotLeaderError(
                f"node {self.node_id} does not know epoch {req.leader_epoch} "
                f"of {topic}-{partition} yet (it leads {rep.leader_epoch})"
            )
        plog = self._logs.partition_log(topic, partition)
        if plog is None:
            raise self._not_leader(topic, partition, role)
        b = plog.bounds()
        entries = [(e.epoch, e.start_offset) for e in plog.leader_epoch_entries()]

        def answer(data: bytes | FetchRanges = b"", **kw: Any) -> ReplicaAnswer:
            remote_end = b.remote_end_offset if b.remote_end_offset is not None else 0
            return ReplicaAnswer(
                data,
                rep.high_watermark,
                b.log_start_offset,
                remote_end,
                epochs_from(entries, req.offset),
                **kw,
            )

        if req.last_fetched_epoch >= 0:
            epoch, end = plog.end_offset_for_epoch(req.last_fetched_epoch)
            if epoch != req.last_fetched_epoch or end < req.offset:
                return answer(diverging=(epoch, end))
        if req.offset > b.next_offset:
            return answer(diverging=plog.end_offset_for_epoch(req.last_fetched_epoch))
        remote_end = b.remote_end_offset if b.remote_end_offset is not None else 0
        if req.offset < b.local_start_offset or (
            req.empty
            and req.offset < remote_end
            and not rep.was_reset_to(req.replica_id, req.offset)
        ):
            # Below what this leader keeps locally, or an empty (rebuilt) follower: it
            # starts at the first offset not in the bucket (KIP-1023) and copies the tail
            # (once: an empty follower that fetches where a reset sent it copies from
            # there, though the remote end moved on meanwhile).
            reset_to = max(remote_end, b.local_start_offset)
            rep.record_reset(req.replica_id, reset_to)
            plog.hold_local_from(rep.retention_floor())
            return answer(reset_to=reset_to)
        rep.record_fetch(req.replica_id, req.offset)
        plog.hold_local_from(rep.retention_floor())
        if plog.next_offset <= req.offset:
            return answer()
        # Where the batches lie: the route sends them from the files (sendfile).
        fetched = plog.read_batch_ranges(req.offset, 1 << 30, req.max_bytes)
        rolls = tuple(plog.segment_bases(req.offset, fetched.next_offset))
        return answer(fetched, rolls=rolls)

    def create_topic(self, meta: TopicMeta) -> list[PartitionState]:
        """Create a topic in the cluster metadata (replicas over the live nodes); the
        nodes then create their logs. TopicExistsError, InvalidArgumentError."""
        live = sorted(self.membership.live_nodes())
        if meta.replication_factor > len(live):
            raise InvalidArgumentError(
                f"replication_factor {meta.replication_factor} is more than the "
                f"{len(live)} live nodes"
            )
        states = self.metadata.create_topic(meta, live)
        self.refresh()
        return states

    def add_partitions(self, name: str, count: int) -> list[PartitionState]:
        """Grow a topic to ``count`` partitions in the cluster metadata (the new ones'
        replicas over the live nodes); the nodes then create their logs.
        TopicNotFoundError, InvalidArgumentError."""
        states = self.metadata.add_partitions(name, count, self.membership.live_nodes())
        self.refresh()
        return states

    def reassign(self, old: int, new: int) -> list[dict[str, Any]]:
        """Start moving every replica node ``old`` holds to node ``new`` (which must be
        registered): each such partition gets ``new`` as a replica, which rebuilds from
        the bucket plus the tail; the controller drops ``old`` once the others are all
        in sync. Compare-and-swapped per partition (retried on a concurrent change).
        Returns the partitions started ``[{"topic", "partition"}]``; InvalidArgumentError
        when ``new`` is not a live node or is ``old``."""
        live = self.membership.live_nodes()
        if new not in live or new == old:
            raise InvalidArgumentError(
                f"node {new} is not a live node other than {old}: live nodes are {sorted(live)}"
            )
        started = []
        for (topic, p), (state, rev) in self.metadata.partitions().items():
            if old not in state.replicas or new in state.replicas:
                continue
            for _ in range(5):
                if self.metadata.update_partition(state, rev, begin_reassign(state, old, new)):
                    started.append({"topic": topic, "partition": p})
                    break
                got = self.metadata.partition(topic, p)
                if got is None or old not in got[0].replicas or new in got[0].replicas:
                    break
                state, rev = got
        self.refresh()
        return started

    def delete_topic(self, name: str) -> None:
        self.metadata.delete_topic(name)
        self.refresh()

    def alter_topic(self, name: str, config: dict[str, Any]) -> None:
        """Make ``config`` topic ``name``'s settings in the metadata store (every replica
        applies them at its next read), then apply them here at once (refresh)."""
        self.metadata.update_topic_config(name, config)
        self.refresh()

    def wait_until(self, ready: Callable[[], bool], timeout_s: float) -> bool:
        """Refresh until ``ready()`` (or the timeout): for a request that changed the
        metadata and answers once this node has applied it."""
        deadline = time.monotonic() + timeout_s
        while True:
            if ready():
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
            self.refresh()

    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        with self._view_lock:
            role = self._roles.get((topic, partition))
            return role.state if role is not None else None

    def topic_meta(self, name: str) -> TopicMeta | None:
        with self._view_lock:
            return self._topics.get(name)

    def other_replicas(self, topic: str, partition: int) -> list[tuple[int, str]]:
        """The partition's other replicas that are alive, ``(node id, HTTP URL)``, its
        leader first, then the in-sync ones, as this node last read them (for a repair
        that needs another replica's copy)."""
        with self._view_lock:
            role = self._roles.get((topic, partition))
            nodes = dict(self._nodes)
        if role is None:
            return []
        st = role.state
        order = sorted(
            (r for r in st.replicas if r != self.node_id and r in nodes),
            key=lambda r: (r != st.leader, r not in st.isr, r),
        )
        return [(r, nodes[r]) for r in order]

    def replication(self) -> list[dict[str, Any]]:
        """For each partition this node leads: its leader epoch, high watermark, log end,
        remote end, the offsets lost before a restore from the bucket (``[first, end)``
        ranges) and each replica's state, lag (offsets and ``lag_bytes``: what the leader's
        local log holds above the replica's end) and catch-up rate (see
        :meth:`LeaderReplication.status`). For ``GET /v1/cluster``, ``/metrics`` and
        ``tiered-log cluster status``."""
        with self._view_lock:
            led = [(k, r.replication) for k, r in self._roles.items() if r.replication is not None]
        out = []
        for (topic, p), rep in sorted(led):
            if rep.resigned:
                continue
            plog = self._logs.partition_log(topic, p)
            out.append(
                {
                    "topic": topic,
                    "partition": p,
                    "leader_epoch": rep.leader_epoch,
                    "high_watermark": rep.high_watermark,
                    "log_end_offset": plog.next_offset if plog is not None else None,
                    "remote_end_offset": (
                        plog.bounds().remote_end_offset if plog is not None else None
                    ),
                    "lost_offsets": plog.lost_offsets() if plog is not None else [],
                    **(plog.remote_view_status() if plog is not None else {}),
                    "replicas": [{**r, "lag_bytes": _lag_bytes(plog, r)} for r in rep.status()],
                }
            )
        return out

    def describe(self) -> dict[str, Any]:
        """``GET /v1/cluster`` (:class:`~tiered_log.service.cluster_view.ClusterView`):
        the nodes (alive, address; a dead one is listed while it holds a replica or this
        node saw it alive, with its last address), the controller, and per partition its
        leader, epoch, replicas and ISR, as this node last read them. Reads nothing from
        etcd, so it answers while etcd is out of reach: ``stale`` is then true (the last
        read is older than :data:`STALE_AFTER_S`) and ``metadata_age_ms`` says how old."""
        with self._view_lock:
            nodes = dict(self._nodes)
            seen = dict(self._seen)
            parts = [r.state for r in self._roles.values()]
            controller, read_at = self._controller_id, self._read_at
        age_s = time.monotonic() - read_at
        ids = set(seen) | {r for s in parts for r in s.replicas}
        return {
            "node_id": self.node_id,
            "controller_id": controller,
            "nodes": [
                {"node_id": n, "url": nodes.get(n, seen.get(n)), "alive": n in nodes}
                for n in sorted(ids)
            ],
            "partitions": [
                {
                    "topic": s.topic,
                    "partition": s.partition,
                    "leader": s.leader,
                    "leader_epoch": s.leader_epoch,
                    "replicas": list(s.replicas),
                    "isr": list(s.isr),
                }
                for s in sorted(parts, key=lambda s: (s.topic, s.partition))
            ],
            "replication": self.replication(),
            "stale": age_s > STALE_AFTER_S,
            "metadata_age_ms": int(age_s * 1000),
        }


__all__ = ["STALE_AFTER_S", "ClusterNode", "NodeConfig"]
