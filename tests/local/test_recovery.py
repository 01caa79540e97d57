"""Recovery of a local log from damage: index files, torn tails, flipped bytes, and the
file states a crash in the middle of a roll, a retention or a truncation leaves behind."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tiered_log import (
    CorruptRecordError,
    Log,
    LogConfig,
    ProducerRecord,
    Record,
    TieredLogError,
)
from tiered_log.format import naming
from tiered_log.format.kafka.layout import LOG_OVERHEAD, PARTITION_LEADER_EPOCH_AT
from tiered_log.format.records import HEADER_SIZE

from .helpers import read_all, value_for

CFG = LogConfig(segment_bytes=2_000, index_interval_bytes=200)


def record_for(i: int) -> ProducerRecord:
    return ProducerRecord(
        value_for(i, 1 + (i * 37) % 160),
        key=None if i % 3 else b"key-%d" % i,
        headers=(("h", str(i).encode()), ("null", None)) if i % 4 == 0 else (),
        timestamp=50_000 + 10 * i - (25 if i % 5 == 0 else 0),
    )


def matches(rec: Record, i: int) -> bool:
    w = record_for(i)
    return (rec.offset, rec.value, rec.key, rec.headers, rec.timestamp) == (
        i,
        w.value,
        w.key,
        w.headers,
        w.timestamp,
    )


def build(path: Path, n: int = 120, batch: int = 3) -> list[Path]:
    """A log of ``n`` records; returns the store paths, oldest first."""
    with Log.open(path, CFG) as log:
        for i in range(0, n, batch):
            log.append_batch([record_for(j) for j in range(i, min(n, i + batch))])
    return sorted(path.glob("*.log"))


def check_log(log: Log, n: int, start: int = 0) -> None:
    got = read_all(log)
    assert [r.offset for r in got] == list(range(start, n))
    assert all(matches(r, r.offset) for r in got)
    for i in range(start, n, 7):
        assert matches(log.read(i), i)
        ts = record_for(i).timestamp
        assert ts is not None
        want = next(j for j in range(start, n) if (record_for(j).timestamp or 0) >= ts)
        assert log.offset_for_timestamp(ts) == want


# ---- damaged index files of a sealed segment --------------------------------------------

Damage = Callable[[Path], None]


def truncate_to(n: int) -> Damage:
    return lambda p: os.truncate(p, n)


def cut_bytes(n: int) -> Damage:
    return lambda p: os.truncate(p, max(0, p.stat().st_size - n))


def garbage_same_size(p: Path) -> None:
    size = p.stat().st_size
    p.write_bytes(bytes((i * 131 + 17) % 256 for i in range(size)))


def fill(byte: int) -> Damage:
    def damage(p: Path) -> None:
        p.write_bytes(bytes([byte]) * p.stat().st_size)

    return damage


def garbage_appended(p: Path) -> None:
    with open(p, "ab") as f:
        f.write(b"\x13\x37" * 5)


def deleted(p: Path) -> None:
    p.unlink()


def reversed_entries(p: Path) -> None:
    data = p.read_bytes()
    step = 8 if p.suffix == ".index" else 12
    entries = [data[i : i + step] for i in range(0, len(data), step)]
    p.write_bytes(b"".join(reversed(entries)))


DAMAGES = [
    pytest.param(truncate_to(0), id="emptied"),
    pytest.param(cut_bytes(1), id="cut-one-byte"),
    pytest.param(cut_bytes(5), id="cut-five-bytes"),
    pytest.param(garbage_same_size, id="garbage-same-size"),
    pytest.param(fill(0xFF), id="all-ones"),
    pytest.param(fill(0x00), id="all-zeros"),
    pytest.param(garbage_appended, id="garbage-appended"),
    pytest.param(reversed_entries, id="entries-reversed"),
    pytest.param(deleted, id="deleted"),
]


@pytest.mark.parametrize("damage", DAMAGES)
@pytest.mark.parametrize("which", [naming.INDEX_SUFFIX, naming.TIMEINDEX_SUFFIX, "both"])
def test_damaged_index_is_rebuilt(tmp_path: Path, damage: Damage, which: str) -> None:
    stores = build(tmp_path)
    assert len(stores) >= 5
    victim = stores[2]
    base = int(victim.name[: naming.OFFSET_DIGITS])
    suffixes = [naming.INDEX_SUFFIX, naming.TIMEINDEX_SUFFIX] if which == "both" else [which]
    originals = {
        s: naming.segment_path(tmp_path, base, s).read_bytes()
        for s in (naming.INDEX_SUFFIX, naming.TIMEINDEX_SUFFIX)
    }
    if damage is reversed_entries and all(len(originals[s]) <= 12 for s in suffixes):
        pytest.skip("a single entry reversed is the same entry")
    for s in suffixes:
        damage(naming.segment_path(tmp_path, base, s))
    with Log.open(tmp_path, CFG) as log:
        # Right after opening (before any read loaded the index): retention by time and
        # timestamp lookups rely on each sealed segment's max timestamp.
        info = next(s for s in log.segments() if s.base_offset == base)
        true_max = max(record_for(i).timestamp or 0 for i in range(base, info.next_offset))
        assert info.max_timestamp == true_max
        assert log.retention_candidates(1_000, None, now=true_max + 999)[-1:] != [info]
        check_log(log, 120)
    for s, data in originals.items():  # rewritten exactly as the seal wrote them
        assert naming.segment_path(tmp_path, base, s).read_bytes() == data, s
    with Log.open(tmp_path, CFG) as log:
        check_log(log, 120)


def test_missing_index_is_rebuilt_at_open_and_reported(tmp_path: Path) -> None:
    stores = build(tmp_path)
    for p in stores[:3]:
        p.with_suffix(naming.INDEX_SUFFIX).unlink()
    stores[3].with_suffix(naming.TIMEINDEX_SUFFIX).write_bytes(b"xx")
    with Log.open(tmp_path, CFG) as log:
        assert log.recovery.rebuilt_indexes == 4
        for p in stores[:4]:
            assert p.with_suffix(naming.INDEX_SUFFIX).exists()
        check_log(log, 120)
    with Log.open(tmp_path, CFG) as log:
        assert log.recovery.rebuilt_indexes == 0


# ---- torn tail of the active segment ---------------------------------------------------

TailDamage = Callable[[Path], int]  # returns the bytes that recovery must cut


def append_garbage(n: int) -> TailDamage:
    def damage(p: Path) -> int:
        with open(p, "ab") as f:
            f.write(bytes((i * 29 + 5) % 256 for i in range(n)))
        return n

    return damage


def append_zeros(p: Path) -> int:
    with open(p, "ab") as f:
        f.write(bytes(4096))
    return 4096


def stored(rec: Record) -> int:
    """Bytes of the one-record batch ``rec`` was appended in (these tests append one by one)."""
    return rec.size + HEADER_SIZE


def cut_last_frame(keep: int) -> TailDamage:
    """Cut the store so only ``keep`` bytes of its last frame remain."""

    def damage(p: Path) -> int:
        with Log.open(p.parent, CFG) as log:
            last = log.read(log.next_offset - 1)
        os.truncate(p, p.stat().st_size - stored(last) + keep)
        return keep

    return damage


def duplicate_last_frame(p: Path) -> int:
    with Log.open(p.parent, CFG) as log:
        last = log.read(log.next_offset - 1)
    data = p.read_bytes()
    frame = data[-stored(last) :]
    with open(p, "ab") as f:
        f.write(frame)  # a valid frame, but with an offset out of sequence
    return stored(last)


def flip_in_last_frame(p: Path) -> int:
    with Log.open(p.parent, CFG) as log:
        last = log.read(log.next_offset - 1)
    data = bytearray(p.read_bytes())
    data[-3] ^= 0x40
    p.write_bytes(bytes(data))
    return stored(last)


TAILS = [
    pytest.param(append_garbage(1), 0, id="one-garbage-byte"),
    pytest.param(append_garbage(19), 0, id="partial-header"),
    pytest.param(append_garbage(300), 0, id="garbage"),
    pytest.param(append_zeros, 0, id="zeros"),
    pytest.param(cut_last_frame(1), 1, id="cut-after-1-byte"),
    pytest.param(cut_last_frame(LOG_OVERHEAD), 1, id="cut-after-length"),
    pytest.param(cut_last_frame(40), 1, id="cut-inside-header"),
    pytest.param(cut_last_frame(HEADER_SIZE), 1, id="cut-after-header"),
    pytest.param(cut_last_frame(HEADER_SIZE + 5), 1, id="cut-inside-value"),
    pytest.param(duplicate_last_frame, 0, id="duplicate-frame"),
    pytest.param(flip_in_last_frame, 1, id="flipped-byte-in-last-frame"),
]


@pytest.mark.parametrize(("damage", "lost"), TAILS)
def test_torn_tail_is_cut(tmp_path: Path, damage: TailDamage, lost: int) -> None:
    n = 121
    stores = build(tmp_path, n, batch=1)
    active = stores[-1]
    size_before = active.stat().st_size
    cut = damage(active)
    n -= lost
    with Log.open(tmp_path, CFG) as log:
        assert log.recovery.truncated_bytes == cut > 0
        assert log.next_offset == n
        assert active.stat().st_size == (size_before if not lost else log.segments()[-1].size)
        check_log(log, n)
        assert log.append_batch([record_for(n), record_for(n + 1)]) == (n, n + 1)
    with Log.open(tmp_path, CFG) as log:
        assert log.recovery.truncated_bytes == 0
        check_log(log, n + 2)


def test_torn_first_frame_leaves_an_empty_active_segment(tmp_path: Path) -> None:
    stores = build(tmp_path, 40, batch=1)
    base = int(stores[-1].name[: naming.OFFSET_DIGITS])
    with Log.open(tmp_path, CFG) as log:
        first = log.read(base)
    os.truncate(stores[-1], stored(first) - 1)
    with Log.open(tmp_path, CFG) as log:
        assert log.recovery.truncated_bytes == stored(first) - 1
        assert log.next_offset == base
        check_log(log, base)
        assert (
            log.append(
                record_for(base).value,
                key=record_for(base).key,
                headers=record_for(base).headers,
                timestamp=record_for(base).timestamp,
            )
            == base
        )
        check_log(log, base + 1)


# ---- flipped bytes in a sealed segment ---------------------------------------------------


def test_every_flipped_byte_of_a_sealed_segment_is_caught(tmp_path: Path) -> None:
    """Flip each byte of a sealed store in turn (in place, the log open): a read that
    covers the damaged record raises CorruptRecordError and never returns data; every
    record a read does return is intact. The one field no check covers (as in Kafka) is a
    batch's partitionLeaderEpoch, which is no part of a record: damaged, every read still
    returns every record intact."""
    cfg = LogConfig(segment_bytes=500, index_interval_bytes=60)
    with Log.open(tmp_path, cfg) as log:
        for i in range(12):
            log.append_batch([record_for(i)])
        victim = log.segments()[1]
        assert victim.sealed and victim.record_count >= 2
        positions: list[tuple[int, int]] = []  # (start byte, offset) of each frame
        pos = 0
        for off in range(victim.base_offset, victim.next_offset):
            positions.append((pos, off))
            pos += stored(log.read(off))
        assert pos == victim.size
        path = victim.store_path
        original = path.read_bytes()
        reads: list[tuple[int, int]] = [(1, 1), (500, 1 << 20), (2, 100), (500, 1)]
        for byte in range(victim.size):
            start, damaged = next((s, off) for s, off in reversed(positions) if s <= byte)
            epoch_field = 0 <= byte - start - PARTITION_LEADER_EPOCH_AT < 4
            for mask in (0x01, 0x80):
                data = bytearray(original)
                data[byte] ^= mask
                with open(path, "r+b") as f:
                    f.write(data)
                if epoch_field:
                    got = read_all(log)
                    assert [r.offset for r in got] == list(range(12)), byte
                    assert all(matches(r, r.offset) for r in got), byte
                    with open(path, "r+b") as f:
                        f.write(original)
                    continue
                for off in range(victim.base_offset, victim.next_offset):
                    for max_records, max_bytes in reads:
                        try:
                            got = log.read_range(off, max_records=max_records, max_bytes=max_bytes)
                        except CorruptRecordError:
                            continue
                        assert got, (byte, mask, off)
                        assert all(matches(r, r.offset) for r in got), (byte, mask, off)
                        assert damaged not in [r.offset for r in got], (byte, mask, off)
                    if off == damaged:
                        with pytest.raises(CorruptRecordError):
                            log.read(off)
                with pytest.raises(CorruptRecordError):
                    read_all(log)
                with open(path, "r+b") as f:
                    f.write(original)
        assert path.read_bytes() == original
        assert [r.offset for r in read_all(log)] == list(range(12))


def test_flipped_byte_in_sealed_segment_survives_reopen_as_an_error(tmp_path: Path) -> None:
    stores = build(tmp_path)
    data = bytearray(stores[1].read_bytes())
    data[len(data) // 2] ^= 0x10
    stores[1].write_bytes(bytes(data))
    with Log.open(tmp_path, CFG) as log:
        base = log.segments()[1].base_offset
        with pytest.raises(CorruptRecordError):
            read_all(log)
        with pytest.raises(CorruptRecordError):
            read_all(log, base, max_records=1)
        assert matches(log.read(0), 0)
        after = log.segments()[2].base_offset
        assert [r.offset for r in read_all(log, after)] == list(range(after, 120))


def test_flipped_byte_in_active_segment(tmp_path: Path) -> None:
    """Read while open: an error, never data. Reopened: cut as a damaged tail."""
    cfg = LogConfig(segment_bytes=1 << 20, index_interval_bytes=100)
    with Log.open(tmp_path, cfg) as log:
        for i in range(20):
            log.append_batch([record_for(i)])
        path = log.segments()[-1].store_path
        sizes = [stored(log.read(i)) for i in range(20)]
        pos10 = sum(sizes[:10])
        data = bytearray(path.read_bytes())
        data[pos10 + 30] ^= 0x02
        with open(path, "r+b") as f:
            f.write(data)
        with pytest.raises(TieredLogError):
            read_all(log)
        with pytest.raises(CorruptRecordError):
            log.read(10)
        assert [r.offset for r in log.read_range(0, max_records=10)] == list(range(10))
    with Log.open(tmp_path, cfg) as log:
        assert log.recovery.truncated_bytes == sum(sizes[10:])
        assert log.next_offset == 10
        check_log(log, 10)


# ---- file states a crash can leave behind -----------------------------------------------


def test_leftover_tmp_files_are_removed(tmp_path: Path) -> None:
    stores = build(tmp_path)
    base = stores[1].name[: naming.OFFSET_DIGITS]
    (tmp_path / f"{base}.index.tmp").write_bytes(b"half an index")
    (tmp_path / f"{base}.timeindex.tmp").write_bytes(b"")
    with Log.open(tmp_path, CFG) as log:
        assert log.recovery.removed_files == 2
        check_log(log, 120)
    assert not list(tmp_path.glob("*.tmp"))


def test_crash_after_seal_before_the_new_segment(tmp_path: Path) -> None:
    """The last segment was sealed (index files written) but its successor never created:
    it is reopened as the active segment and rolls again later."""
    stores = build(tmp_path)
    last = stores[-1]
    base = int(last.name[: naming.OFFSET_DIGITS])
    with Log.open(tmp_path, CFG) as log:
        log.roll()
        assert log.segments()[-1].base_offset == 120
    naming.segment_path(tmp_path, 120, naming.LOG_SUFFIX).unlink()
    assert last.with_suffix(naming.INDEX_SUFFIX).exists()
    with Log.open(tmp_path, CFG) as log:
        assert log.segments()[-1].base_offset == base and not log.segments()[-1].sealed
        assert not last.with_suffix(naming.INDEX_SUFFIX).exists()
        check_log(log, 120)
        for i in range(120, 160):
            log.append_batch([record_for(i)])
        assert len(log.segments()) > len(stores)
        check_log(log, 160)
    with Log.open(tmp_path, CFG) as log:
        check_log(log, 160)


@pytest.mark.parametrize("keep", [0, 1], ids=["index-tmp-only", "index-done-timeindex-tmp"])
def test_crash_in_the_middle_of_writing_the_seal(tmp_path: Path, keep: int) -> None:
    stores = build(tmp_path)
    last = stores[-1]
    with Log.open(tmp_path, CFG) as log:
        log.roll()
    naming.segment_path(tmp_path, 120, naming.LOG_SUFFIX).unlink()
    index = last.with_suffix(naming.INDEX_SUFFIX)
    timeindex = last.with_suffix(naming.TIMEINDEX_SUFFIX)
    if keep == 0:
        index.rename(index.with_name(index.name + ".tmp"))
        timeindex.unlink()
    else:
        timeindex.rename(timeindex.with_name(timeindex.name + ".tmp"))
    with Log.open(tmp_path, CFG) as log:
        assert log.recovery.removed_files == 1
        check_log(log, 120)
    assert not list(tmp_path.glob("*.tmp"))


def test_crash_right_after_a_roll_leaves_an_empty_active_segment(tmp_path: Path) -> None:
    build(tmp_path)
    with Log.open(tmp_path, CFG) as log:
        log.roll()
    with Log.open(tmp_path, CFG) as log:
        assert log.segments()[-1].base_offset == 120 and log.segments()[-1].size == 0
        assert log.recovery.truncated_bytes == 0
        check_log(log, 120)
        assert log.append(b"x") == 120


def test_crash_in_the_middle_of_deleting_a_segment(tmp_path: Path) -> None:
    """Retention removes the store first: index files left without a store are removed."""
    stores = build(tmp_path)
    base1 = int(stores[1].name[: naming.OFFSET_DIGITS])
    stores[0].unlink()
    with Log.open(tmp_path, CFG) as log:
        assert log.recovery.removed_files == 2
        assert log.log_start_offset == base1
        check_log(log, 120, start=base1)
    assert not stores[0].with_suffix(naming.INDEX_SUFFIX).exists()


@pytest.mark.parametrize("which", [1, -2])
def test_a_missing_middle_segment_fails_open_naming_the_gap(tmp_path: Path, which: int) -> None:
    """A segment deleted by hand from the middle is a gap no recovery may paper over:
    opening says which offsets are missing (reads would otherwise fail one by one)."""
    stores = build(tmp_path)
    assert len(stores) >= 4
    gone = stores[which]
    lo = int(gone.name[: naming.OFFSET_DIGITS])
    hi = int(stores[stores.index(gone) + 1].name[: naming.OFFSET_DIGITS])
    for suffix in naming.SEGMENT_SUFFIXES:
        gone.with_suffix(suffix).unlink()
    with pytest.raises(CorruptRecordError, match=f"offsets {lo}..{hi - 1} are missing"):
        Log.open(tmp_path, CFG)
    # The oldest segment going (retention's way) is no gap.
    stores = build(tmp_path / "b")
    for suffix in naming.SEGMENT_SUFFIXES:
        stores[0].with_suffix(suffix).unlink()
    with Log.open(tmp_path / "b", CFG) as log:
        check_log(log, 120, start=int(stores[1].name[: naming.OFFSET_DIGITS]))


def test_crash_in_the_middle_of_a_truncation(tmp_path: Path) -> None:
    """Truncation deletes later segments newest first; a crash part way leaves a shorter
    but consistent log, which can then be truncated again."""
    stores = build(tmp_path)
    for p in stores[-2:]:
        for suffix in naming.SEGMENT_SUFFIXES:
            p.with_suffix(suffix).unlink(missing_ok=True)
    kept_next = int(stores[-2].name[: naming.OFFSET_DIGITS])
    with Log.open(tmp_path, CFG) as log:
        assert log.next_offset == kept_next
        check_log(log, kept_next)
        log.truncate(5)
        check_log(log, 5)
    with Log.open(tmp_path, CFG) as log:
        check_log(log, 5)
