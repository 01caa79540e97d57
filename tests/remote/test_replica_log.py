"""The log side of replication (issue 16), in process: a leader and a follower TieredLog.

The follower copies the leader with ``read_batches`` + ``append_replica`` and ends
byte-identical; bad input (a wrong start, batches that do not follow, damaged bytes)
appends nothing; the high watermark caps ``read_batches``/``read_range`` at every offset,
in both tiers, survives a reopen and falls back to the log start when its checkpoint is
damaged; the leader-epoch cache follows truncation and retention; the KIP-101 scenario
(a leader that comes back after a new leader appended different records) ends with the
two logs identical; a follower resets below the leader's local start and keeps local
retention below the leader's remote end, never shipping.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tiered_log import LogConfig, ProducerRecord
from tiered_log.errors import (
    CorruptRecordError,
    InvalidArgumentError,
    NotLeaderError,
    OffsetOutOfRangeError,
)
from tiered_log.format import naming
from tiered_log.format.kafka import NewRecord
from tiered_log.format.kafka import encode_batch as kafka_batch
from tiered_log.format.records import Headers, batch_table, decode_records, receive_batches
from tiered_log.local.leader_epoch import EpochEntry, LeaderEpochCache
from tiered_log.partition import TieredLog
from tiered_log.partition.tiering import RETENTION_BATCH_SEGMENTS
from tiered_log.remote.fs import LocalDirStorage
from tiered_log.remote.tier import TierConfig

SMALL = LogConfig(segment_bytes=4096, index_interval_bytes=256)


def open_log(
    path: Path,
    bucket: Path | None = None,
    *,
    replicated: bool = True,
    interval_ms: int = 0,
    **tier: object,
) -> TieredLog:
    cfg = {
        "chunk_bytes": 1024,
        "fetch_bytes": 4096,
        "prefetch_bytes": 4096,
        "remote_enabled": bucket is not None,
        **tier,
    }
    return TieredLog(
        path,
        log_id="orders-0",
        storage=LocalDirStorage(bucket) if bucket is not None else None,
        config=SMALL,
        tier=TierConfig(**cfg),  # type: ignore[arg-type]
        start_shipper=False,
        rebuild=False,
        replicated=replicated,
        hw_checkpoint_interval_ms=interval_ms,
    )


def value(o: int, tag: bytes = b"") -> bytes:
    return tag + hashlib.sha256(str(o).encode() + tag).digest() * (1 + o % 5)


def produce(log: TieredLog, n: int, per_batch: int = 7, tag: bytes = b"") -> None:
    """``n`` records in batches of ``per_batch`` (keys, headers, timestamps of their own)."""
    o = log.next_offset
    end = o + n
    while o < end:
        k = min(per_batch, end - o)
        log.append_batch(
            [
                ProducerRecord(
                    value(x, tag),
                    key=b"k%d" % x if x % 3 else None,
                    headers=(("h", b"%d" % x),) if x % 4 == 0 else (),
                    timestamp=1_000_000 + 10 * x,
                )
                for x in range(o, o + k)
            ]
        )
        o += k


def copy(
    leader: TieredLog, follower: TieredLog, max_bytes: int = 1500, upto: int | None = None
) -> int:
    """The follower's fetcher, in process: pages from its log end until it reaches the
    leader's (or ``upto``). Returns the number of pages."""
    end = leader.next_offset if upto is None else upto
    pages = 0
    while follower.next_offset < end:
        page = leader.read_batches(follower.next_offset, 500, max_bytes, upto=upto)
        assert follower.append_replica(page.data, leader.leader_epoch_entries()) == page.next_offset
        pages += 1
    return pages


def records(
    log: TieredLog, start: int | None = None
) -> list[tuple[int, int, bytes | None, bytes, Headers, int]]:
    o = log.log_start_offset if start is None else start
    out: list[tuple[int, int, bytes | None, bytes, Headers, int]] = []
    while o < log.next_offset:
        got = log.read_range(o, 1000, 1 << 22)
        for r in got:
            assert r.value is not None  # every record here has a value
            out.append((r.offset, r.timestamp, r.key, bytes(r.value), r.headers, r.checksum))
        o = got[-1].offset + 1
    return out


def store_bytes(directory: Path) -> bytes:
    """The local segments' stores, in order, as one byte string."""
    return b"".join(p.read_bytes() for p in sorted(directory.glob("*" + naming.LOG_SUFFIX)))


# ---- copying ------------------------------------------------------------------------------


def test_a_leader_told_to_follow_refuses_appends_until_it_leads_again(tmp_path: Path) -> None:
    """A produce that passed the broker's leadership check just before the node made
    this replica a follower must not write among the records its fetcher copies: once
    told to follow, the log refuses a client's records (plain and idempotent, a duplicate
    too) and a DeleteRecords with NotLeaderError and changes nothing, while the fetcher's copies go in; an
    epoch assigned again (it leads) lifts the refusal. A follow waits for an append that
    is running (they share the append lock)."""
    new_leader = open_log(tmp_path / "b")
    log = open_log(tmp_path / "a")
    assert log.assign_leader_epoch(1) == 0
    produce(log, 10)
    idem = kafka_batch([NewRecord(b"i")], producer_id=7, producer_epoch=0, base_sequence=0)
    assert log.append_batch(receive_batches(idem, 1 << 20)) == (10, 10)
    copy(log, new_leader)
    log.follow()
    assert new_leader.assign_leader_epoch(2) == 11
    produce(new_leader, 5, tag=b"new")
    for attempt in (
        lambda: log.append(b"late"),
        lambda: log.append_batch([b"late"]),
        lambda: log.append_batch(receive_batches(idem, 1 << 20)),  # a duplicate of 10
        lambda: log.delete_records(5),
    ):
        with pytest.raises(NotLeaderError):
            attempt()
    assert (log.log_start_offset, log.next_offset) == (0, 11)
    copy(new_leader, log)  # the new leader's records follow the old ones, as its log has them
    assert records(log) == records(new_leader)
    assert log.assign_leader_epoch(3) == 16  # it leads again: it appends
    produce(log, 1)
    assert log.next_offset == 17

    # A follow that comes while an append holds the append lock waits for it.
    log.append_batch([b"x"])
    entered, release = threading.Event(), threading.Event()

    def slow_epoch() -> int:
        entered.set()
        release.wait(10)
        return 3

    log._local.set_leader_epoch_source(slow_epoch)  # the append blocks inside the lock
    appender = threading.Thread(target=lambda: log.append_batch([b"y"]))
    appender.start()
    assert entered.wait(10)
    follower = threading.Thread(target=log.follow)
    follower.start()
    follower.join(0.3)
    assert follower.is_alive()  # held off by the running append
    release.set()
    appender.join(10)
    follower.join(10)
    assert not follower.is_alive() and log.next_offset == 19
    for lg in (log, new_leader):
        lg.close()


def test_follower_copies_leader_byte_identical(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "a", tmp_path / "bucket")
    follower = open_log(tmp_path / "b", tmp_path / "bucket")
    assert leader.assign_leader_epoch(1) == 0
    assert leader.assign_leader_epoch(1) == 0  # idempotent for the current epoch
    produce(leader, 300)
    assert copy(leader, follower) > 3
    assert follower.next_offset == leader.next_offset == 300
    assert records(follower) == records(leader)
    assert store_bytes(tmp_path / "b") == store_bytes(tmp_path / "a")
    assert follower.leader_epoch_entries() == [EpochEntry(1, 0)]
    assert follower.latest_leader_epoch == 1
    # A second epoch on the leader reaches the follower at its start.
    assert leader.assign_leader_epoch(2) == 300
    produce(leader, 40, per_batch=3)
    copy(leader, follower, max_bytes=1 << 20)  # one page, both epochs in it
    assert follower.leader_epoch_entries() == leader.leader_epoch_entries() == [(1, 0), (2, 300)]
    assert store_bytes(tmp_path / "b") == store_bytes(tmp_path / "a")
    assert follower.append_replica(b"", [(2, 300)]) == 340  # an empty page: nothing
    for log in (leader, follower):
        log.close()
    follower = open_log(tmp_path / "b", tmp_path / "bucket")  # and it reopens as it was
    assert follower.leader_epoch_entries() == [(1, 0), (2, 300)]
    assert records(follower)[-1][0] == 339
    follower.close()


def test_a_plain_log_can_be_a_follower(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "a", replicated=False)
    follower = open_log(tmp_path / "b", replicated=False)
    leader.assign_leader_epoch(4)
    produce(leader, 100)
    copy(leader, follower, max_bytes=700)
    assert records(follower) == records(leader)
    assert follower.leader_epoch_entries() == [(4, 0)]
    assert follower.high_watermark == follower.bounds().high_watermark == 100
    assert follower.set_high_watermark(3) == 100  # no HW of its own: a no-op
    assert not (tmp_path / "b" / naming.HIGH_WATERMARK_FILE).exists()
    leader.close()
    follower.close()


def test_wrong_start_and_gaps_are_refused(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "a")
    follower = open_log(tmp_path / "b")
    leader.assign_leader_epoch(1)
    produce(leader, 60, per_batch=5)
    first = leader.read_batches(0, 10, 1 << 20)
    assert first.next_offset == 10
    follower.append_replica(first.data, leader.leader_epoch_entries())
    snapshot = store_bytes(tmp_path / "b")
    with pytest.raises(InvalidArgumentError, match=r"start at offset 0 .* next offset is 10"):
        follower.append_replica(first.data, [(1, 0)])  # again
    later = leader.read_batches(20, 10, 1 << 20)
    with pytest.raises(InvalidArgumentError, match=r"offset 20 .* next offset is 10"):
        follower.append_replica(later.data, [(1, 0)])  # a gap
    nxt = leader.read_batches(10, 5, 1 << 20)
    with pytest.raises(InvalidArgumentError, match="do not follow"):
        follower.append_replica(bytes(nxt.data) + bytes(later.data), [(1, 0)])
    with pytest.raises(InvalidArgumentError, match="must increase"):
        follower.append_replica(nxt.data, [(2, 0), (1, 5)])
    follower.assign_leader_epoch(3)  # e.g. it led epoch 3 for a moment without appending
    with pytest.raises(InvalidArgumentError, match="below this log's latest epoch 3"):
        follower.append_replica(nxt.data, [(1, 0)])
    assert follower.next_offset == 10 and store_bytes(tmp_path / "b") == snapshot
    leader.close()
    follower.close()


def test_damaged_bytes_append_nothing(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "a")
    follower = open_log(tmp_path / "b")
    leader.assign_leader_epoch(1)
    produce(leader, 40, per_batch=4)
    page = bytes(leader.read_batches(0, 40, 1 << 20).data)
    infos, end = batch_table(page, 0)
    assert end == len(page) and len(infos) == 10
    for pos in (infos[0].position + 40, infos[-1].position + infos[-1].size - 1):  # first, last
        bad = bytearray(page)
        bad[pos] ^= 0x55
        with pytest.raises(CorruptRecordError):
            follower.append_replica(bad, [(1, 0)])
    with pytest.raises(CorruptRecordError):
        follower.append_replica(page[:-3], [(1, 0)])  # ends inside a batch
    assert follower.next_offset == 0 and store_bytes(tmp_path / "b") == b""
    assert follower.leader_epoch_entries() == []
    follower.append_replica(page, [(1, 0)])
    assert records(follower) == records(leader)
    leader.close()
    follower.close()


# ---- the high watermark -----------------------------------------------------------------


def batch_bounds(log: TieredLog) -> list[int]:
    """Every batch boundary of ``log`` (the offsets a batch starts at, and its end)."""
    data = bytes(log.read_batches(0, 1 << 30, 1 << 30).data)
    return [b.base_offset for b in batch_table(data, 0)[0]] + [log.next_offset]


def check_capped(log: TieredLog, upto: int) -> None:
    """Reads capped at ``upto`` at every offset: nothing at or past it, everything below
    it (the limits allowing), empty at or past it."""
    bounds = set(batch_bounds(log))
    for o in range(log.log_start_offset, log.next_offset + 1):
        page = log.read_batches(o, 1 << 20, 1 << 24, upto=upto)
        recs = log.read_range(o, 1 << 20, 1 << 24, upto=upto)
        if o >= upto:
            assert page.data == b"" and page.next_offset == o and recs == []
            continue
        assert [r.offset for r in recs] == list(range(o, upto))
        got = decode_records(bytes(page.data), start_offset=o)[0]
        assert all(r.offset < upto for r in got)
        if upto in bounds:
            assert page.next_offset == upto == (got[-1].offset + 1)
        else:  # the batch straddling upto is not served: the page ends before it
            assert page.next_offset <= upto and page.next_offset in bounds | {o}
        small = log.read_batches(o, 1, 1, upto=upto)  # limits and the cap together
        assert small.next_offset <= upto


def test_hw_caps_reads_at_every_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path / "a")
    produce(log, 30, per_batch=4)
    produce(log, 20, per_batch=1)
    assert log.high_watermark == log.bounds().high_watermark == 0  # nothing committed yet
    for hw in batch_bounds(log):
        assert log.set_high_watermark(hw) == hw == log.bounds().high_watermark
        check_capped(log, hw)
    assert log.set_high_watermark(10) == 50  # it never moves down by itself
    assert log.set_high_watermark(10**9) == 50  # nor past the log end
    for upto in (1, 2, 3, 5, 6, 7, 33):  # inside batches too: never served past
        check_capped(log, upto)
    with pytest.raises(OffsetOutOfRangeError):
        log.read_batches(51, upto=50)
    log.close()


def test_hw_caps_remote_reads(tmp_path: Path) -> None:
    log = open_log(tmp_path / "a", tmp_path / "bucket", local_retention_bytes=0)
    produce(log, 400, per_batch=6)
    log.roll()
    assert log.tier_once() == 0  # nothing committed: nothing ships
    log.set_high_watermark(200)
    assert log.eligible_segments() and all(s.next_offset <= 200 for s in log.eligible_segments())
    log.tier_once()
    b = log.bounds()
    assert 0 < b.remote_end_offset <= 200 and b.local_start_offset == b.remote_end_offset  # type: ignore[operator]
    assert b.high_watermark == 200
    log.set_high_watermark(400)
    log.tier_once()
    remote_end = log.bounds().remote_end_offset
    assert remote_end is not None and remote_end > 200
    for upto in (1, 6, 7, 100, 102, remote_end - 1, remote_end):
        for o in range(0, min(upto + 2, remote_end)):
            page = log.read_batches(o, 1 << 20, 1 << 24, upto=upto)
            got = decode_records(bytes(page.data), start_offset=o)[0]
            assert page.next_offset <= max(upto, o)
            assert [r.offset for r in got] == list(range(o, page.next_offset))
            if upto % 6 == 0 and o < upto:
                assert page.next_offset == upto  # on a batch boundary: all of it
            recs = log.read_range(o, 1 << 20, 1 << 24, upto=upto)
            assert [r.offset for r in recs] == list(range(o, max(o, upto)))
    log.close()


def test_hw_checkpoint_survives_reopen(tmp_path: Path) -> None:
    path = tmp_path / "a"
    ckpt = path / naming.HIGH_WATERMARK_FILE
    log = open_log(path, interval_ms=3_600_000)
    produce(log, 50, per_batch=5)
    log.set_high_watermark(35)
    assert not ckpt.exists()  # at most every interval: not yet
    log.maintain(tier=False)
    assert not ckpt.exists()
    log.close()  # but on close
    assert ckpt.read_bytes() == b"0\n35\n"
    log = open_log(path)
    assert log.high_watermark == 35
    log.set_high_watermark(45)  # interval 0: at once
    assert ckpt.read_bytes() == b"0\n45\n"
    log.truncate(40)  # the HW drops with a truncation, and its checkpoint at once
    assert log.high_watermark == 40 and ckpt.read_bytes() == b"0\n40\n"
    log.close()
    ckpt.write_bytes(b"0\n999\n")  # past the log end: clamped
    log = open_log(path)
    assert log.high_watermark == 40
    log.close()
    for damaged in (b"0\n3x\n", b"1\n30\n", b"0\n30", b"", b"\xff\n30\n"):
        ckpt.write_bytes(damaged)
        log = open_log(path)
        assert log.high_watermark == log.log_start_offset == 0
        log.close()
    ckpt.unlink()
    log = open_log(path)
    assert log.high_watermark == 0
    log.close()


def test_hw_checkpoint_is_written_once_its_interval_passed(tmp_path: Path) -> None:
    """The interval is timed by the log's clock (injected here): the upkeep writes the
    checkpoint once the interval has passed since the last write, not before."""
    now = [1_000_000]
    path = tmp_path / "a"
    ckpt = path / naming.HIGH_WATERMARK_FILE
    log = TieredLog(
        path,
        config=SMALL,
        start_shipper=False,
        replicated=True,
        hw_checkpoint_interval_ms=1000,
        clock=lambda: now[0],
    )
    produce(log, 20, per_batch=5)
    log.set_high_watermark(10)
    now[0] += 999
    log.maintain(tier=False)
    assert not ckpt.exists()
    now[0] += 1
    log.maintain(tier=False)
    assert ckpt.read_bytes() == b"0\n10\n"
    log.set_high_watermark(15)  # the interval starts again at the write
    now[0] += 999
    log.maintain(tier=False)
    assert ckpt.read_bytes() == b"0\n10\n"
    now[0] += 1
    log.maintain(tier=False)
    assert ckpt.read_bytes() == b"0\n15\n"
    log.close()


# ---- leader epochs ------------------------------------------------------------------------


def test_kip101_divergence_end_to_end(tmp_path: Path) -> None:
    """A leads epoch 1 and has [0, 10); B copied [0, 8). A dies; B leads epoch 2 and
    appends [8, 12), other records; A comes back as a follower, asks B where its epoch 1
    ends, truncates there and copies: A ends identical to B."""
    a = open_log(tmp_path / "a", tmp_path / "bucket")
    b = open_log(tmp_path / "b", tmp_path / "bucket")
    a.assign_leader_epoch(1)
    produce(a, 10, per_batch=2, tag=b"A")
    copy(a, b, upto=8)
    assert b.next_offset == 8
    b.set_high_watermark(8)
    a.close()  # A dies with [8, 10) nobody else has
    assert b.assign_leader_epoch(2) == 8
    produce(b, 4, per_batch=2, tag=b"B")
    b.set_high_watermark(12)
    a = open_log(tmp_path / "a", tmp_path / "bucket")
    assert a.latest_leader_epoch == 1 and a.next_offset == 10
    answer = b.end_offset_for_epoch(a.latest_leader_epoch)
    assert answer == (1, 8)
    cut = a.divergence(answer)
    assert cut == 8
    a.truncate(cut)
    assert a.leader_epoch_entries() == [(1, 0)]
    # Asked again with the same epoch: nothing more to cut.
    assert a.divergence(b.end_offset_for_epoch(a.latest_leader_epoch)) == 8
    copy(b, a)
    assert records(a) == records(b)
    assert [bytes(r[3]).startswith(b"B") for r in records(a)][8:] == [True] * 4
    assert store_bytes(tmp_path / "a") == store_bytes(tmp_path / "b")
    assert a.leader_epoch_entries() == b.leader_epoch_entries() == [(1, 0), (2, 8)]
    # An answer for an epoch B does not know (-1, -1): A falls back to its HW.
    a.set_high_watermark(12)
    assert a.divergence((-1, -1)) == 12
    a.close()
    b.close()


def test_epoch_cache_follows_truncation_retention_and_reopen(tmp_path: Path) -> None:
    log = open_log(tmp_path / "a", retention_bytes=3 * 4096)
    for epoch in (1, 2, 3):
        log.assign_leader_epoch(epoch)
        produce(log, 50)
    assert log.leader_epoch_entries() == [(1, 0), (2, 50), (3, 100)]
    assert log.end_offset_for_epoch(2) == (2, 100)
    assert log.end_offset_for_epoch(3) == (3, 150)
    assert log.end_offset_for_epoch(7) == (-1, -1)
    log.truncate(120)
    assert log.leader_epoch_entries() == [(1, 0), (2, 50), (3, 100)]
    log.truncate(100)
    assert log.leader_epoch_entries() == [(1, 0), (2, 50)]
    assert log.end_offset_for_epoch(2) == (2, 100)
    with pytest.raises(InvalidArgumentError):
        log.assign_leader_epoch(1)  # an older epoch
    log.assign_leader_epoch(4)
    produce(log, 400)
    log.set_high_watermark(log.next_offset)
    log.tier_once()  # total retention (no remote tier): the log start moves
    start = log.log_start_offset
    assert start > 100
    assert log.leader_epoch_entries() == [(4, start)]
    assert log.high_watermark == log.next_offset
    log.close()
    # A crash after an epoch was recorded but before its batches were written: the
    # entry past the log end goes when the log opens (one at the end stays).
    cache = LeaderEpochCache(tmp_path / "a")
    cache.assign(5, 500)
    cache.assign(6, 600)
    log = open_log(tmp_path / "a")
    assert log.next_offset == 500
    assert log.leader_epoch_entries() == [(4, start), (5, 500)]
    log.close()
    (tmp_path / "a" / naming.LEADER_EPOCH_FILE).write_bytes(b"garbage")
    log = open_log(tmp_path / "a")  # a damaged cache: none (and the log opens)
    assert log.leader_epoch_entries() == [] and log.latest_leader_epoch == -1
    log.close()


def test_leader_truncation_below_local_start_cuts_hw_and_epochs(tmp_path: Path) -> None:
    log = open_log(tmp_path / "a", tmp_path / "bucket", local_retention_bytes=0)
    log.assign_leader_epoch(1)
    produce(log, 200)
    log.assign_leader_epoch(2)
    produce(log, 200)
    log.roll()
    log.set_high_watermark(400)
    log.tier_once()
    local_start = log.bounds().local_start_offset
    assert local_start > 150
    log.truncate(150)
    assert log.next_offset == 150 and log.high_watermark == 150
    assert log.leader_epoch_entries() == [(1, 0)]
    assert records(log, 140)[-1][0] == 149
    log.close()


# ---- the follower's upkeep -------------------------------------------------------------


def test_reset_below_leader_local_start(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "a", tmp_path / "bucket", local_retention_bytes=0)
    follower = open_log(tmp_path / "b", tmp_path / "bucket-b")
    leader.assign_leader_epoch(1)
    produce(leader, 100)
    copy(leader, follower)
    leader.assign_leader_epoch(2)
    produce(leader, 400)
    leader.roll()
    leader.set_high_watermark(500)
    leader.tier_once()
    produce(leader, 30)
    start = leader.bounds().local_start_offset
    assert start > 100
    follower.set_high_watermark(100)
    follower.reset_replica(start)
    assert follower.next_offset == follower.log_start_offset == follower.high_watermark == start
    assert follower.leader_epoch_entries() == []
    copy(leader, follower)
    assert follower.leader_epoch_entries() == [(2, start)]
    assert records(follower) == records(leader, start)
    leader.close()
    follower.close()


def test_follower_retention_below_leader_remote_end_never_ships(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "a", tmp_path / "bucket")
    follower = open_log(tmp_path / "b", tmp_path / "bucket-b", local_retention_bytes=0)
    leader.assign_leader_epoch(1)
    produce(leader, 600)
    copy(leader, follower)
    segs = [s["next_offset"] for s in follower.describe()["local_segments"]][:-1]
    assert len(segs) > 4
    follower.apply_replica_retention(segs[2])  # HW 0: nothing goes
    assert follower.log_start_offset == 0
    follower.set_high_watermark(segs[1] + 1)
    follower.apply_replica_retention(segs[2])  # below the HW and the leader's remote end
    assert follower.log_start_offset == segs[1]
    follower.set_high_watermark(600)
    follower.apply_replica_retention(segs[3] - 1)
    assert follower.log_start_offset == segs[2]
    follower.maintain(tier=False)
    assert follower.leader_epoch_entries() == [(1, segs[2])]  # from its log start
    assert records(follower) == records(leader, segs[2])
    b = follower.bounds()
    assert (b.log_start_offset, b.high_watermark, b.next_offset) == (segs[2], 600, 600)
    assert follower.stats()["remote_bytes"] == 0 and follower.describe()["remote_segments"] == []
    assert not any(p.is_file() for p in (tmp_path / "bucket-b").rglob("*"))
    leader.close()
    follower.close()


def test_a_retention_round_deletes_a_bounded_number_of_segments(tmp_path: Path) -> None:
    """A follower holding many shipped segments (its leader's shipping caught up at once)
    drops them over several rounds, never all at once under its log's lock."""
    leader = open_log(tmp_path / "a", tmp_path / "bucket")
    follower = open_log(tmp_path / "b", tmp_path / "bucket-b", local_retention_bytes=0)
    leader.assign_leader_epoch(1)
    for _ in range(3 * RETENTION_BATCH_SEGMENTS):
        produce(leader, 10)
        copy(leader, follower)
        follower.roll()
    end = leader.next_offset
    follower.set_high_watermark(end)
    held = len(follower.describe()["local_segments"])
    assert held > 2 * RETENTION_BATCH_SEGMENTS + 1
    rounds = 0
    while len(follower.describe()["local_segments"]) > 1:
        before = len(follower.describe()["local_segments"])
        follower.apply_replica_retention(end)
        rounds += 1
        assert before - len(follower.describe()["local_segments"]) <= RETENTION_BATCH_SEGMENTS
    assert rounds >= 3
    assert records(follower) == records(leader, follower.log_start_offset)
    leader.close()
    follower.close()


def test_a_leaders_round_deletes_what_it_shipped_in_batches(tmp_path: Path) -> None:
    """A leader that ships a backlog of hundreds of segments in one round deletes them
    locally in the same round (batch after batch, after each group of copies), not one
    batch a round while the rest piles up on its disk."""
    leader = open_log(
        tmp_path / "a",
        tmp_path / "bucket",
        local_retention_bytes=0,
        snapshot_interval_segments=50,
    )
    leader.assign_leader_epoch(1)
    n = 3 * RETENTION_BATCH_SEGMENTS
    for _ in range(n):
        produce(leader, 10)
        leader.roll()
    want = records(leader)
    leader.set_high_watermark(leader.next_offset)
    assert leader.tier_once() == n
    assert len(leader.describe()["local_segments"]) == 1  # the active one
    assert leader.bounds().local_start_offset == leader.next_offset
    assert records(leader, 0) == want  # every record from the bucket
    leader.close()


def test_follower_without_remote_tier_applies_total_retention(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "a")
    follower = open_log(tmp_path / "b", retention_bytes=2 * 4096)
    leader.assign_leader_epoch(1)
    produce(leader, 300)
    copy(leader, follower)
    follower.set_high_watermark(300)
    follower.apply_replica_retention(0)  # the leader's log start: nothing below it
    assert follower.log_start_offset == 0
    follower.apply_replica_retention(300)
    start = follower.log_start_offset
    assert start > 0 and follower.leader_epoch_entries() == [(1, start)]
    leader.close()
    follower.close()


# ---- with threads: a shipper, a fetcher, a consumer ---------------------------------------


def wait_for(cond: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.01)
    return cond()


def test_shipper_ships_only_committed_segments(tmp_path: Path) -> None:
    leader = TieredLog(
        tmp_path / "a",
        log_id="orders-0",
        storage=LocalDirStorage(tmp_path / "bucket"),
        config=SMALL,
        tier=TierConfig(remote_enabled=True, ship_interval_ms=20),
        rebuild=False,
        replicated=True,
    )
    try:
        produce(leader, 300)
        leader.roll()
        sealed_end = leader.next_offset
        time.sleep(0.3)  # rounds run: nothing is committed, nothing ships
        assert leader.bounds().remote_end_offset == 0 and leader.eligible_segments() == []
        leader.set_high_watermark(sealed_end)  # passes the sealed segments: wakes the shipper
        assert wait_for(lambda: leader.bounds().remote_end_offset == sealed_end)
        produce(leader, 100)
        leader.set_high_watermark(leader.next_offset)
        assert leader.bounds().remote_end_offset == sealed_end  # the active segment stays
    finally:
        leader.close()


def test_fetcher_and_consumer_threads(tmp_path: Path) -> None:
    """A producer appends to the leader, a fetcher copies to the follower and moves the
    leader's HW to the follower's end (the only ISR member besides it), a consumer reads
    the leader capped at the HW: it never sees a record the follower lacks."""
    leader = open_log(tmp_path / "a", interval_ms=1000)
    follower = open_log(tmp_path / "b", interval_ms=1000)
    leader.assign_leader_epoch(1)
    stop = threading.Event()
    errors: list[BaseException] = []
    seen: list[int] = []

    def guarded(fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                fn()
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)
                stop.set()

        return run

    def producer() -> None:
        for _ in range(80):
            produce(leader, 5, per_batch=3)
        stop.set()

    def fetcher() -> None:
        while not (stop.is_set() and follower.next_offset == leader.next_offset):
            page = leader.read_batches(follower.next_offset, 50, 4000)
            follower.append_replica(page.data, leader.leader_epoch_entries())
            leader.set_high_watermark(follower.next_offset)
            follower.set_high_watermark(leader.high_watermark)

    def consumer() -> None:
        o = 0
        while not (stop.is_set() and o == leader.next_offset) and not errors:
            hw = leader.high_watermark
            recs = leader.read_range(o, 100, 1 << 20, upto=hw)
            page = leader.read_batches(o, 100, 1 << 20, upto=hw)
            assert page.next_offset <= hw and all(r.offset < hw for r in recs)
            assert all(r.offset < follower.next_offset for r in recs)
            seen.extend(r.offset for r in recs)
            o += len(recs)
            if not recs:
                time.sleep(0.001)

    threads = [threading.Thread(target=guarded(f)) for f in (producer, fetcher, consumer)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert seen == list(range(400))
    assert records(follower) == records(leader)
    assert leader.high_watermark == follower.high_watermark == 400
    leader.close()
    follower.close()
    assert (tmp_path / "b" / naming.HIGH_WATERMARK_FILE).read_bytes() == b"0\n400\n"


def test_a_follower_rolls_exactly_where_its_leader_did(tmp_path: Path) -> None:
    """With the leader's segment bases, the follower's segments are the leader's, byte
    for byte, however its fetches cut the batches; while following it never rolls by its
    own age (a follower that becomes leader ships from one of its own segment bases)."""
    cfg_ms = LogConfig(segment_bytes=4096, index_interval_bytes=256, segment_ms=1)
    leader = TieredLog(tmp_path / "a", log_id="orders-0", config=cfg_ms, replicated=True)
    follower = TieredLog(tmp_path / "b", log_id="orders-0", config=cfg_ms, replicated=True)
    try:
        leader.lead(0)
        follower.follow()
        for round_ in range(6):
            produce(leader, 37, per_batch=5)
            if round_ % 2:
                leader.roll()  # a roll the follower cannot guess from sizes
            for max_bytes in (700, 5000):
                while follower.next_offset < leader.next_offset:
                    o = follower.next_offset
                    page = leader.read_batches(o, 500, max_bytes)
                    follower.append_replica(
                        page.data,
                        leader.leader_epoch_entries(),
                        leader.segment_bases(o, page.next_offset),
                    )
            time.sleep(0.002)
            follower.maintain()  # segment_ms passed: a leader would roll, a follower not
        bases = [
            s["base_offset"]
            for s in leader.describe()["local_segments"]
            if s["base_offset"] < leader.next_offset
        ]  # not an empty active one
        assert len(bases) > 5
        assert [s["base_offset"] for s in follower.describe()["local_segments"]] == bases
        for base in bases:
            name = naming.segment_path(tmp_path / "a", base, naming.LOG_SUFFIX).name
            assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    finally:
        leader.close()
        follower.close()


def test_a_followers_resync_leaves_the_leaders_copy_under_way_alone(tmp_path: Path) -> None:
    """A follower rebuilt from the bucket (reset to its leader's remote end) only reads
    it: a data object without its manifest may be the leader's copy under way, and
    deleting it would leave the leader's committed manifest without data. The leader's
    own resync (a new leader) does clear such leftovers."""
    bucket = tmp_path / "bucket"
    leader = open_log(tmp_path / "a", bucket)
    leader.assign_leader_epoch(1)
    produce(leader, 300)
    leader.roll()
    leader.set_high_watermark(300)
    leader.tier_once()
    end = leader.bounds().remote_end_offset
    assert end is not None and end > 0
    under_way = naming.segment_object_key("orders-0", end, "f" * 12, naming.LOG_SUFFIX)
    (bucket / under_way).parent.mkdir(parents=True, exist_ok=True)
    (bucket / under_way).write_bytes(b"half a copy")
    follower = open_log(tmp_path / "b", bucket)
    follower.reset_replica(end)
    assert follower.resync_remote() > 0
    assert (bucket / under_way).exists()
    assert follower.bounds().remote_end_offset == end
    assert records(follower, 0)[:5] == records(leader, 0)[:5]  # archived reads work
    follower.close()
    leader.lead(2)
    leader.tier_once()  # a new leader's first round resyncs: leftovers go
    assert not (bucket / under_way).exists()
    leader.close()
