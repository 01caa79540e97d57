"""Deleting records below an offset (Kafka's DeleteRecords) on a partition log: the log
start moves to the offset, inside a batch even, in both tiers; reads below it are out of
range; the segments and archived copies wholly below it go; a restart, and a replica
rebuilt from the bucket alone, keep it. Real logs on the directory store and on S3
through moto's server."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tiered_log import ProducerRecord, TieredLog
from tiered_log.errors import OffsetOutOfRangeError
from tiered_log.remote.metadata import RemoteMeta
from tiered_log.remote.storage import RemoteStorage

from .test_scrub import keys
from .test_scrub_repair import N, fill, open_log


def first_offset(tlog: TieredLog) -> int:
    return tlog.read_range(tlog.log_start_offset, 1)[0].offset


def test_records_below_an_offset_go_from_both_tiers_and_stay_gone(
    tmp_path: Path, storage: RemoteStorage
) -> None:
    tlog = open_log(tmp_path / "log", storage)
    try:
        fill(tlog)
        tlog.roll()
        tlog.tier_once()
        assert tlog.bounds().remote_end_offset == N
        copies_before = len(keys(storage, ".rli"))
        local_before = len(tlog.local_segments())

        start = tlog.delete_records(525)  # inside the batch [500, 550)
        assert start == tlog.log_start_offset == 525
        with pytest.raises(OffsetOutOfRangeError):
            tlog.read_range(524, 1)
        assert tlog.read_range(525, 1)[0].offset == 525
        assert tlog.offset_for_timestamp(0) == 525
        # Wholly-below segments and copies are deleted; the bucket records the start.
        assert len(tlog.local_segments()) < local_before
        assert all(s.next_offset > 525 for s in tlog.local_segments())
        assert len(keys(storage, ".rli")) < copies_before
        [meta_key] = keys(storage, "meta.json")
        assert RemoteMeta.from_bytes(storage.get(meta_key)).log_start_offset == 525
        # A lower offset changes nothing; above the high watermark is refused.
        assert tlog.delete_records(100) == 525
        with pytest.raises(OffsetOutOfRangeError):
            tlog.delete_records(N + 1)
        tlog.close()

        # A restart keeps it.
        tlog = open_log(tmp_path / "log", storage)
        assert tlog.log_start_offset == 525 and first_offset(tlog) == 525
        tlog.close()
        # A replica rebuilt from the bucket alone (its disk lost) finds it there.
        shutil.rmtree(tmp_path / "log")
        tlog = open_log(tmp_path / "log", storage)
        assert tlog.log_start_offset == 525
        with pytest.raises(OffsetOutOfRangeError):
            tlog.read_range(524, 1)
        assert tlog.read_range(525, 1)[0].offset == 525
    finally:
        tlog.close()


def test_a_log_without_a_remote_tier_and_every_committed_record(tmp_path: Path) -> None:
    tlog = open_log(tmp_path / "log", None)
    try:
        fill(tlog, 400)
        tlog.roll()
        fill(tlog, 100)
        assert tlog.delete_records(250) == 250
        assert first_offset(tlog) == 250
        hw = tlog.high_watermark
        assert tlog.delete_records(hw) == hw  # every committed record
        assert tlog.bounds().log_start_offset == hw == tlog.next_offset
        with pytest.raises(OffsetOutOfRangeError):
            tlog.read_range(hw - 1, 1)
        tlog.append_batch([ProducerRecord(b"after")])
        assert [r.value for r in tlog.read_range(hw, 10)] == [b"after"]
        tlog.close()
        tlog = open_log(tmp_path / "log", None)
        assert tlog.log_start_offset == hw
    finally:
        tlog.close()
