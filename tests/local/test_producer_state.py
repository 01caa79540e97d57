"""The idempotent producers' state of a partition log: sequence checks (wrap, epoch
bump, the five-batch window), duplicates answered with the original offsets, and the
state rebuilt at open (from the snapshot and the batch headers) and carried by a
follower's append and a truncation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tiered_log.errors import (
    InvalidArgumentError,
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    UnknownProducerIdError,
)
from tiered_log.format.kafka import NewRecord
from tiered_log.format.kafka import encode_batch as kafka_batch
from tiered_log.format.records import receive_batches
from tiered_log.local.log import LogConfig
from tiered_log.partition.log import TieredLog
from tiered_log.partition.producer_state import (
    SEQ_MOD,
    SNAPSHOT_FILE,
    ProducerBatch,
    ProducerStateManager,
    in_sequence,
    last_sequence,
)

PID = 4242


def pb(first_seq: int, n: int = 1, epoch: int = 0, pid: int = PID) -> ProducerBatch:
    return ProducerBatch(pid, epoch, first_seq, n, 1000)


def batch(first_seq: int, n: int = 1, epoch: int = 0, pid: int = PID, tag: bytes = b"v") -> bytes:
    recs = [NewRecord(tag + b"%d" % i, timestamp=1000 + i) for i in range(n)]
    return kafka_batch(recs, producer_id=pid, producer_epoch=epoch, base_sequence=first_seq)


def append(tlog: TieredLog, data: bytes) -> tuple[int, int]:
    return tlog.append_batch(receive_batches(data, 1 << 20))


# ---- the manager alone ----------------------------------------------------------------------


def test_sequence_arithmetic_wraps() -> None:
    assert last_sequence(SEQ_MOD - 2, 4) == 1
    assert in_sequence(SEQ_MOD - 1, 0)
    assert in_sequence(5, 6)
    assert not in_sequence(5, 7)
    assert not in_sequence(SEQ_MOD - 1, 1)


def test_checks_new_duplicate_gap_epochs(tmp_path: Path) -> None:
    ps = ProducerStateManager(tmp_path, "t")
    assert ps.check(pb(0, 3)) is None
    ps.update(pb(0, 3), 10, 12)
    assert ps.check(pb(3, 2)) is None
    ps.update(pb(3, 2), 13, 14)
    dup = ps.check(pb(0, 3))
    assert dup is not None and (dup.first_offset, dup.last_offset) == (10, 12)
    with pytest.raises(OutOfOrderSequenceError):
        ps.check(pb(6, 1))  # 5 is missing
    with pytest.raises(OutOfOrderSequenceError):
        ps.check(pb(1, 2))  # inside a stored batch but not one of them
    # A new epoch starts at 0, forgets the old epoch's batches; the old one is fenced.
    with pytest.raises(OutOfOrderSequenceError):
        ps.check(pb(5, 1, epoch=1))
    assert ps.check(pb(0, 1, epoch=1)) is None
    ps.update(pb(0, 1, epoch=1), 15, 15)
    with pytest.raises(InvalidProducerEpochError):
        ps.check(pb(5, 1, epoch=0))
    with pytest.raises(InvalidProducerEpochError):
        ps.check(pb(0, 3, epoch=0))  # was a duplicate under epoch 0: fenced now
    e = ps.entry(PID)
    assert e is not None and e.epoch == 1 and len(e.batches) == 1


def test_unknown_producer_refused_while_complete_accepted_after(tmp_path: Path) -> None:
    ps = ProducerStateManager(tmp_path, "t")
    with pytest.raises(UnknownProducerIdError):
        ps.check(pb(7))
    ps.clear(complete=False)  # e.g. the log restarted above offset 0
    assert ps.check(pb(7)) is None


def test_five_batch_window(tmp_path: Path) -> None:
    ps = ProducerStateManager(tmp_path, "t")
    for i in range(7):
        ps.update(pb(i * 2, 2), i * 2, i * 2 + 1)
    e = ps.entry(PID)
    assert e is not None and [m.first_seq for m in e.batches] == [4, 6, 8, 10, 12]
    for i in range(2, 7):
        m = ps.check(pb(i * 2, 2))
        assert m is not None and m.first_offset == i * 2
    with pytest.raises(OutOfOrderSequenceError):
        ps.check(pb(2, 2))  # fell out of the window: no longer recognized
    assert ps.check(pb(14, 2)) is None


def test_wrap_continues_at_zero(tmp_path: Path) -> None:
    ps = ProducerStateManager(tmp_path, "t")
    ps.clear(complete=False)
    top = SEQ_MOD - 3
    ps.update(pb(top, 3), 0, 2)  # sequences 2**31-3 .. 2**31-1
    with pytest.raises(OutOfOrderSequenceError):
        ps.check(pb(1))  # skips 0
    assert ps.check(pb(0, 2)) is None
    ps.update(pb(0, 2), 3, 4)
    assert ps.check(pb(2)) is None
    # A batch straddling the wrap (2**31-2, 2**31-1, 0) is followed by 1.
    ps.update(pb(SEQ_MOD - 2, 3, pid=9), 5, 7)
    assert ps.check(pb(1, pid=9)) is None
    m = ps.check(pb(SEQ_MOD - 2, 3, pid=9))
    assert m is not None and m.first_offset == 5


def test_snapshot_round_trip(tmp_path: Path) -> None:
    ps = ProducerStateManager(tmp_path, "t")
    ps.update(pb(0, 3), 0, 2)
    ps.update(pb(0, 1, pid=7, epoch=2), 3, 3)
    ps.write_snapshot(4)
    again = ProducerStateManager(tmp_path, "t")
    assert again.load_snapshot() == 4
    m = again.check(pb(0, 3))
    assert m is not None and m.last_offset == 2
    e = again.entry(7)
    assert e is not None and e.epoch == 2
    (tmp_path / SNAPSHOT_FILE).write_bytes(b"{not json")
    assert ProducerStateManager(tmp_path, "t").load_snapshot() is None


# ---- in a partition log -------------------------------------------------------------------


def open_log(d: Path, segment_bytes: int | None = None) -> TieredLog:
    cfg = LogConfig() if segment_bytes is None else LogConfig(segment_bytes=segment_bytes)
    return TieredLog(d, log_id="p-0", config=cfg, start_shipper=False)


def test_log_dedups_and_refuses(tmp_path: Path) -> None:
    with open_log(tmp_path / "p") as tlog:
        tlog.append_batch([b"plain"])  # offset 0: no producer id
        assert append(tlog, batch(0, 3)) == (1, 3)
        assert append(tlog, batch(0, 3)) == (1, 3)  # the retry: not written again
        assert tlog.next_offset == 4
        with pytest.raises(OutOfOrderSequenceError):
            append(tlog, batch(5, 1))
        assert append(tlog, batch(3, 2)) == (4, 5)
        assert tlog.next_offset == 6
        two = receive_batches(batch(5, 1) + batch(6, 1), 1 << 20)
        with pytest.raises(InvalidArgumentError):
            tlog.append_batch(two)
        assert tlog.next_offset == 6


def test_state_survives_reopen_with_and_without_snapshot(tmp_path: Path) -> None:
    d = tmp_path / "p"
    with open_log(d, segment_bytes=1024) as tlog:
        seq = 0
        for _ in range(30):  # several segments
            append(tlog, batch(seq, 4, tag=b"x" * 40))
            seq += 4
            tlog.maintain(tier=False)
        last = tlog.next_offset - 4, tlog.next_offset - 1
        assert len(tlog.local_segments()) > 3
    assert (d / SNAPSHOT_FILE).exists()
    with open_log(d, segment_bytes=1024) as tlog:
        assert append(tlog, batch(seq - 4, 4, tag=b"x" * 40)) == last
        assert append(tlog, batch(seq, 1)) == (last[1] + 1, last[1] + 1)
        seq += 1
        end = tlog.next_offset
    # Without the snapshot (a crash before one was written): the walk from the start.
    (d / SNAPSHOT_FILE).unlink()
    with open_log(d, segment_bytes=1024) as tlog:
        assert append(tlog, batch(seq - 1, 1)) == (end - 1, end - 1)
        with pytest.raises(OutOfOrderSequenceError):
            append(tlog, batch(seq + 1, 1))
    # A snapshot past the log's end (the log lost its tail) is not used.
    with open_log(d, segment_bytes=1024) as tlog:
        tlog.truncate(end - 1)
        assert not (d / SNAPSHOT_FILE).exists()
        assert append(tlog, batch(seq - 1, 1)) == (end - 1, end - 1)  # written again


def test_follower_append_carries_the_state(tmp_path: Path) -> None:
    with open_log(tmp_path / "leader") as leader, open_log(tmp_path / "follower") as follower:
        append(leader, batch(0, 2))
        append(leader, batch(2, 3))
        data = leader.read_batches(0, 100, 1 << 20).data
        follower.append_replica(bytes(data), [])
        # The follower, leading now, answers the retry of the last batch from its state.
        assert append(follower, batch(2, 3)) == (2, 4)
        assert follower.next_offset == 5
        assert append(follower, batch(5, 1)) == (5, 5)


def test_truncation_rebuilds_the_state(tmp_path: Path) -> None:
    with open_log(tmp_path / "p") as tlog:
        append(tlog, batch(0, 2))  # 0-1
        append(tlog, batch(2, 2))  # 2-3
        tlog.truncate(2)
        # The second batch is gone: it is new again, not a duplicate.
        assert append(tlog, batch(2, 2)) == (2, 3)
        assert tlog.next_offset == 4


def test_idle_producers_expire(tmp_path: Path) -> None:
    """A producer this node has not seen a batch of for the expiration is forgotten at
    the next check (and from the snapshot); a recent one is kept, whatever its batches'
    own timestamps. The forgotten one may go on at its own sequence; a state rebuilt at an open starts its producers' idle time again."""
    now = [1_000]
    ps = ProducerStateManager(tmp_path, "t", clock=lambda: now[0])
    ps.update(pb(0, pid=1), 0, 0)
    now[0] = 5_000
    ps.update(pb(0, pid=2), 1, 1)
    assert ps.expire(10_999, 10_000) == [] and ps.complete
    assert ps.expire(11_000, 10_000) == [1]
    assert ps.entry(1) is None and ps.entry(2) is not None and not ps.complete

    d = tmp_path / "p"

    def open_expiring() -> TieredLog:
        return TieredLog(
            d,
            log_id="p-0",
            start_shipper=False,
            clock=lambda: now[0],
            producer_id_expiration_ms=60_000,
        )

    def idem(pid: int, seq: int) -> bytes:  # old timestamps: they do not count
        recs = [NewRecord(b"v", timestamp=1)]
        return kafka_batch(recs, producer_id=pid, producer_epoch=0, base_sequence=seq)

    now[0] = 1_000_000
    with open_expiring() as tlog:
        assert append(tlog, idem(1, 0)) == (0, 0)
        now[0] += 50_000
        assert append(tlog, idem(2, 0)) == (1, 1)
        tlog.maintain(tier=False)  # no check due yet (producer 1 idle for 50 s)
        assert append(tlog, idem(1, 0)) == (0, 0)
        now[0] += 11_000  # producer 1 idle for 61 s, producer 2 for 11 s
        tlog.maintain(tier=False)
        now[0] += 5_000
        assert append(tlog, idem(2, 0)) == (1, 1)
        # Forgotten: it may go on at its own sequence (not 0: the state is no longer
        # complete), and a retry of a batch from before is not recognized.
        assert append(tlog, idem(1, 5)) == (2, 2)
        assert append(tlog, idem(3, 0)) == (3, 3)
        now[0] += 55_000  # the next check: producer 2 idle for 71 s, goes with the snapshot
        tlog.maintain(tier=False)
    snap = json.loads((d / SNAPSHOT_FILE).read_bytes())
    assert sorted(p[0] for p in snap["producers"]) == [1, 3]
    now[0] += 3_600_000  # long after: the open walks nothing, the snapshot's are forgotten
    with open_expiring() as tlog:
        assert append(tlog, idem(3, 0)) == (4, 4)
