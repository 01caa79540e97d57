"""Never hand out an acknowledged offset twice: a log reserves offsets in the bucket
before it hands them out, and a log rebuilt from the bucket after its disk was lost
resumes above the reservation, reporting the offsets in neither tier as lost (describe,
stats), not giving them to new records."""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from pathlib import Path

import pytest

from tiered_log import LogConfig, TieredLog
from tiered_log.errors import DataLossError
from tiered_log.format import naming
from tiered_log.remote.fs import LocalDirStorage
from tiered_log.remote.tier import TierConfig

CFG = LogConfig(segment_bytes=1 << 20)
RESERVE = 100


def open_log(d: Path, bucket: Path, ship_interval_ms: int | None = None) -> TieredLog:
    """The log, its shipper running every ``ship_interval_ms`` (unless woken) if given."""
    tier = TierConfig(chunk_bytes=1024, offset_reserve=RESERVE)
    if ship_interval_ms is not None:
        tier = dataclasses.replace(tier, ship_interval_ms=ship_interval_ms)
    return TieredLog(
        d,
        log_id="orders-0",
        storage=LocalDirStorage(bucket),
        config=CFG,
        tier=tier,
        start_shipper=ship_interval_ms is not None,
    )


def _bucket_end(bucket: Path) -> int:
    meta = json.loads((bucket / naming.meta_object_key("orders-0")).read_bytes())
    return int(meta.get("end_offset", 0))


def test_the_bucket_records_every_offset_before_it_is_handed_out(tmp_path: Path) -> None:
    """The crash case: at every moment the end recorded in the bucket is above every
    offset an append returned, so a log rebuilt after a disk loss (no clean close)
    continues above all of them."""
    log_dir, bucket = tmp_path / "log", tmp_path / "bucket"
    tlog = open_log(log_dir, bucket)
    for i in range(300):
        off = tlog.append(b"v%d" % i)
        assert _bucket_end(bucket) > off
    tlog.roll()
    tlog.tier_once()  # ships every sealed segment
    assert tlog.bounds().remote_end_offset == 300
    for i in range(300, 420, 20):  # acknowledged, not shipped
        _, last = tlog.append_batch([b"v%d" % j for j in range(i, i + 20)])
        assert _bucket_end(bucket) > last
    tlog.maintain()  # renews the reservation ahead of the log end
    reserved = _bucket_end(bucket)
    assert 420 + RESERVE // 2 <= reserved <= 420 + 2 * RESERVE

    shutil.rmtree(log_dir)  # the disk is lost; the process dies (no clean close)
    rebuilt = open_log(log_dir, bucket)
    try:
        assert rebuilt.next_offset == reserved  # above every offset handed out
        assert rebuilt.lost_offsets() == [[300, reserved]]
        assert rebuilt.describe()["lost_offsets"] == [[300, reserved]]
        assert rebuilt.stats()["lost_offsets"] == reserved - 300
        assert rebuilt.read(299).value == b"v299"
        with pytest.raises(DataLossError):
            rebuilt.read(350)
        assert rebuilt.append(b"new") == reserved
        assert rebuilt.read(reserved).value == b"new"
    finally:
        rebuilt.close()


def _renewed_end(bucket: Path, old_end: int) -> int:
    """The end the bucket records once it moved from ``old_end`` (20 s at most)."""
    deadline = time.monotonic() + 20
    while _bucket_end(bucket) == old_end and time.monotonic() < deadline:
        time.sleep(0.02)
    return _bucket_end(bucket)


def test_the_shipper_renews_the_reservation_before_appends_reach_its_end(
    tmp_path: Path,
) -> None:
    """Once appends used half of the reservation, the shipper (woken, not at its next
    timed round, an hour away) records a new end, so the appends that follow find their
    offsets reserved instead of writing the bucket themselves."""
    bucket = tmp_path / "bucket"
    tlog = open_log(tmp_path / "log", bucket, ship_interval_ms=3_600_000)
    try:
        tlog.append(b"first")
        first_end = _bucket_end(bucket)
        assert first_end == 1 + RESERVE
        while tlog.next_offset <= first_end - RESERVE // 2:  # past the half
            tlog.append(b"v")
        assert _renewed_end(bucket, first_end) >= tlog.next_offset + RESERVE
    finally:
        tlog.close()


def test_a_renewed_reservation_leaves_the_shipper_at_rest(tmp_path: Path) -> None:
    """Between renewals the shipper's rounds do not wake it again: with appends past the
    half of the last renewal's margin (a renewal would move nothing yet), an idle log's
    shipper runs a round now and then, not one after the other."""
    bucket = tmp_path / "bucket"
    tlog = open_log(tmp_path / "log", bucket, ship_interval_ms=50)
    try:
        tlog.append(b"first")
        while tlog.next_offset < 1 + RESERVE // 2 + 5:  # past the half: renewed
            tlog.append(b"v")
        renewed_at = _renewed_end(bucket, 1 + RESERVE) - RESERVE - RESERVE // 2
        while tlog.next_offset <= renewed_at + RESERVE // 2 + 5:
            tlog.append(b"w")
        assert tlog.next_offset < _bucket_end(bucket) - RESERVE // 2  # no wake due yet
        shipper = tlog.shipper
        assert shipper is not None
        time.sleep(0.3)  # the rounds the appends asked for
        before = shipper.rounds
        time.sleep(1.0)
        assert shipper.rounds - before <= 2
    finally:
        tlog.close()


def test_a_log_rebuilt_after_its_disk_is_lost_never_reuses_offsets(tmp_path: Path) -> None:
    """After a clean close the bucket records exactly the offsets handed out (the
    reservation is released), so the lost range is exactly the unshipped tail."""
    log_dir, bucket = tmp_path / "log", tmp_path / "bucket"
    tlog = open_log(log_dir, bucket)
    for i in range(300):
        tlog.append(b"v%d" % i)
    tlog.roll()
    tlog.tier_once()  # ships every sealed segment
    shipped = tlog.bounds().remote_end_offset
    assert shipped == 300
    for i in range(300, 420):
        tlog.append(b"v%d" % i)  # acknowledged, not shipped
    assert _bucket_end(bucket) > 420
    tlog.close()
    assert _bucket_end(bucket) == 420

    shutil.rmtree(log_dir)  # the disk is lost
    rebuilt = open_log(log_dir, bucket)
    try:
        assert rebuilt.next_offset == 420  # not 300: those offsets were handed out
        assert rebuilt.lost_offsets() == [[300, 420]]
        assert rebuilt.describe()["lost_offsets"] == [[300, 420]]
        assert rebuilt.stats()["lost_offsets"] == 120
        assert rebuilt.read(299).value == b"v299"
        with pytest.raises(DataLossError):
            rebuilt.read(350)
        assert rebuilt.append(b"new") == 420
        assert rebuilt.read(420).value == b"new"
    finally:
        rebuilt.close()
    # Reopened (not rebuilt), the lost range stays reported; nothing changes.
    again = open_log(log_dir, bucket)
    try:
        assert again.lost_offsets() == [[300, 420]] and again.next_offset == 421
    finally:
        again.close()


def test_a_fresh_log_records_nothing_lost(tmp_path: Path) -> None:
    tlog = open_log(tmp_path / "log", tmp_path / "bucket")
    try:
        tlog.append(b"x")
        tlog.maintain()
        assert tlog.lost_offsets() == [] and tlog.stats()["lost_offsets"] == 0
        meta = json.loads((tmp_path / "bucket" / naming.meta_object_key("orders-0")).read_bytes())
        assert "lost" not in meta
    finally:
        tlog.close()


def open_replica(d: Path, bucket: Path) -> TieredLog:
    """A cluster replica's log: created empty by the node (never rebuilt at open)."""
    return TieredLog(
        d,
        log_id="orders-0",
        storage=LocalDirStorage(bucket),
        config=CFG,
        tier=TierConfig(chunk_bytes=1024, offset_reserve=RESERVE),
        start_shipper=False,
        rebuild=False,
        replicated=True,
    )


def test_an_empty_replica_that_takes_the_lead_continues_above_the_bucket(tmp_path: Path) -> None:
    """A whole cluster restored onto new disks (or every replica's disk lost): the
    replica elected leader holds no record. It takes the bucket's view before its first
    append and continues above every offset the partition handed out, reporting the
    gap lost once; a follower reset to it sees the same (issue 17)."""
    bucket = tmp_path / "bucket"
    old = open_replica(tmp_path / "old", bucket)
    old.lead(3)
    for i in range(200):
        old.append(b"v%d" % i)
    old.set_high_watermark(200)
    old.roll()
    for i in range(200, 260):
        old.append(b"v%d" % i)
    old.set_high_watermark(260)
    old.tier_once()  # ships [0, 200), records the end: the high watermark, 260
    assert old.bounds().remote_end_offset == 200
    old.close()

    leader = open_replica(tmp_path / "new-a", bucket)
    follower = open_replica(tmp_path / "new-b", bucket)
    try:
        assert leader.next_offset == 0  # opened empty: a replica decides nothing alone
        assert leader.lead(0) == 260
        assert leader.next_offset == leader.high_watermark == 260
        assert leader.bounds().local_start_offset == 260 and leader.log_start_offset == 0
        assert leader.lost_offsets() == [[200, 260]]
        assert leader.read(199).value == b"v199"
        with pytest.raises(DataLossError):
            leader.read(230)
        assert leader.append(b"new") == 260
        follower.reset_replica(260)  # what its leader answers an empty follower
        follower.resync_remote()
        assert follower.lost_offsets() == [[200, 260]]  # noted once, in the bucket
        meta = json.loads((bucket / naming.meta_object_key("orders-0")).read_bytes())
        assert meta["lost"] == [[200, 260]]
    finally:
        leader.close()
        follower.close()


def test_a_new_partitions_leader_starts_at_zero(tmp_path: Path) -> None:
    tlog = open_replica(tmp_path / "log", tmp_path / "bucket")
    try:
        assert tlog.lead(0) == 0 and tlog.append(b"x") == 0 and tlog.lost_offsets() == []
    finally:
        tlog.close()


def test_an_idle_partition_reserves_nothing_and_its_next_leader_starts_at_zero(
    tmp_path: Path,
) -> None:
    """A partition that never held a record reserves no offsets (its upkeep renews a
    reservation only once offsets were handed out), so a replica that takes the lead
    with an empty log starts at 0, not above a reservation nobody used."""
    bucket = tmp_path / "bucket"
    a = open_replica(tmp_path / "a", bucket)
    b = open_replica(tmp_path / "b", bucket)
    try:
        a.lead(0)
        a.maintain()
        a.tier_once()
        meta = bucket / naming.meta_object_key("orders-0")
        assert not meta.exists() or _bucket_end(bucket) == 0
        a.follow()
        assert b.lead(1) == 0 and b.append(b"x") == 0 and b.lost_offsets() == []
    finally:
        a.close()
        b.close()


def test_a_replica_created_empty_while_its_node_ran_leads_from_zero(tmp_path: Path) -> None:
    """A topic created in a running cluster: its leader hands out offsets (reserving
    them in the bucket) for a batch no follower got before it died; the follower that
    takes the lead, its log created empty by its running node (marked so), starts at 0,
    as Kafka's would: nothing was committed, and continuing above the reservation would
    skip a whole reservation of offsets. The marker outlives a restart of the replica;
    a replica opened again without it (a lost disk) still continues above the bucket."""
    bucket = tmp_path / "bucket"
    old = open_replica(tmp_path / "old", bucket)
    new = open_replica(tmp_path / "new", bucket)
    new.mark_created_empty()
    old.lead(0)
    old.append_batch([b"a", b"b", b"c"])  # reserved in the bucket, never replicated
    assert _bucket_end(bucket) > 3
    old.close()  # the bucket keeps the 3 offsets it handed out
    new.close()
    new = open_replica(tmp_path / "new", bucket)  # the marker holds across a restart
    lost_disk = open_replica(tmp_path / "wiped", bucket)
    try:
        assert not new.needs_bucket_view()
        assert new.lead(1) == 0 and new.append(b"x") == 0 and new.lost_offsets() == []
        assert lost_disk.needs_bucket_view()
        # a disk found empty: above every offset handed out (or reserved to be)
        assert lost_disk.lead(2) == _bucket_end(bucket) > 3
    finally:
        new.close()
        lost_disk.close()
