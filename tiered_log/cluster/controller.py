"""The cluster controller: partition leadership follows the live nodes.

:class:`Controller` runs on every node beside its
:class:`~tiered_log.cluster.membership.ControllerElection`, and acts only while that
election says this node is the controller. Every ``interval_s`` (and at once again after
a round that lost a compare-and-swap, or when :meth:`Controller.wake` is called) it
reads the live nodes (``nodes/``) and every partition state (one snapshot of
``partitions/``, see :mod:`~tiered_log.cluster.metadata`) and, per partition
(:func:`decide`):

(a) a partition whose leader is None or not live gets a leader by
    :func:`~tiered_log.cluster.model.elect_leader`: the first live ISR member in replica
    order, the ISR cut to its live members, the leader epoch bumped; with
    ``unclean_leader_election`` and no live ISR member, the first live replica alone;
(b) a partition whose leader is live loses its dead ISR members
    (:func:`~tiered_log.cluster.model.shrink_isr`; the leader always stays in its ISR), so
    a dead follower does not hold back the leader's high watermark;
(c) a partition with no live ISR member (and unclean election off) goes offline (leader
    None, leader epoch bumped so the dead leader's epoch is stale at once, ISR kept so
    that any member coming back is elected cleanly) and is logged once as a WARNING
    until it has a leader again.

**The grace after a gap in contact with etcd.** A node is "dead" when its registration
is missing, i.e. its lease ended. etcd also ends leases whose renewals it did not
process because *it* stalled or was out of reach (a paused etcd wakes and expires every
lease whose time ran out meanwhile): right after such a gap a missing registration says
nothing of the node, which registers again as soon as etcd answers it. So the
controller acts on a node's absence (an election away from a leader, an ISR shrink, a
hand-over in a reassignment) only once this node's store has seen etcd answer promptly
for a whole lease TTL (:meth:`~tiered_log.cluster.etcd.MetaStore.contact_since`: after
an outage, after a stall of etcd, and after this node started, so also after a
controller failover that happened with or after such a gap), as Kafka's controller
waits for broker heartbeats after a failover. Until then a partition whose leader or
ISR names an unregistered node is left as it is (``RoundResult.deferred``), for at
most :data:`MAX_GRACE_TTLS` lease TTLs from the first round that missed that node. Liveness
itself is etcd's (leases), not the controller's memory, so a controller that has had
etcd's answers for a TTL needs no further wait: a live node that can reach etcd
renewed within that TTL. Leaders keep serving meanwhile; nothing is lost by waiting.

Invariants (who may write what):

- **Only the controller of the current controller epoch writes leadership.** Every write
  carries ``election.fence`` (the controller key still has this epoch's create_revision)
  in the same etcd transaction as its compare-and-swap on the partition's mod_revision.
  A deposed controller that still believes it leads (a pause, a partition) has every
  write refused by etcd; once it sees the controller key changed it stops trying until
  the election makes it controller again (a new epoch).
- **Never two leaders in one leader epoch**: each write replaces exactly the state it
  read (compare-and-swap on mod_revision, so concurrent writers, two controllers or a
  controller and a leader changing its ISR, serialise), and the new state follows the
  model's rule, checked again by
  :meth:`~tiered_log.cluster.metadata.ClusterMetadata.update_partition`: the leader
  epoch is bumped exactly when the leader changes.
- **A new leader comes from the ISR** unless ``unclean_leader_election`` is on (then a
  live replica outside it may lead, alone in its ISR: records acknowledged by the others
  may be lost, Kafka's ``unclean.leader.election.enable``).

Thread-safety: :meth:`Controller.run_once` may be called from any thread, also while the
daemon thread runs (writes are compare-and-swapped; the controller's own bookkeeping is
under a lock). :meth:`Controller.close` stops the thread; it does not close the
election, the membership or the store (their owner does).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Set
from dataclasses import dataclass, field

from tiered_log.cluster.etcd import MetaStore
from tiered_log.cluster.membership import CONTROLLER_KEY, ControllerElection, Membership
from tiered_log.cluster.metadata import ClusterMetadata, PartitionKey
from tiered_log.cluster.model import PartitionState, elect_leader, finish_reassign, shrink_isr
from tiered_log.errors import MetadataUnavailableError

log = logging.getLogger(__name__)

PROMPT_RERUNS = 3
"""How many rounds the daemon runs back to back after rounds that lost a
compare-and-swap, before it waits ``interval_s`` again."""

MAX_GRACE_TTLS = 2
"""The grace holds back action on one unregistered node for at most this many lease
TTLs from the first round that missed it: a live node registers again within moments
of etcd answering it, and an etcd that stays slow (every slow answer is a gap) must
not stop failovers for good."""


def decide(state: PartitionState, live: Set[int], unclean: bool = False) -> PartitionState | None:
    """The controller's decision for one partition given the ``live`` nodes: the state
    to write, or None when nothing changes. (a) leader None or dead: an election
    (:func:`~tiered_log.cluster.model.elect_leader`, possibly to offline); (b) leader
    live: its dead ISR members removed; (c) a reassignment whose new replicas are all in
    the ISR: the old ones dropped (:func:`~tiered_log.cluster.model.finish_reassign`).
    Pure."""
    if state.leader is None or state.leader not in live:
        return elect_leader(state, live, unclean)
    dead = set(state.isr) - set(live)
    if dead:
        return shrink_isr(state, dead)
    return finish_reassign(state, live)


@dataclass
class RoundResult:
    """What one :meth:`Controller.run_once` did.

    ``acted``: False if this node was not (or no longer believed it was) the controller
    and nothing was read or written. ``written``: the new states stored (elections and
    ISR shrinks, in partition order). ``lost``: partitions whose write was refused (a
    concurrent change, or the fence failed): they are decided again next round.
    ``offline``: partitions without a leader after this round. ``deferred``: partitions
    left as they are because their leader or ISR names an unregistered node and the
    grace after a gap in contact with etcd runs (see the module docstring).
    """

    acted: bool = False
    written: list[PartitionState] = field(default_factory=list)
    lost: list[PartitionKey] = field(default_factory=list)
    offline: list[PartitionKey] = field(default_factory=list)
    deferred: list[PartitionKey] = field(default_factory=list)


class Controller:
    """Keeps partition leadership and ISRs in step with the live nodes, while
    ``election`` says this node is the controller. See the module docstring for what it
    does each round and the invariants it keeps.

    ``membership`` supplies the live nodes; ``election`` the controller role and the
    fence every write carries. :meth:`start` runs rounds on a daemon thread;
    :meth:`run_once` runs one round on the caller's thread.
    """

    def __init__(
        self,
        store: MetaStore,
        membership: Membership,
        election: ControllerElection,
        *,
        unclean_leader_election: bool = False,
        interval_s: float = 0.2,
    ) -> None:
        self.store = store
        self.metadata = ClusterMetadata(store)
        self.membership = membership
        self.election = election
        self.unclean_leader_election = unclean_leader_election
        self.interval_s = interval_s
        self._lock = threading.Lock()
        self._offline: dict[PartitionKey, int] = {}  # offline partitions warned of -> leader epoch
        self._deposed_epoch: int | None = None  # a controller epoch we saw end
        self._graced: float | None = None  # the contact_since a grace was logged for
        self._absent_since: dict[int, float] = {}  # node -> first round that missed it
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    # ---- the daemon ----------------------------------------------------------------

    def start(self) -> Controller:
        """Run rounds on a daemon thread (idempotent)."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, daemon=True, name=f"controller:{self.membership.node_id}"
            )
            self._thread.start()
        return self

    def wake(self) -> None:
        """Run a round now rather than at the next interval (e.g. a node was seen leaving)."""
        self._wake.set()

    def _run(self) -> None:
        reruns = 0
        while not self._stop.is_set():
            lost = False
            try:
                lost = bool(self.run_once().lost)
            except MetadataUnavailableError as exc:
                log.warning("controller on node %s: round failed: %s", self.membership.node_id, exc)
            except Exception:
                log.exception("controller on node %s: round failed", self.membership.node_id)
            if lost and reruns < PROMPT_RERUNS:
                reruns += 1
                continue
            reruns = 0
            self._wake.wait(self.interval_s)
            self._wake.clear()

    def close(self) -> None:
        """Stop the daemon thread (waits for its round to end, bounded). Idempotent."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(self.store.timeout_s * 4 + self.interval_s)

    def __enter__(self) -> Controller:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- one round -----------------------------------------------------------------

    def run_once(self) -> RoundResult:
        """One round: if this node is the controller, read the live nodes and every
        partition state and write what :func:`decide` says, each write fenced by this
        controller epoch and compare-and-swapped on the state's mod_revision. Raises
        :class:`MetadataUnavailableError` if etcd is out of reach (the writes made
        before stand; the next round starts over from a fresh read)."""
        result = RoundResult()
        fence = self.election.fence
        if fence is None or not self.election.is_controller:
            with self._lock:
                self._absent_since.clear()  # a later tenure starts its own count
            return result
        with self._lock:
            if self._deposed_epoch == fence.create_revision:
                self._absent_since.clear()
                return result  # seen deposed: wait for the election to notice
        result.acted = True
        live = set(self.membership.live_nodes())
        grace_left = self.grace_left()
        partitions = self.metadata.partitions()
        named = {
            r
            for state, _ in partitions.values()
            for r in (state.leader, *state.isr)
            if r is not None
        }
        waited = self._note_absent(named - live)
        for key, (state, revision) in partitions.items():
            absent = {r for r in (state.leader, *state.isr) if r is not None} - live
            if grace_left > 0 and any(waited[r] < self._max_grace_s for r in absent):
                result.deferred.append(key)
                continue
            new = decide(state, live, self.unclean_leader_election)
            now = state
            if new is not None:
                if self.metadata.update_partition(state, revision, new, fence=fence):
                    result.written.append(new)
                    self._log_change(state, new, live)
                    now = new
                else:
                    result.lost.append(key)
                    continue
            if now.leader is None:
                result.offline.append(key)
            self._note_offline(key, now)
        if result.lost:
            self._check_deposed(fence.create_revision)
        if result.deferred:
            self._log_grace(result.deferred, live, grace_left)
        return result

    @property
    def _max_grace_s(self) -> float:
        """The longest the grace holds back action on one node: an etcd that stays slow
        (each answer counted as a gap) must not stop failovers for good."""
        return MAX_GRACE_TTLS * self.membership.lease_ttl_s

    def _note_absent(self, absent: Set[int]) -> dict[int, float]:
        """Seconds since the first round (of this controller) that found each node of
        ``absent`` unregistered, counted afresh once a round finds it registered."""
        now = time.monotonic()
        with self._lock:
            self._absent_since = {n: self._absent_since.get(n, now) for n in absent}
            return {n: now - t for n, t in self._absent_since.items()}

    def grace_left(self) -> float:
        """Seconds until this controller may act on a node's absence: one lease TTL after
        the store last saw a gap in contact with etcd (a node notes its start as one);
        0 once it may. See the module docstring."""
        since = self.store.contact_since()
        return max(0.0, since + self.membership.lease_ttl_s - time.monotonic())

    def _log_grace(self, deferred: list[PartitionKey], live: Set[int], left: float) -> None:
        """Log once per gap in contact that the controller waits for absent nodes."""
        since = self.store.contact_since()
        with self._lock:
            if self._graced == since:
                return
            self._graced = since
        log.info(
            "controller on node %s: etcd answers again (or this node just started): "
            "waiting %.1f s for the nodes to renew before acting on absent ones "
            "(registered now: %s; %d partition(s) wait)",
            self.membership.node_id,
            left,
            sorted(live),
            len(deferred),
        )

    def _log_change(self, old: PartitionState, new: PartitionState, live: Set[int]) -> None:
        if new.leader != old.leader and new.leader is not None:
            unclean = new.leader not in old.isr
            log.log(
                logging.WARNING if unclean else logging.INFO,
                "partition %s: leader %s -> %s (%sleader epoch %d, isr %s; live %s)",
                new.name,
                old.leader,
                new.leader,
                "UNCLEAN election, " if unclean else "",
                new.leader_epoch,
                list(new.isr),
                sorted(live),
            )
        elif new.leader != old.leader:
            pass  # offline: logged by _note_offline
        else:
            log.info(
                "partition %s: isr %s -> %s (dead nodes removed; leader %s)",
                new.name,
                list(old.isr),
                list(new.isr),
                new.leader,
            )

    def _note_offline(self, key: PartitionKey, state: PartitionState) -> None:
        """Log a partition going offline once (per leader epoch), and coming back."""
        with self._lock:
            warned = self._offline.get(key)
            if state.leader is None:
                if warned == state.leader_epoch:
                    return
                self._offline[key] = state.leader_epoch
            elif warned is None:
                return
            else:
                del self._offline[key]
        if state.leader is None:
            log.warning(
                "partition %s is OFFLINE: no live member of its isr %s (replicas %s)%s",
                state.name,
                list(state.isr),
                list(state.replicas),
                "" if self.unclean_leader_election else "; unclean leader election is off",
            )
        else:
            log.info(
                "partition %s is back online: leader %s (epoch %d)",
                state.name,
                state.leader,
                state.leader_epoch,
            )

    def _check_deposed(self, epoch: int) -> None:
        """After a lost write: if the controller key is no longer this epoch's, stop
        writing under it (the election will notice and end or renew the role)."""
        v = self.store.get(CONTROLLER_KEY)
        if v is None or v.create_revision != epoch:
            with self._lock:
                first = self._deposed_epoch != epoch
                self._deposed_epoch = epoch
            if first:
                log.warning(
                    "node %s: controller epoch %d has ended (the controller key is "
                    "now %s): no more leadership writes under it",
                    self.membership.node_id,
                    epoch,
                    "absent" if v is None else f"epoch {v.create_revision}",
                )


__all__ = ["MAX_GRACE_TTLS", "PROMPT_RERUNS", "Controller", "RoundResult", "decide"]
