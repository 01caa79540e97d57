"""Never hand out an acknowledged offset twice (issue 17): a log records in the bucket
how far it handed out offsets, and a log rebuilt from the bucket after its disk was lost
resumes above that, reporting the offsets in neither tier as lost (describe, stats), not
giving them to new records."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tiered_log import LogConfig, TieredLog
from tiered_log.errors import DataLossError
from tiered_log.format import naming
from tiered_log.remote.fs import LocalDirStorage
from tiered_log.remote.tier import TierConfig

CFG = LogConfig(segment_bytes=1 << 20)


def open_log(d: Path, bucket: Path) -> TieredLog:
    return TieredLog(d, log_id="orders-0", storage=LocalDirStorage(bucket), config=CFG,
                     tier=TierConfig(chunk_bytes=1024, end_record_interval_ms=0),
                     start_shipper=False)


def test_a_log_rebuilt_after_its_disk_is_lost_never_reuses_offsets(tmp_path: Path) -> None:
    log_dir, bucket = tmp_path / "log", tmp_path / "bucket"
    tlog = open_log(log_dir, bucket)
    for i in range(300):
        tlog.append(b"v%d" % i)
    tlog.roll()
    tlog.tier_once()  # ships every sealed segment, records the end (300)
    shipped = tlog.bounds().remote_end_offset
    assert shipped == 300
    for i in range(300, 420):
        tlog.append(b"v%d" % i)  # acknowledged, not shipped
    tlog.tier_once()  # nothing sealed to ship, nothing recorded: a round that shipped does
    tlog.maintain()  # the upkeep (every end_record_interval_ms) records 420
    meta = json.loads((bucket / naming.meta_object_key("orders-0")).read_bytes())
    assert meta["end_offset"] == 420
    tlog.close()

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
