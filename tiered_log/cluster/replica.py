"""The leader's side of replicating one partition: which follower has what, the high
watermark, the in-sync replica set (ISR), and ``acks=all`` waits (Kafka's ``Partition``
on the leader, with its ``Replica`` states).

Followers pull (:mod:`tiered_log.cluster` fetchers): each fetch names the follower and
its log end offset (LEO: the offset it asks for is the one after its last record), so
the leader learns every follower's LEO from its fetches, as Kafka's does.

Invariants this keeps (the leader of ``leader_epoch`` is the only writer of its state):

- The high watermark (HW) is the lowest LEO over the ISR (the leader's included), never
  moves back, and is what consumers may read below and what ``acks=all`` waits for: a
  record below the HW is on every ISR member, so any member elected next holds it. It
  is ONE value, the partition log's (:class:`Watermark`: checkpointed, read by
  consumers): this object computes where the ISR lets it go and moves it there, never
  holding a copy.
- The ISR changes only through :meth:`isr_committed`, called once the change is in the
  cluster metadata (etcd, compared against the partition epoch): the leader never
  counts a member the controller does not, so a new leader chosen from the committed
  ISR holds every acknowledged record (Kafka's KIP-497 / "ISR committed" rule). While a
  change is pending (:meth:`begin_isr_change`), the HW is computed over the *maximal*
  ISR, the committed set and the members being added: a shrink is not counted before it
  is stored, and a member being added already holds back the HW, so once stored (and
  electable) it has everything acknowledged.
- :meth:`stale_followers` proposes members whose fetches have not reached the leader's
  LEO for ``lag_time_max_ms`` (Kafka's ``replica.lag.time.max.ms``: a follower is caught
  up at a fetch that reaches the leader's LEO as it was then, or the LEO of its previous
  fetch), and at once a member that fetches below the HW (it lost committed records);
  :meth:`catching_up_followers` proposes non-members whose LEO, as a fetch since they
  left the ISR showed it, reached the HW and the start of the leader's epoch: a follower
  leaving the ISR forgets its log end, so a node that comes back (perhaps with a new,
  empty disk) rejoins only by fetching.
- :meth:`resign` (leadership lost, or the log closed) fails every waiter with
  NotLeaderError: nothing is acknowledged after it.

Nothing here waits: an ``acks=all`` produce parks in the broker
(:func:`~tiered_log.broker.parking.await_commit`), woken when the partition's high
watermark moves, and asks :meth:`committed`.

Thread-safety: one lock guards the state, held only for the state's own reads and
writes, never across I/O: the log's high watermark is moved after it is released (the
move may write the log's checkpoint file, so a method that moves it blocks for that
long; the event loop calls only :meth:`committed`, :meth:`check_enough_replicas` and
the read-only properties, which never move it). Every method is safe from any thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from ..errors import (
    InvalidArgumentError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderError,
    ReplicationTimeoutError,
)


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class Watermark(Protocol):
    """Where a led partition's high watermark lives (its log:
    :class:`~tiered_log.partition.log.TieredLog` is one)."""

    @property
    def high_watermark(self) -> int:
        """One past the last committed record."""
        ...

    def set_high_watermark(self, hw: int) -> int:
        """Move it up to ``hw`` (clamped to the log; never down); the value now."""
        ...


@dataclass
class FollowerState:
    """What the leader knows of one follower (Kafka's ``ReplicaState``)."""

    log_end_offset: int = -1
    """The follower's LEO at its last fetch (-1: it has not fetched in this epoch)."""
    last_caught_up_ms: int = 0
    """When a fetch last showed it had everything the leader had (see module doc)."""
    last_fetch_leader_leo: int = -1
    """The leader's LEO at the follower's previous fetch."""
    last_fetch_ms: int = 0
    rate_offsets_s: float = 0.0
    """How fast its log end has moved lately (offsets/s, smoothed over its fetches)."""
    reset_ms: int = 0
    """When the leader last told it to restart its log at the remote end (a rebuild;
    0: never in this epoch)."""
    lost_committed: bool = False
    """As an ISR member it fetched below the high watermark: it lost committed records
    (a wiped or replaced disk), so it must leave the ISR at once."""
    resets: int = 0
    """How often the leader told it to restart at the remote end in this epoch (more
    than a few: it cannot keep up with the leader's local retention)."""
    needs_from: int = -1
    """The first offset it will fetch next (its log end, or where a reset sent it;
    -1: unknown): the leader's local retention keeps what it still has to copy."""
    fetches: int = 0
    """Its fetches in this epoch (a follower sends the next only once it applied the
    previous answer: two after a change mean it has what that change put in answers)."""
    needs_ms: int = 0
    """When ``needs_from`` was last set."""
    reset_unfetched: bool = False
    """A reset sent it to ``needs_from`` and it has not fetched since."""


class LeaderReplication:
    """The leader's replication state of one partition in one leader epoch.

    ``leader_id`` leads ``replicas`` in ``leader_epoch`` with the committed ``isr``;
    ``log_end`` reads the leader log's LEO (next offset); ``watermark`` holds the HW
    (the leader's log, whose checkpointed HW is where it starts). ``clock`` returns
    monotonic milliseconds (tests pass their own); ``on_resign`` is called once, on the
    resigning thread and outside the lock, when the epoch's leadership ends (the broker
    wakes the requests parked on the partition, which then fail with NotLeaderError).
    """

    def __init__(
        self,
        *,
        leader_id: int,
        leader_epoch: int,
        replicas: Iterable[int],
        isr: Iterable[int],
        min_insync_replicas: int,
        lag_time_max_ms: int,
        log_end: Callable[[], int],
        watermark: Watermark,
        epoch_start_offset: int,
        clock: Callable[[], int] = _now_ms,
        on_resign: Callable[[], None] | None = None,
    ) -> None:
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.replicas = tuple(replicas)
        if leader_id not in self.replicas:
            raise InvalidArgumentError(f"leader {leader_id} is not a replica of {self.replicas}")
        if min_insync_replicas < 1 or lag_time_max_ms < 1:
            raise InvalidArgumentError("min_insync_replicas and lag_time_max_ms must be >= 1")
        self.min_insync_replicas = min_insync_replicas
        self.lag_time_max_ms = lag_time_max_ms
        self.epoch_start_offset = epoch_start_offset
        self._log_end = log_end
        self._clock = clock
        self._lock = threading.Lock()
        self._isr = frozenset(isr) | {leader_id}
        self._adding: frozenset[int] = frozenset()
        now = clock()
        # A follower starts "caught up" at the epoch's start: it gets lag_time_max_ms to
        # make its first fetch before it is proposed for removal (as Kafka's leader does).
        self._followers = {
            r: FollowerState(last_caught_up_ms=now) for r in self.replicas if r != leader_id
        }
        self._watermark = watermark
        self._resigned: str | None = None
        self._on_resign = on_resign

    # ---- reading the state ----------------------------------------------------------------

    @property
    def high_watermark(self) -> int:
        """The partition's HW (its log's: see :class:`Watermark`)."""
        return self._watermark.high_watermark

    @property
    def isr(self) -> frozenset[int]:
        """The committed ISR (the leader always in it)."""
        with self._lock:
            return self._isr

    def follower(self, replica_id: int) -> FollowerState:
        """A copy of what the leader knows of ``replica_id`` (InvalidArgumentError for a
        node that is not a follower of this partition)."""
        with self._lock:
            return FollowerState(**vars(self._follower(replica_id)))

    def _follower(self, replica_id: int) -> FollowerState:
        st = self._followers.get(replica_id)
        if st is None:
            raise InvalidArgumentError(
                f"node {replica_id} is not a follower of this partition (replicas "
                f"{list(self.replicas)}, leader {self.leader_id})"
            )
        return st

    # ---- what followers and appends tell the leader -------------------------------------------

    def record_fetch(self, replica_id: int, fetch_offset: int) -> int:
        """A fetch from follower ``replica_id`` asking from ``fetch_offset`` (its LEO):
        update its state and move the HW; returns the HW to send back. Call it before
        reading the records the fetch returns (Kafka's ``updateFollowerFetchState``)."""
        leader_leo = self._log_end()
        now = self._clock()
        with self._lock:
            self._check_leading()
            st = self._follower(replica_id)
            if fetch_offset > leader_leo:
                raise InvalidArgumentError(
                    f"follower {replica_id} fetches from {fetch_offset}, past the leader's "
                    f"log end {leader_leo}: it must truncate first"
                )
            if fetch_offset >= leader_leo:
                st.last_caught_up_ms = now
            elif fetch_offset >= st.last_fetch_leader_leo >= 0:
                st.last_caught_up_ms = max(st.last_caught_up_ms, st.last_fetch_ms)
            if replica_id in self._isr and fetch_offset < self.high_watermark:
                st.lost_committed = True  # see stale_followers
            if st.log_end_offset >= 0 and now > st.last_fetch_ms:
                rate = max(0, fetch_offset - st.log_end_offset) * 1000 / (now - st.last_fetch_ms)
                st.rate_offsets_s = 0.7 * st.rate_offsets_s + 0.3 * rate
            st.log_end_offset = fetch_offset
            st.last_fetch_leader_leo = leader_leo
            st.last_fetch_ms = now
            st.needs_from, st.needs_ms = fetch_offset, now
            st.reset_unfetched = False
            st.fetches += 1
            target = self._target(leader_leo)
        return self._move(target)

    def follower_fetches(self) -> dict[int, int]:
        """The fetch count of each follower in the ISR now (see
        :attr:`FollowerState.fetches`)."""
        with self._lock:
            return {r: st.fetches for r, st in self._followers.items() if r in self._isr}

    def set_replicas(self, replicas: Iterable[int]) -> None:
        """The partition's replicas changed (a reassignment adds a node, then drops the
        old one): track the new followers from scratch (given ``lag_time_max_ms`` to
        fetch first), forget the gone ones. The leader stays."""
        new = tuple(replicas)
        if self.leader_id not in new:
            raise InvalidArgumentError(
                f"replicas {list(new)} must hold the leader {self.leader_id}"
            )
        now = self._clock()
        leader_leo = self._log_end()
        with self._lock:
            self.replicas = new
            self._followers = {
                r: self._followers.get(r) or FollowerState(last_caught_up_ms=now)
                for r in new
                if r != self.leader_id
            }
            self._isr = frozenset(r for r in self._isr if r in new) | {self.leader_id}
            target = self._target(leader_leo)
        self._move(target)

    def record_reset(self, replica_id: int, reset_to: int) -> None:
        """The leader told ``replica_id`` to restart its log at ``reset_to`` (the remote
        end: it is rebuilding): shown in :meth:`status` until it is in sync, counted,
        and its next fetch's offset held by :meth:`retention_floor`."""
        now = self._clock()
        with self._lock:
            st = self._follower(replica_id)
            st.reset_ms = now
            st.resets += 1
            st.needs_from, st.needs_ms = reset_to, now
            st.reset_unfetched = True

    def was_reset_to(self, replica_id: int, offset: int) -> bool:
        """Whether the last reset of ``replica_id`` sent it to ``offset`` (and it has not
        fetched since): its first fetch after a reset."""
        with self._lock:
            st = self._followers.get(replica_id)
            return st is not None and st.reset_unfetched and st.needs_from == offset

    def retention_floor(self) -> int | None:
        """The lowest offset a live follower still has to copy from this leader's local
        log (its next fetch, or where a reset sent it), or None: the leader's local
        retention keeps the segments from there (within a bound of its own), so a
        catching-up follower is not sent back to the remote end again and again.
        Followers silent for longer than ``lag_time_max_ms`` hold nothing."""
        now = self._clock()
        with self._lock:
            needs = [
                st.needs_from
                for st in self._followers.values()
                if st.needs_from >= 0 and now - st.needs_ms <= self.lag_time_max_ms
            ]
            return min(needs) if needs else None

    def status(self) -> list[dict[str, object]]:
        """Each replica as this leader sees it: ``node_id``, ``state`` (``leader``,
        ``in_sync``, ``rebuilding``: restarted at the remote end and catching up,
        ``catching_up``, ``offline``: no fetch within ``lag_time_max_ms``),
        ``log_end_offset``, ``lag_offsets`` (to the leader's log end) and
        ``rate_offsets_s``, ``eta_s`` (the lag at that rate; None when not moving),
        ``resets`` (how often it was sent back to the remote end in this epoch)."""
        leo = self._log_end()
        now = self._clock()
        with self._lock:
            out: list[dict[str, object]] = [
                {
                    "node_id": self.leader_id,
                    "state": "leader",
                    "log_end_offset": leo,
                    "lag_offsets": 0,
                    "rate_offsets_s": 0.0,
                    "eta_s": 0.0,
                    "resets": 0,
                }
            ]
            for rid, st in sorted(self._followers.items()):
                lag = max(0, leo - max(st.log_end_offset, 0))
                if rid in self._isr:
                    state = "in_sync"
                elif st.log_end_offset < 0 or now - st.last_fetch_ms > self.lag_time_max_ms:
                    state = "offline"
                elif st.reset_ms:
                    state = "rebuilding"
                else:
                    state = "catching_up"
                rate = round(st.rate_offsets_s, 1)
                out.append(
                    {
                        "node_id": rid,
                        "state": state,
                        "log_end_offset": st.log_end_offset,
                        "lag_offsets": lag,
                        "rate_offsets_s": rate,
                        "resets": st.resets,
                        "eta_s": round(lag / rate, 1) if rate > 0 else (0.0 if not lag else None),
                    }
                )
            return out

    def record_append(self) -> int:
        """The leader appended: with no follower in the ISR the HW moves at once. Returns
        the HW."""
        leader_leo = self._log_end()
        with self._lock:
            target = self._target(leader_leo)
        return self._move(target)

    def _move(self, target: int) -> int:
        """Move the log's HW up to ``target`` (this object's lock released: the move may
        write the log's checkpoint); the HW now."""
        hw = self._watermark.high_watermark
        return self._watermark.set_high_watermark(target) if target > hw else hw

    def _target(self, leader_leo: int) -> int:
        """Where the ISR lets the HW go: the lowest LEO over the maximal ISR (lock
        held). The caller moves the log's HW there once the lock is released (a lower
        target than the HW changes nothing)."""
        low = leader_leo
        for r in self._isr | self._adding:
            if r != self.leader_id:
                low = min(low, self._followers[r].log_end_offset)
        return low

    # ---- the ISR -------------------------------------------------------------------------------

    def stale_followers(self) -> set[int]:
        """ISR members (not the leader) that have not caught up for ``lag_time_max_ms``,
        or that fetched below the high watermark (they lost committed records: a member
        whose disk was replaced; an ISR member's log end is never below the HW
        otherwise): the ISR shrink to propose to the metadata store."""
        now = self._clock()
        with self._lock:
            return {
                r
                for r in self._isr
                if r != self.leader_id
                and (
                    self._followers[r].lost_committed
                    or now - self._followers[r].last_caught_up_ms > self.lag_time_max_ms
                )
            }

    def catching_up_followers(self) -> set[int]:
        """Followers outside the ISR whose LEO reached the HW and the start of this
        epoch: the ISR expansion to propose (Kafka's ``isFollowerInSync``)."""
        with self._lock:
            floor = max(self.high_watermark, self.epoch_start_offset)
            return {
                r
                for r, st in self._followers.items()
                if r not in self._isr and st.log_end_offset >= floor
            }

    def begin_isr_change(self, isr: Iterable[int]) -> None:
        """The leader is about to propose ``isr`` to the metadata store: members it adds
        count towards the HW from now on (see the module docstring); call
        :meth:`isr_committed` (or :meth:`resign`) after."""
        with self._lock:
            self._adding = frozenset(isr) - self._isr

    def isr_committed(self, isr: Iterable[int]) -> None:
        """The metadata store now holds ``isr`` for this partition and epoch: use it. A
        shrink may raise the HW; waiters re-check ``min_insync_replicas``."""
        new = frozenset(isr)
        if self.leader_id not in new or not new <= set(self.replicas):
            raise InvalidArgumentError(
                f"ISR {sorted(new)} must hold the leader {self.leader_id} and only replicas"
            )
        leader_leo = self._log_end()
        with self._lock:
            for r in new - self._isr:
                if r in self._followers:
                    self._followers[r].reset_ms = 0  # rebuilt: in sync again
            for r in self._isr - new:
                if r in self._followers:
                    # Out of the ISR, it gets back in only by fetching up to the HW: what
                    # it fetched before (a dead node's log end) says nothing of the log
                    # it comes back with (its disk may be new).
                    old = self._followers[r]
                    self._followers[r] = FollowerState(
                        last_caught_up_ms=old.last_caught_up_ms,
                        last_fetch_ms=old.last_fetch_ms,
                        reset_ms=old.reset_ms,
                    )
            self._isr = new
            self._adding = frozenset()
            target = self._target(leader_leo)
        self._move(target)

    # ---- acks=all ------------------------------------------------------------------------------

    def check_enough_replicas(self) -> None:
        """Before an ``acks=all`` append: NotEnoughReplicasError (nothing written) when the
        ISR is smaller than ``min_insync_replicas``; NotLeaderError after :meth:`resign`."""
        with self._lock:
            self._check_leading()
            self._check_isr_size(appended=False)

    def committed(self, offset: int) -> bool:
        """Whether the HW has passed ``offset`` (the ``acks=all`` acknowledgment of the
        record there), without waiting: for a caller that waits on its own terms (the
        service's event loop, woken when the HW moves). Raises
        NotEnoughReplicasAfterAppendError if the ISR is below ``min_insync_replicas``,
        even once the HW has passed ``offset`` (a shrink raises the HW: as Kafka's
        acknowledgment, the answer checks the ISR it is given under), NotLeaderError
        once leadership ended."""
        with self._lock:
            done = self.high_watermark > offset
            if not done:
                self._check_leading(appended=True)
            self._check_isr_size(appended=True)
            return done

    def timeout_error(self, offset: int, timeout_s: float) -> ReplicationTimeoutError:
        """The error of an ``acks=all`` wait for ``offset`` that ran out of time."""
        with self._lock:
            return ReplicationTimeoutError(
                f"offset {offset} was not replicated to the in-sync replicas "
                f"{sorted(self._isr)} within {timeout_s:g}s (high watermark "
                f"{self.high_watermark}); it may still be committed"
            )

    def _check_leading(self, *, appended: bool = False) -> None:
        if self._resigned is not None:
            what = (
                "the records were appended but are not acknowledged"
                if appended
                else "nothing was appended"
            )
            raise NotLeaderError(
                f"this node no longer leads the partition ({self._resigned}); {what}"
            )

    def _check_isr_size(self, *, appended: bool) -> None:
        if len(self._isr) < self.min_insync_replicas:
            what = (
                "the records were appended but are not acknowledged"
                if appended
                else "nothing was appended"
            )
            error = NotEnoughReplicasAfterAppendError if appended else NotEnoughReplicasError
            raise error(
                f"{len(self._isr)} in-sync replicas {sorted(self._isr)}, fewer than "
                f"min_insync_replicas={self.min_insync_replicas}; {what}"
            )

    def resign(self, why: str) -> None:
        """Leadership of this epoch ended (``why`` says how): every waiter and every later
        call fails with NotLeaderError. Idempotent."""
        with self._lock:
            first = self._resigned is None
            if first:
                self._resigned = why
        if first and self._on_resign is not None:
            self._on_resign()

    @property
    def resigned(self) -> bool:
        with self._lock:
            return self._resigned is not None


__all__ = ["FollowerState", "LeaderReplication", "Watermark"]
