"""The scrubber's pass over one partition, both tiers (:mod:`tiered_log.partition.scrub`):
damage in an archived copy (a flipped byte, a truncated or missing data object, a
damaged manifest) repaired from the local log's batches, plain, compressed and
encrypted; a damaged local segment repaired from the archive; what no copy mends
reported with the reason and left as it is. On the directory store and on S3 through
moto's server, with real logs (no part of ours stands in for another)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from tiered_log import LogConfig, ProducerRecord, TieredLog
from tiered_log.errors import RemoteObjectNotFoundError
from tiered_log.format import naming
from tiered_log.partition.scrub import scrub_partition
from tiered_log.remote.crypto import KeyRing
from tiered_log.remote.fs import LocalDirStorage
from tiered_log.remote.limits import RateLimiter
from tiered_log.remote.manifest import decode_manifest
from tiered_log.remote.scrub import ScrubReport, scrub_bucket
from tiered_log.remote.storage import RemoteStorage
from tiered_log.remote.tier import TierConfig

from .test_archive_codec import K1, write_ring
from .test_scrub import keys, rewrite, value

SMALL = LogConfig(segment_bytes=16 * 1024, index_interval_bytes=512)
LOG_ID = "orders-0123456789ab-0"
N = 1200


def open_log(
    path: Path, storage: RemoteStorage | None, ring: KeyRing | None = None, **tier: object
) -> TieredLog:
    cfg: dict[str, object] = {"chunk_bytes": 4096, "key_ring": ring}
    cfg.update(tier)
    return TieredLog(
        path,
        log_id=LOG_ID,
        storage=storage,
        config=SMALL,
        tier=TierConfig(**cfg),  # type: ignore[arg-type]
        start_shipper=False,
    )


def fill(tlog: TieredLog, n: int = N) -> None:
    """Append records 0..n-1 (of :func:`value`, timestamps 1000 + offset) in batches of
    50, flushed."""
    for s in range(0, n, 50):
        tlog.append_batch([ProducerRecord(value(o), timestamp=1000 + o) for o in range(s, s + 50)])
    tlog.flush()


def shipped(
    path: Path, storage: RemoteStorage, ring: KeyRing | None = None, **tier: object
) -> TieredLog:
    """An open log of ``N`` records, every sealed segment shipped and still local."""
    tlog = open_log(path, storage, ring, **tier)
    fill(tlog)
    tlog.roll()
    tlog.tier_once()
    assert tlog.bounds().remote_end_offset == N
    return tlog


def scrub(tlog: TieredLog) -> ScrubReport:
    rep = ScrubReport()
    scrub_partition(tlog, "orders", 0, rep, RateLimiter(None), cancel=threading.Event())
    return rep


def values(tlog: TieredLog, start: int, end: int) -> list[bytes | None]:
    out: list[bytes | None] = []
    while start < end:
        got = tlog.read_range(start, end - start)
        out += [r.value for r in got]
        start = got[-1].offset + 1
    return out


def ring_at(tmp_path: Path) -> KeyRing:
    write_ring(tmp_path / "ring.json", "k1", {"k1": K1})
    return KeyRing(tmp_path / "ring.json")


@pytest.mark.parametrize(
    "compression,encrypted",
    [
        pytest.param("none", False, id="plain"),
        pytest.param("zstd", False, id="zstd"),
        pytest.param("lz4", True, id="lz4-encrypted"),
    ],
)
def test_a_flipped_byte_in_an_archived_copy_is_repaired_from_the_local_log(
    tmp_path: Path, storage: RemoteStorage, compression: str, encrypted: bool
) -> None:
    ring = ring_at(tmp_path) if encrypted else None
    tlog = shipped(tmp_path / "log", storage, ring, compression=compression)
    try:
        key = keys(storage, ".log")[1]
        rli = key[: -len(".log")] + ".rli"
        good = storage.get(key)
        rs, entries, _, _ = decode_manifest(storage.get(rli), rli)
        e = entries[len(entries) // 2]
        data = bytearray(good)
        data[e.position + e.data_length - 7] ^= 0x40
        rewrite(storage, key, bytes(data))
        assert len(scrub_bucket(storage, ring).damaged) == 1

        rep = scrub(tlog)
        [d] = rep.damaged
        assert (d.tier, d.object_key, d.base_offset) == ("remote", key, rs.base_offset)
        assert d.repaired == "from the local log", d.unrepaired
        assert rep.unrepaired == []
        assert ("orders", 0) in rep.partitions
        assert scrub_bucket(storage, ring).damaged == []
        if not encrypted:  # a framed chunk re-encrypted gets a new nonce
            assert storage.get(key) == good
        # the archive reads again: every record from the bucket
        tlog.close()
        tlog = open_log(tmp_path / "log", storage, ring, compression=compression)
        remote = tlog.remote_tier
        assert remote is not None
        got = remote.read_batches(rs.base_offset, rs.next_offset - rs.base_offset, 1 << 20)
        assert got.next_offset == rs.next_offset
        assert scrub(tlog).damaged == []
    finally:
        tlog.close()


def test_a_missing_or_truncated_data_object_and_a_damaged_manifest_are_repaired(
    tmp_path: Path, storage: RemoteStorage
) -> None:
    tlog = shipped(tmp_path / "log", storage)
    try:
        logs = keys(storage, ".log")
        rlis = keys(storage, ".rli")
        good = {k: storage.get(k) for k in [*logs, *rlis]}
        storage.delete([logs[0]])
        rewrite(storage, logs[1], good[logs[1]][: len(good[logs[1]]) // 2])
        blob = bytearray(good[rlis[2]])
        blob[5] ^= 0x01  # inside its JSON header: its checksum fails
        rewrite(storage, rlis[2], bytes(blob))

        rep = scrub(tlog)
        found = {d.base_offset: d for d in rep.damaged}
        assert len(found) == 3, [d.line() for d in rep.damaged]
        assert all(d.repaired is not None for d in rep.damaged), [d.line() for d in rep.damaged]
        assert sorted(d.repaired for d in rep.damaged) == [  # type: ignore[type-var]
            "from its data object",
            "from the local log",
            "from the local log",
        ]
        assert storage.get(logs[0]) == good[logs[0]]
        assert storage.get(logs[1]) == good[logs[1]]
        assert scrub_bucket(storage, None, in_flight_grace_ms=0).damaged == []
    finally:
        tlog.close()


def test_an_archived_copy_no_longer_on_local_disk_is_reported_not_repaired(
    tmp_path: Path, storage: RemoteStorage
) -> None:
    tlog = shipped(tmp_path / "log", storage, local_retention_bytes=0)
    try:
        tlog.maintain()  # local retention: the shipped segments leave the disk
        assert tlog.bounds().local_start_offset > 0
        key = keys(storage, ".log")[0]
        data = bytearray(storage.get(key))
        data[len(data) - 9] ^= 0x10
        rewrite(storage, key, bytes(data))

        rep = scrub(tlog)
        [d] = rep.damaged
        assert d.repaired is None
        assert d.unrepaired is not None and "no longer on this node's disk" in d.unrepaired
        assert rep.unrepaired == [d]
        stored = (
            (storage.root / key).read_bytes()
            if isinstance(storage, LocalDirStorage)
            else storage.get(key)
        )
        assert stored == bytes(data)  # left as it was
        assert json.dumps(d.to_json())  # JSON-able, with its repair's reason
        assert d.to_json()["repaired"] is False and "no longer" in d.to_json()["repair"]
    finally:
        tlog.close()


def test_a_damaged_local_segment_is_repaired_from_the_archive(
    tmp_path: Path, storage: RemoteStorage
) -> None:
    tlog = shipped(tmp_path / "log", storage)
    try:
        expected = values(tlog, 0, N)
        seg = [s for s in tlog.local_segments() if s.sealed][1]
        good = seg.store_path.read_bytes()
        data = bytearray(good)
        data[len(data) // 2] ^= 0x04
        seg.store_path.write_bytes(bytes(data))

        rep = scrub(tlog)
        [d] = rep.damaged
        assert (d.tier, d.base_offset, d.next_offset) == ("local", seg.base_offset, seg.next_offset)
        assert d.kinds == ["local"] and "does not verify at byte" in d.problems[0]
        assert d.repaired == "from the archived copy", d.unrepaired
        assert seg.store_path.read_bytes() == good
        assert values(tlog, 0, N) == expected
        assert scrub(tlog).damaged == []
    finally:
        tlog.close()


def test_a_damaged_local_segment_not_yet_archived_is_reported(
    tmp_path: Path, storage: RemoteStorage
) -> None:
    tlog = open_log(tmp_path / "log", storage)
    try:
        fill(tlog)
        tlog.roll()  # sealed, not shipped
        seg = next(s for s in tlog.local_segments() if s.sealed)
        data = bytearray(seg.store_path.read_bytes())
        data[-3] ^= 0x01
        seg.store_path.write_bytes(bytes(data))
        rep = scrub(tlog)
        [d] = rep.damaged
        assert d.tier == "local" and d.repaired is None
        assert d.unrepaired is not None and "the archive ends at offset 0" in d.unrepaired
        assert seg.store_path.read_bytes() == bytes(data)
    finally:
        tlog.close()


@pytest.mark.parametrize(
    "compression,encrypted,how",
    [
        pytest.param("none", False, "missing", id="plain-missing"),
        pytest.param("zstd", True, "damaged", id="zstd-encrypted-damaged"),
        pytest.param("lz4", True, "missing", id="lz4-encrypted-missing"),
    ],
)
def test_a_missing_or_damaged_manifest_is_made_again_with_the_kept_data_key(
    tmp_path: Path, storage: RemoteStorage, compression: str, encrypted: bool, how: str
) -> None:
    """A manifest deleted (the listing no longer shows a copy the partition serves) or
    damaged is made again from its data object; an encrypted copy's with the data key
    the node kept when it shipped the copy. A node rebuilt from the bucket alone then
    reads every record of the copy."""
    ring = ring_at(tmp_path) if encrypted else None
    tlog = shipped(tmp_path / "log", storage, ring, compression=compression)
    try:
        rli = keys(storage, ".rli")[1]
        good = storage.get(rli)
        rs, _, _, _ = decode_manifest(good, rli)
        if how == "missing":
            storage.delete([rli])
        else:
            blob = bytearray(good)
            blob[5] ^= 0x01  # inside its JSON header: its checksum fails
            rewrite(storage, rli, bytes(blob))

        rep = scrub(tlog)
        [d] = rep.damaged
        assert (d.kinds, d.object_key, d.base_offset) == (["manifest"], rli, rs.base_offset)
        assert d.repaired == "from its data object", d.unrepaired
        made = storage.get(rli)
        assert decode_manifest(made, rli)[0].next_offset == rs.next_offset
        head = json.loads(made.partition(b"\n")[0])
        if encrypted:
            assert head["encryption"]["key_id"] == "k1"
            assert head["compression"] == compression
        assert scrub_bucket(storage, ring, in_flight_grace_ms=0).damaged == []
        assert scrub(tlog).damaged == []
    finally:
        tlog.close()
    fresh = open_log(tmp_path / "fresh", storage, ring, compression=compression)
    try:  # a log opened empty rebuilds its remote view from the bucket
        assert fresh.bounds().remote_end_offset == N
        assert values(fresh, rs.base_offset, rs.next_offset) == [
            value(o) for o in range(rs.base_offset, rs.next_offset)
        ]
    finally:
        fresh.close()


def test_an_encrypted_copys_manifest_without_its_kept_key_or_data_is_reported(
    tmp_path: Path, storage: RemoteStorage
) -> None:
    """Without the data key a node kept, an encrypted copy's lost manifest cannot be made
    again (the bucket held the key only there); a copy whose two objects are both gone
    cannot either. Each is reported with its reason and left as it is."""
    ring = ring_at(tmp_path)
    tlog = shipped(tmp_path / "log", storage, ring, compression="zstd")
    try:
        rlis = keys(storage, ".rli")
        storage.delete([rlis[0], naming.data_key_of(rlis[1]), rlis[1]])
        kept = tmp_path / "log" / "remote" / "data-keys"
        assert kept.exists()
        tlog.close()
        kept.unlink()  # a node that never kept them (copied before it existed)
        tlog = open_log(tmp_path / "log", storage, ring, compression="zstd")

        rep = scrub(tlog)
        found = {d.object_key: d for d in rep.damaged}
        assert sorted(found) == sorted(rlis[:2]), [d.line() for d in rep.damaged]
        assert found[rlis[0]].kinds == ["manifest"]
        assert "does not keep its data key" in (found[rlis[0]].unrepaired or "")
        assert found[rlis[1]].kinds == ["manifest", "data_missing"]
        assert "both objects of the copy are missing" in (found[rlis[1]].unrepaired or "")
        assert rep.unrepaired == list(rep.damaged)
        with pytest.raises(RemoteObjectNotFoundError):
            storage.get(rlis[0])  # left as it was
    finally:
        tlog.close()
