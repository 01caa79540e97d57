"""The bucket reads a node makes before it leads an empty replica's log: a read done for
an epoch stays done for it however often the node asks (it asks twice each poll), so a
read that took longer than the poll's wait is taken up by the lead, not started again.

Real partition logs on a local-directory bucket; no processes."""

from __future__ import annotations

from pathlib import Path

from tiered_log import LogConfig, TieredLog
from tiered_log.cluster.lead_views import LeadViews
from tiered_log.remote.fs import LocalDirStorage
from tiered_log.remote.tier import TierConfig


def _replica(d: Path, bucket: Path) -> TieredLog:
    return TieredLog(
        d,
        log_id="orders-0",
        storage=LocalDirStorage(bucket),
        config=LogConfig(segment_bytes=4096),
        tier=TierConfig(chunk_bytes=1024),
        start_shipper=False,
        rebuild=False,
        replicated=True,
    )


def test_a_read_done_for_an_epoch_is_ready_every_time_the_node_asks(tmp_path: Path) -> None:
    bucket = tmp_path / "bucket"
    old = _replica(tmp_path / "old", bucket)
    old.lead(0)
    old.append_batch([b"a", b"b", b"c"])  # offsets handed out: the bucket records them
    old.close()
    lost_disk = _replica(tmp_path / "wiped", bucket)
    views = LeadViews(node_id=1)
    key = ("orders", 0)
    try:
        assert lost_disk.needs_bucket_view()
        assert not views.ready(key, lost_disk, 1)  # started
        views.wait(timeout_s=30)  # done, as a read that outlived an earlier poll's wait
        assert views.ready(key, lost_disk, 1)  # the poll's first pass
        assert views.ready(key, lost_disk, 1)  # its locked pass, just before the lead
        assert not views.ready(key, lost_disk, 2)  # the metadata moved on: read again
        views.wait(timeout_s=30)
        assert views.ready(key, lost_disk, 2) and views.ready(key, lost_disk, 2)
        assert lost_disk.lead(2) == 3  # above every offset handed out
        assert views.ready(key, lost_disk, 3)  # it holds offsets now: no read needed
    finally:
        views.close()
        lost_disk.close()
