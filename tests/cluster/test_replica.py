"""LeaderReplication: the leader's follower states, high watermark, ISR proposals and
acks=all waits, driven with a fake clock and a counter standing in for the leader's log
end (the class reads the log only through that callable)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tiered_log.cluster.replica import LeaderReplication
from tiered_log.errors import (
    InvalidArgumentError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderError,
    ReplicationTimeoutError,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000

    def __call__(self) -> int:
        return self.now


class Mark:
    """The leader log's high watermark, as the replication sees it (a log clamps it to
    its end and never moves it down)."""

    def __init__(self, hw: int, leo: list[int]) -> None:
        self.value, self.leo = hw, leo

    @property
    def high_watermark(self) -> int:
        return self.value

    def set_high_watermark(self, hw: int) -> int:
        self.value = max(self.value, min(hw, self.leo[0]))
        return self.value


def leader(
    leo: list[int], clock: Clock, *, isr: tuple[int, ...] = (1, 2, 3), min_isr: int = 2, hw: int = 0
) -> LeaderReplication:
    return LeaderReplication(
        leader_id=1,
        leader_epoch=5,
        replicas=(1, 2, 3),
        isr=isr,
        min_insync_replicas=min_isr,
        lag_time_max_ms=100,
        log_end=lambda: leo[0],
        watermark=Mark(hw, leo),
        epoch_start_offset=0,
        clock=clock,
    )


def test_high_watermark_is_the_lowest_isr_log_end() -> None:
    leo, clock = [10], Clock()
    r = leader(leo, clock)
    assert r.high_watermark == 0
    assert r.record_fetch(2, 10) == 0  # follower 3 has not fetched yet
    assert r.record_fetch(3, 7) == 7
    assert r.record_fetch(3, 10) == 10
    leo[0] = 15
    assert r.record_append() == 10  # followers must fetch first
    assert r.record_fetch(2, 12) == 10
    assert r.record_fetch(3, 15) == 12
    # Never backwards: a follower fetching from lower (after a restart) does not move it.
    assert r.record_fetch(2, 11) == 12


def test_the_hw_is_the_logs_one_value() -> None:
    """The replication keeps no HW of its own: it reads and moves its log's (which the
    log clamps to its end, and checkpoints: tests/remote/test_replica_log.py)."""
    leo = [9]
    mark = Mark(3, leo)
    r = LeaderReplication(
        leader_id=1,
        leader_epoch=5,
        replicas=(1, 2),
        isr=(1, 2),
        min_insync_replicas=1,
        lag_time_max_ms=100,
        log_end=lambda: leo[0],
        watermark=mark,
        epoch_start_offset=0,
    )
    assert r.high_watermark == 3 and not r.committed(3)
    mark.value = 7  # moved by the log (e.g. its log start moved past it)
    assert r.high_watermark == 7 and r.committed(6)
    assert r.record_fetch(2, 5) == 7  # a lower target leaves it
    assert r.record_fetch(2, 9) == 9 and mark.value == 9


def test_a_lone_leader_commits_on_append() -> None:
    leo, clock = [0], Clock()
    r = leader(leo, clock, isr=(1,), min_isr=1)
    leo[0] = 3
    assert r.record_append() == 3


def test_fetch_past_the_leader_end_and_strangers_are_refused() -> None:
    r = leader([5], Clock())
    with pytest.raises(InvalidArgumentError, match="truncate"):
        r.record_fetch(2, 6)
    with pytest.raises(InvalidArgumentError, match="not a follower"):
        r.record_fetch(9, 0)
    with pytest.raises(InvalidArgumentError):
        r.record_fetch(1, 0)  # the leader does not fetch from itself


def test_lagging_follower_is_proposed_for_removal_and_back_when_caught_up() -> None:
    leo, clock = [10], Clock()
    r = leader(leo, clock)
    r.record_fetch(2, 10)
    r.record_fetch(3, 10)
    assert r.stale_followers() == set()
    leo[0] = 20
    clock.now += 60
    r.record_fetch(2, 20)  # caught up
    r.record_fetch(3, 12)  # reached the leader's LEO of its previous fetch: caught up then
    clock.now += 30
    assert r.stale_followers() == set()  # caught up as of 90 ms ago
    clock.now += 30  # 3 last caught up 120 ms ago
    r.record_fetch(2, 20)
    assert r.stale_followers() == {3}
    r.isr_committed({1, 2})
    assert r.high_watermark == 20  # the shrink let the HW move past 3's LEO
    assert r.catching_up_followers() == set()
    r.record_fetch(3, 20)
    assert r.catching_up_followers() == {3}
    r.isr_committed({1, 2, 3})
    assert r.stale_followers() == set()


def test_a_follower_out_of_the_isr_rejoins_only_by_fetching() -> None:
    """A dead follower dropped from the ISR (by the controller) forgets its log end: when
    its node comes back (maybe with an empty disk) it is not proposed for the ISR on
    what it had before it died, only once a fetch shows it reached the HW again."""
    leo, clock = [50], Clock()
    r = leader(leo, clock)
    r.record_fetch(2, 50)
    r.record_fetch(3, 50)
    assert r.high_watermark == 50
    r.isr_committed({1, 2})  # 3 died: the controller dropped it
    assert r.catching_up_followers() == set()  # not on its log end from before
    assert [s["state"] for s in r.status() if s["node_id"] == 3] == ["offline"]
    r.record_fetch(3, 0)  # back, empty
    assert r.catching_up_followers() == set()
    r.record_fetch(3, 50)
    assert r.catching_up_followers() == {3}


def test_an_isr_member_fetching_below_the_hw_is_dropped_at_once() -> None:
    """An ISR member's log end is never below the HW unless it lost committed records
    (its disk replaced within its lease): proposed for removal at its fetch, not after
    the lag time."""
    leo, clock = [50], Clock()
    r = leader(leo, clock)
    r.record_fetch(2, 50)
    r.record_fetch(3, 50)
    r.record_fetch(3, 0)
    assert r.high_watermark == 50 and r.stale_followers() == {3}
    r.isr_committed({1, 2})
    r.record_fetch(3, 50)
    r.isr_committed({1, 2, 3})
    assert r.stale_followers() == set()


def test_a_follower_that_never_fetches_leaves_after_the_lag_time() -> None:
    clock = Clock()
    r = leader([0], clock)
    clock.now += 100
    assert r.stale_followers() == set()
    clock.now += 1
    assert r.stale_followers() == {2, 3}


def test_isr_must_hold_the_leader_and_only_replicas() -> None:
    r = leader([0], Clock())
    with pytest.raises(InvalidArgumentError):
        r.isr_committed({2, 3})
    with pytest.raises(InvalidArgumentError):
        r.isr_committed({1, 4})


def test_acks_all_waits_for_the_isr() -> None:
    leo, clock = [0], Clock()
    r = leader(leo, clock)
    r.check_enough_replicas()
    leo[0] = 5  # records 0..4 appended
    r.record_fetch(2, 5)
    assert not r.committed(4)  # 3 has not got them
    r.record_fetch(3, 5)
    assert r.committed(4) and r.high_watermark == 5


def test_a_shrink_that_raises_the_hw_past_a_waiter_is_not_an_acknowledgment() -> None:
    """The one follower missing the record leaves the ISR: the HW moves past it, but the
    ISR (2) is below min_insync_replicas (3), so the waiter gets the after-append error
    (Kafka's NOT_ENOUGH_REPLICAS_AFTER_APPEND), not an acknowledgment."""
    leo, clock = [1], Clock()
    r = leader(leo, clock, min_isr=3)
    assert r.record_fetch(2, 1) == 0  # follower 3 has not fetched the record at 0
    assert not r.committed(0)
    r.isr_committed({1, 2})
    assert r.high_watermark == 1
    with pytest.raises(NotEnoughReplicasAfterAppendError, match="appended but are not"):
        r.committed(0)
    r.isr_committed({1, 2, 3})
    assert r.committed(0) and r.high_watermark == 1


def test_acks_all_fails_when_the_isr_is_too_small_or_leadership_ends() -> None:
    leo, clock = [0], Clock()
    r = leader(leo, clock, min_isr=3)
    r.isr_committed({1, 2})
    with pytest.raises(NotEnoughReplicasError, match="nothing was appended"):
        r.check_enough_replicas()
    r.isr_committed({1, 2, 3})
    leo[0] = 1
    assert not r.committed(0)  # appended, waiting for 2 and 3
    r.isr_committed({1, 3})  # shrank below min_insync_replicas while waiting
    with pytest.raises(NotEnoughReplicasError, match="appended but are not acknowledged"):
        r.committed(0)
    r.isr_committed({1, 2, 3})
    assert not r.committed(0)
    r.resign("node 1 lost the lease")
    with pytest.raises(NotLeaderError):
        r.committed(0)
    with pytest.raises(NotLeaderError):
        r.record_fetch(2, 1)
    with pytest.raises(NotLeaderError):
        r.check_enough_replicas()


def test_the_end_of_leadership_is_told_once_outside_the_lock() -> None:
    """``on_resign`` runs once, at the first resign, free to read the replication (the
    broker wakes the requests parked on the partition, which then ask it)."""
    seen: list[bool] = []
    leo = [0]
    r = LeaderReplication(
        leader_id=1,
        leader_epoch=5,
        replicas=(1, 2, 3),
        isr=(1, 2, 3),
        min_insync_replicas=2,
        lag_time_max_ms=100,
        log_end=lambda: leo[0],
        watermark=Mark(0, leo),
        epoch_start_offset=0,
        on_resign=lambda: seen.append(r.resigned),  # takes the lock: no deadlock
    )
    assert seen == []
    r.resign("node 1 lost the lease")
    r.resign("again")
    assert seen == [True]


def test_a_timed_out_wait_says_the_records_may_still_be_committed() -> None:
    leo = [1]
    r = leader(leo, Clock())
    assert not r.committed(0)
    err = r.timeout_error(0, 0.1)
    assert isinstance(err, ReplicationTimeoutError)
    assert "may still be committed" in str(err) and "high watermark 0" in str(err)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["append", "fetch2", "fetch3", "shrink", "expand"]), st.integers(0, 5)
        ),
        max_size=60,
    )
)
def test_hw_never_passes_an_isr_member_nor_moves_back(steps: list[tuple[str, int]]) -> None:
    """Whatever happens, the HW is at most every ISR member's LEO (so every ISR member
    holds what was acknowledged), and it never decreases."""
    leo, clock = [0], Clock()
    r = leader(leo, clock, min_isr=1)
    fol = {2: 0, 3: 0}
    last_hw = 0
    for op, n in steps:
        clock.now += 10
        if op == "append":
            leo[0] += n
            r.record_append()
        elif op in ("fetch2", "fetch3"):
            rid = int(op[-1])
            fol[rid] = min(leo[0], fol[rid] + n)
            r.record_fetch(rid, fol[rid])
        elif op == "shrink":
            r.isr_committed(r.isr - {2 + n % 2})
        else:
            r.isr_committed(r.isr | r.catching_up_followers())
        hw = r.high_watermark
        assert hw >= last_hw
        last_hw = hw
        for m in r.isr:
            assert hw <= (leo[0] if m == 1 else fol[m])


def test_a_member_being_added_holds_the_hw_back_before_it_is_stored() -> None:
    """KIP-497's maximal ISR: once the expansion is stored the new member may be elected,
    so nothing it lacks may have been acknowledged meanwhile."""
    leo, clock = [10], Clock()
    r = leader(leo, clock, isr=(1, 2), min_isr=1)
    r.record_fetch(2, 10)
    r.record_fetch(3, 10)
    assert r.high_watermark == 10 and r.catching_up_followers() == {3}
    r.begin_isr_change({1, 2, 3})
    leo[0] = 20
    r.record_fetch(2, 20)
    assert r.high_watermark == 10  # 3 (being added) has only 10
    r.isr_committed({1, 2, 3})
    r.record_fetch(3, 20)
    assert r.high_watermark == 20


def test_status_names_each_replica_state_and_its_lag() -> None:
    leo, clock = [100], Clock()
    r = leader(leo, clock, isr=(1, 2))
    r.record_fetch(2, 100)
    r.record_reset(3, 0)  # told to restart at the remote end: rebuilding
    r.record_fetch(3, 40)
    clock.now += 1000
    r.record_fetch(3, 90)  # 50 offsets in a second
    st = {s["node_id"]: s for s in r.status()}
    assert st[1]["state"] == "leader" and st[2]["state"] == "in_sync"
    assert st[3]["state"] == "rebuilding" and st[3]["lag_offsets"] == 10
    rate = st[3]["rate_offsets_s"]
    assert isinstance(rate, float) and rate > 0 and st[3]["eta_s"] is not None
    r.record_fetch(3, 100)
    r.isr_committed({1, 2, 3})
    assert {s["node_id"]: s["state"] for s in r.status()}[3] == "in_sync"
    clock.now += 10_000
    r.isr_committed({1, 2})
    assert {s["node_id"]: s["state"] for s in r.status()}[3] == "offline"


def test_retention_floor_holds_what_live_followers_still_copy() -> None:
    leo, clock = [100], Clock()
    r = leader(leo, clock, isr=(1, 2))
    assert r.retention_floor() is None  # nobody fetched yet
    r.record_fetch(2, 100)
    r.record_reset(3, 40)  # sent to the remote end: its next fetch is at 40
    assert r.retention_floor() == 40
    r.record_fetch(3, 60)
    assert r.retention_floor() == 60
    assert {s["node_id"]: s["resets"] for s in r.status()} == {1: 0, 2: 0, 3: 1}
    clock.now += 10_000  # both silent past lag_time_max_ms: they hold nothing
    assert r.retention_floor() is None
