"""When a follower's fetcher fsyncs and when it fetches ahead: in process, a real leader log and its real
:class:`~tiered_log.cluster.replica.LeaderReplication` (an in-sync follower holding the
high watermark at the leader's end) answer a real :class:`ReplicaFetcher` over a
transport that calls them directly, and note, at each fetch the leader hears, how far
the follower's log is fsynced.

The rule: while the follower's end is below the highest mark the leader sent, it copies
without an fsync per copy (those records are committed already and its end cannot count
towards a commit), and it sends the next fetch before it appended the batches in hand;
every fetch from an end at or past that mark, the kind that moves the mark or brings
it back into the ISR, arrives with everything before it on disk.
The follower ends byte-identical to the leader, rolled at the leader's segment bases.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tiered_log import LogConfig
from tiered_log.cluster.fetcher import ReplicaFetcher
from tiered_log.cluster.protocol import ReplicaAnswer, ReplicaFetch, epochs_from
from tiered_log.cluster.replica import LeaderReplication
from tiered_log.partition import TieredLog
from tiered_log.remote.tier import TierConfig

pytestmark = pytest.mark.timeout(60)

TOPIC, PARTITION = "orders", 0
LEADER, IN_SYNC, FOLLOWER = 1, 2, 3
EPOCH = 4
SMALL = LogConfig(segment_bytes=8192, index_interval_bytes=256)  # flush_messages=1


def open_log(path: Path) -> TieredLog:
    return TieredLog(
        path,
        log_id=f"{TOPIC}-{PARTITION}",
        storage=None,
        config=SMALL,
        tier=TierConfig(remote_enabled=False),
        start_shipper=False,
        rebuild=False,
        replicated=True,
        hw_checkpoint_interval_ms=0,
    )


@dataclass
class Heard:
    """One fetch as the leader heard it."""

    offset: int
    follower_end: int
    follower_flushed: int
    mark_sent_before: int


class InProcessLeader:
    """The leader's side of a replica fetch, called directly: its replication state
    learns the follower's end, its log answers the batches and segment bases."""

    name = "in-process"

    def __init__(self, plog: TieredLog, rep: LeaderReplication, follower: TieredLog) -> None:
        self.plog, self.rep, self.follower = plog, rep, follower
        self.heard: list[Heard] = []
        self.mark_sent = -1

    def fetch(self, topic: str, partition: int, req: ReplicaFetch) -> ReplicaAnswer:
        assert (topic, partition, req.replica_id) == (TOPIC, PARTITION, FOLLOWER)
        f = self.follower
        self.heard.append(Heard(req.offset, f.next_offset, f.flushed_offset, self.mark_sent))
        hw = self.rep.record_fetch(req.replica_id, req.offset)
        got = self.plog.read_batch_ranges(req.offset, 1 << 30, req.max_bytes)
        try:
            data = got.read()
        finally:
            got.close()
        rolls = tuple(self.plog.segment_bases(req.offset, got.next_offset))
        entries = [(e.epoch, e.start_offset) for e in self.plog.leader_epoch_entries()]
        self.mark_sent = max(self.mark_sent, hw)
        return ReplicaAnswer(
            data, hw, self.plog.log_start_offset, 0, epochs_from(entries, req.offset), rolls=rolls
        )

    def close(self) -> None:
        pass


def produce(plog: TieredLog, batches: int) -> None:
    for i in range(batches):
        plog.append_batch([b"%06d" % i + bytes(300)] * 3)


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[TieredLog, TieredLog, InProcessLeader, ReplicaFetcher]]:
    leader, follower = open_log(tmp_path / "leader"), open_log(tmp_path / "follower")
    leader.lead(EPOCH)
    follower.follow()
    rep = LeaderReplication(
        leader_id=LEADER,
        leader_epoch=EPOCH,
        replicas=(LEADER, IN_SYNC, FOLLOWER),
        isr=(LEADER, IN_SYNC),
        min_insync_replicas=2,
        lag_time_max_ms=60_000,
        log_end=lambda: leader.next_offset,
        watermark=leader,
        epoch_start_offset=0,
    )
    transport = InProcessLeader(leader, rep, follower)
    fetcher = ReplicaFetcher(
        follower,
        topic=TOPIC,
        partition=PARTITION,
        replica_id=FOLLOWER,
        leader_id=LEADER,
        leader_epoch=EPOCH,
        transport=transport,
        max_bytes=3000,
        catch_up_max_bytes=6000,
        wait_ms=0,
    )
    try:
        yield leader, follower, transport, fetcher
    finally:
        fetcher.stop()
        leader.close()
        follower.close()


def catch_up(leader: TieredLog, follower: TieredLog, fetcher: ReplicaFetcher) -> None:
    for _ in range(10_000):
        if follower.next_offset == leader.next_offset and fetcher.rounds:
            fetcher.fetch_once()  # the fetch that reports the end the follower reached
            return
        fetcher.fetch_once()
    raise AssertionError("the follower did not catch up")


def segment_bytes(plog: TieredLog) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(plog.directory.glob("*.log"))}


def test_a_follower_copies_committed_records_without_an_fsync_each_and_reports_only_synced_ends(
    pair: tuple[TieredLog, TieredLog, InProcessLeader, ReplicaFetcher],
) -> None:
    leader, follower, transport, fetcher = pair
    produce(leader, 120)
    transport.rep.record_fetch(IN_SYNC, leader.next_offset)  # the ISR holds it all
    assert transport.rep.high_watermark == leader.next_offset

    catch_up(leader, follower, fetcher)

    assert segment_bytes(follower) == segment_bytes(leader)
    assert len(segment_bytes(leader)) > 3
    # Every fetch that could count (at or past the mark the leader had sent) came with
    # the follower's log fsynced up to where it asked from.
    counting = [h for h in transport.heard if h.offset >= h.mark_sent_before]
    assert counting and all(h.follower_flushed == h.offset for h in counting)
    # Below the mark, copies were not fsynced one by one.
    assert any(h.follower_flushed < h.offset for h in transport.heard)
    # Fetches were sent ahead of the append of the batches in hand, and only from ends
    # below the mark (they count for nothing).
    ahead = [h for h in transport.heard if h.follower_end < h.offset]
    assert ahead and all(h.offset < h.mark_sent_before for h in ahead)
    # It reached the mark with its log on disk: the leader may take it into the ISR.
    assert FOLLOWER in transport.rep.catching_up_followers()
    assert follower.flushed_offset == follower.next_offset == leader.next_offset


def test_an_in_sync_follower_reports_each_copy_only_once_it_is_on_disk(
    pair: tuple[TieredLog, TieredLog, InProcessLeader, ReplicaFetcher],
) -> None:
    leader, follower, transport, fetcher = pair
    produce(leader, 5)
    transport.rep.record_fetch(IN_SYNC, leader.next_offset)
    catch_up(leader, follower, fetcher)
    transport.heard.clear()
    for _ in range(6):
        # The producer's records are not committed until this follower reports them.
        produce(leader, 2)
        transport.rep.record_fetch(IN_SYNC, leader.next_offset)
        fetcher.fetch_once()  # copies them
        fetcher.fetch_once()  # reports the new end
    assert all(h.follower_flushed == h.offset for h in transport.heard)
    assert follower.flushed_offset == follower.next_offset == leader.next_offset
    assert segment_bytes(follower) == segment_bytes(leader)
