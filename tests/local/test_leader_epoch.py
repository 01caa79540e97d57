"""The leader-epoch file of a log (tiered_log.local.leader_epoch): Kafka's semantics of
assign, end_offset_for and the truncations, the follower's divergence point, the file's
reopen, damage detection and atomic rewrite."""

from __future__ import annotations

import itertools
import threading
from pathlib import Path

import pytest

from tiered_log.errors import CorruptIndexError, InvalidArgumentError
from tiered_log.format import naming
from tiered_log.local.leader_epoch import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    EpochEntry,
    LeaderEpochCache,
    Truncation,
    decode,
    divergence_point,
    encode,
)

UNDEF = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


def cache_of(tmp_path: Path, *entries: tuple[int, int], name: str = "log") -> LeaderEpochCache:
    d = tmp_path / name
    d.mkdir(exist_ok=True)
    c = LeaderEpochCache(d)
    for epoch, start in entries:
        c.assign(epoch, start)
    return c


def pairs(c: LeaderEpochCache) -> list[tuple[int, int]]:
    return [(e.epoch, e.start_offset) for e in c.entries()]


# ---- assign ---------------------------------------------------------------------------


def test_empty_cache(tmp_path: Path) -> None:
    c = cache_of(tmp_path)
    assert c.entries() == [] and c.latest_entry is None and c.latest_epoch is None
    assert c.epoch_for(0) is None
    assert c.end_offset_for(0, 10) == UNDEF
    assert not c.path.exists()  # nothing written until the first change


def test_assign_appends_and_same_epoch_is_a_noop(tmp_path: Path) -> None:
    c = cache_of(tmp_path, (0, 0), (0, 5), (1, 10), (1, 12), (4, 20))
    assert pairs(c) == [(0, 0), (1, 10), (4, 20)]
    assert c.latest_entry == EpochEntry(4, 20) and c.latest_epoch == 4
    written = c.path.read_bytes()
    c.assign(4, 25)  # another batch of the current epoch: no rewrite
    assert c.path.read_bytes() == written


def test_assign_refuses_lower_epoch_and_negatives(tmp_path: Path) -> None:
    c = cache_of(tmp_path, (3, 10))
    with pytest.raises(InvalidArgumentError, match="below the latest epoch 3"):
        c.assign(2, 20)
    for epoch, start in ((-1, 0), (5, -1)):
        with pytest.raises(InvalidArgumentError, match=">= 0"):
            c.assign(epoch, start)
    assert pairs(c) == [(3, 10)]


def test_assign_same_epoch_lower_start_moves_the_start_down(tmp_path: Path) -> None:
    c = cache_of(tmp_path, (1, 0), (2, 10))
    c.assign(2, 7)
    assert pairs(c) == [(1, 0), (2, 7)]


def test_assign_below_latest_start_replaces_entries_from_there(tmp_path: Path) -> None:
    c = cache_of(tmp_path, (1, 0), (2, 10), (3, 20))
    c.assign(5, 10)  # a higher epoch starting where epoch 2 began: 2 and 3 are gone
    assert pairs(c) == [(1, 0), (5, 10)]
    c.assign(6, 10)  # same start, higher epoch (epoch 5 wrote nothing): replaced
    assert pairs(c) == [(1, 0), (6, 10)]
    c.assign(7, 4)
    assert pairs(c) == [(1, 0), (7, 4)]


# ---- epoch_for, end_offset_for --------------------------------------------------------


def test_epoch_for(tmp_path: Path) -> None:
    c = cache_of(tmp_path, (1, 5), (3, 10), (4, 20))
    assert [c.epoch_for(o) for o in (0, 4, 5, 9, 10, 19, 20, 1000)] == [
        None,
        None,
        1,
        1,
        3,
        3,
        4,
        4,
    ]


def test_end_offset_for(tmp_path: Path) -> None:
    c = cache_of(tmp_path, (1, 5), (3, 10), (4, 20))
    leo = 30
    assert c.end_offset_for(4, leo) == (4, 30)  # latest: the log end
    assert c.end_offset_for(3, leo) == (3, 20)  # older: next epoch's start
    assert c.end_offset_for(1, leo) == (1, 10)
    assert c.end_offset_for(2, leo) == (1, 10)  # missing, between: the floor and its end
    assert c.end_offset_for(0, leo) == (0, 5)  # below the earliest: echoed, first start
    assert c.end_offset_for(5, leo) == UNDEF  # above the latest
    assert c.end_offset_for(UNDEFINED_EPOCH, leo) == UNDEF


# ---- truncations ----------------------------------------------------------------------


def test_truncate_from_end(tmp_path: Path) -> None:
    c = cache_of(tmp_path, (1, 5), (3, 10), (4, 20))
    c.truncate_from_end(25)
    assert pairs(c) == [(1, 5), (3, 10), (4, 20)]
    c.truncate_from_end(20)  # the log ends where epoch 4 began: it wrote nothing left
    assert pairs(c) == [(1, 5), (3, 10)]
    c.truncate_from_end(11)
    assert pairs(c) == [(1, 5), (3, 10)]
    c.truncate_from_end(0)
    assert pairs(c) == []
    assert LeaderEpochCache(c.path.parent).entries() == []


def test_truncate_from_start(tmp_path: Path) -> None:
    c = cache_of(tmp_path, (1, 5), (3, 10), (4, 20))
    c.truncate_from_start(3)  # below the first entry: nothing to drop
    assert pairs(c) == [(1, 5), (3, 10), (4, 20)]
    c.truncate_from_start(12)  # epoch 1 wholly below; epoch 3 clamped to 12
    assert pairs(c) == [(3, 12), (4, 20)]
    c.truncate_from_start(20)  # exactly at an entry: it is kept as is
    assert pairs(c) == [(4, 20)]
    c.truncate_from_start(50)  # past every start: the latest clamped
    assert pairs(c) == [(4, 50)]
    assert pairs(LeaderEpochCache(c.path.parent)) == [(4, 50)]


def test_clear(tmp_path: Path) -> None:
    c = cache_of(tmp_path, (1, 5))
    c.clear()
    assert c.entries() == [] and c.path.read_bytes() == b"0\n0\n"


# ---- the follower's divergence point --------------------------------------------------


def follower_truncates(
    follower: LeaderEpochCache, follower_leo: int, leader: LeaderEpochCache, leader_leo: int
) -> int:
    """The whole exchange, as a follower runs it: ask for the latest epoch, cut, repeat
    until the cut is complete. Returns the follower's new log end."""
    for _ in range(10):
        epoch = follower.latest_epoch
        answer = leader.end_offset_for(UNDEFINED_EPOCH if epoch is None else epoch, leader_leo)
        cut = divergence_point(follower, follower_leo, answer)
        follower_leo = cut.offset
        follower.truncate_from_end(follower_leo)
        if cut.complete:
            return follower_leo
    raise AssertionError("no complete truncation in 10 rounds")


def test_divergence_kip101_lost_tail(tmp_path: Path) -> None:
    # A (leader, epoch 1) wrote 0..9; B replicated 0..7 only. A dies, B leads epoch 2 from
    # offset 8 and writes 8..11. A comes back as follower with LEO 10: offsets 8, 9 of A
    # diverge (epoch 1 there, epoch 2 on B): A must cut at 8, not keep them (KIP-101).
    a = cache_of(tmp_path, (0, 0), (1, 5), name="a")
    b = cache_of(tmp_path, (0, 0), (1, 5), (2, 8), name="b")
    assert b.end_offset_for(1, 12) == (1, 8)
    assert divergence_point(a, 10, (1, 8)) == Truncation(8, True)
    assert follower_truncates(a, 10, b, 12) == 8
    assert pairs(a) == [(0, 0), (1, 5)]


def test_divergence_follower_behind_keeps_everything(tmp_path: Path) -> None:
    a = cache_of(tmp_path, (0, 0), (1, 5), name="a")
    b = cache_of(tmp_path, (0, 0), (1, 5), (2, 8), name="b")
    assert follower_truncates(a, 7, b, 12) == 7  # min with the follower's LEO


def test_divergence_same_latest_epoch_no_cut(tmp_path: Path) -> None:
    a = cache_of(tmp_path, (0, 0), (3, 5), name="a")
    b = cache_of(tmp_path, (0, 0), (3, 5), name="b")
    assert divergence_point(a, 9, b.end_offset_for(3, 12)) == Truncation(9, True)


def test_divergence_kip279_epochs_the_leader_never_saw(tmp_path: Path) -> None:
    # The follower led epochs 2 and 3 alone (writes nobody else took); the leader went
    # from 1 to 4. Asked for 3, the leader answers its floor, epoch 1, ending at 8; the
    # follower has epoch 1 too: cut at min(its own end of 1 = 10, 8) = 8, complete.
    f = cache_of(tmp_path, (0, 0), (1, 4), (2, 10), (3, 14), name="f")
    lead = cache_of(tmp_path, (0, 0), (1, 4), (4, 8), name="l")
    assert lead.end_offset_for(3, 20) == (1, 8)
    assert divergence_point(f, 16, (1, 8)) == Truncation(8, True)
    assert follower_truncates(f, 16, lead, 20) == 8
    assert pairs(f) == [(0, 0), (1, 4)]


def test_divergence_kip279_follower_lacks_the_leaders_epoch(tmp_path: Path) -> None:
    # Leader: epochs 0, 2, 5. Follower: 0, 3 (led epoch 3 alone). Asked for 3, the leader
    # answers (2, 9). The follower has no epoch 2: it cuts at its own end of epoch 0 (6),
    # not complete, asks again for 0 and gets (0, 6): done at 6.
    f = cache_of(tmp_path, (0, 0), (3, 6), name="f")
    lead = cache_of(tmp_path, (0, 0), (2, 6), (5, 9), name="l")
    assert lead.end_offset_for(3, 15) == (2, 9)
    assert divergence_point(f, 11, (2, 9)) == Truncation(6, False)
    assert follower_truncates(f, 11, lead, 15) == 6
    assert pairs(f) == [(0, 0)]


def test_divergence_undefined_answers(tmp_path: Path) -> None:
    f = cache_of(tmp_path, (0, 0), (3, 6), name="f")
    # the leader knows nothing of it: fall back to the high watermark
    assert divergence_point(f, 11, UNDEF, high_watermark=4) == Truncation(4, True)
    assert divergence_point(f, 3, UNDEF, high_watermark=4) == Truncation(3, True)
    # a follower without epochs: the same
    empty = cache_of(tmp_path, name="e")
    assert divergence_point(empty, 11, (3, 9), high_watermark=5) == Truncation(5, True)
    # an answer with an offset but no epoch: that offset
    assert divergence_point(f, 11, (UNDEFINED_EPOCH, 7)) == Truncation(7, True)


def test_divergence_epoch_below_the_leaders_history(tmp_path: Path) -> None:
    # The leader's retention removed epochs 0..1: asked for 1, it echoes 1 and answers
    # the start of its first epoch; the follower keeps at most its own end of epoch 1.
    f = cache_of(tmp_path, (0, 0), (1, 4), name="f")
    lead = cache_of(tmp_path, (3, 20), name="l")
    assert lead.end_offset_for(1, 30) == (1, 20)
    assert divergence_point(f, 25, (1, 20)) == Truncation(20, True)


# ---- the file -------------------------------------------------------------------------


def test_file_layout_and_reopen(tmp_path: Path) -> None:
    c = cache_of(tmp_path, (0, 0), (3, 1200))
    assert c.path == tmp_path / "log" / naming.LEADER_EPOCH_FILE
    assert c.path.read_bytes() == b"0\n2\n0 0\n3 1200\n"
    again = LeaderEpochCache(tmp_path / "log")
    assert again.entries() == [EpochEntry(0, 0), EpochEntry(3, 1200)]
    assert again.end_offset_for(0, 5000) == (0, 1200)


def test_codec_round_trip() -> None:
    entries = [EpochEntry(0, 0), EpochEntry(2, 7), EpochEntry(9, 2**62)]
    assert decode(encode(entries), Path("x")) == entries
    assert decode(encode([]), Path("x")) == []


@pytest.mark.parametrize(
    "data, why",
    [
        (b"", "newline"),
        (b"0\n2\n0 0\n3 12", "newline"),
        (b"0\n", "count line"),
        (b"1\n0\n", "version line"),
        (b"0\nx\n", "count line"),
        (b"0\n2\n0 0\n", "count 2 but 1"),
        (b"0\n1\n0 0 0\n", "line 3"),
        (b"0\n1\n0\n", "line 3"),
        (b"0\n1\n-1 0\n", "line 3"),
        (b"0\n1\na b\n", "line 3"),
        (b"0\n1\n0  0\n", "line 3"),
        (b"0\n2\n3 0\n2 5\n", "does not follow"),
        (b"0\n2\n1 5\n2 5\n", "does not follow"),
        (b"0\n2\n1 5\n1 9\n", "does not follow"),
        (b"0\n1\n\xff 0\n", "ASCII"),
    ],
)
def test_damaged_file_is_detected_on_load(tmp_path: Path, data: bytes, why: str) -> None:
    (tmp_path / naming.LEADER_EPOCH_FILE).write_bytes(data)
    with pytest.raises(CorruptIndexError, match=why) as info:
        LeaderEpochCache(tmp_path)
    msg = str(info.value)
    assert naming.LEADER_EPOCH_FILE in msg and "\n" not in msg


def test_leftover_temp_file_is_ignored(tmp_path: Path) -> None:
    # a crash between writing the .tmp and the rename: the old file is what counts
    c = cache_of(tmp_path, (1, 5))
    tmp = c.path.with_name(c.path.name + naming.TMP_SUFFIX)
    tmp.write_bytes(b"0\n1\n7 9")  # torn
    again = LeaderEpochCache(c.path.parent)
    assert pairs(again) == [(1, 5)]
    again.assign(2, 8)  # the next rewrite goes through the same temp name
    assert pairs(LeaderEpochCache(c.path.parent)) == [(1, 5), (2, 8)]
    assert not tmp.exists()


def test_failed_write_leaves_memory_as_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = cache_of(tmp_path, (1, 5))

    def boom(path: Path, data: bytes) -> None:
        raise OSError("disk full")

    monkeypatch.setattr("tiered_log.local.leader_epoch.write_atomic", boom)
    with pytest.raises(OSError):
        c.assign(2, 9)
    assert pairs(c) == [(1, 5)] == pairs(LeaderEpochCache(c.path.parent))


def test_concurrent_assigns_keep_the_invariant(tmp_path: Path) -> None:
    c = cache_of(tmp_path, (0, 0))
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        for i in range(1, 30):
            try:
                c.assign(i * 4 + k, i * 100 + k)
            except InvalidArgumentError:
                pass  # another thread got a higher epoch in first
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    got = c.entries()
    assert all(
        a.epoch < b.epoch and a.start_offset < b.start_offset for a, b in itertools.pairwise(got)
    )
    assert LeaderEpochCache(c.path.parent).entries() == got
