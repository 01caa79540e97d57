"""A point-in-time restore stores every data object it writes as the new topic's
shipper would: in its ``remote_storage_class`` (moto's server records it: HeadObject
shows it), the cut copy compressed with its ``remote_compression`` and encrypted again
when it was; manifests in the default class. The restored topic reads back whole."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tiered_log.broker.point_in_time import restore_point_in_time
from tiered_log.broker.topics import TopicMeta
from tiered_log.config import TopicConfig
from tiered_log.format import naming
from tiered_log.remote.crypto import KeyRing
from tiered_log.remote.s3 import S3Storage

from .test_archive_codec import K1, write_ring
from .test_restore_pit import TOPIC_ID, archive, open_restored, read_all, record

pytestmark = pytest.mark.timeout(120)


def _head(client: Any, storage: S3Storage, key: str) -> str:
    full = f"{storage.prefix}/{key}" if storage.prefix else key
    got = client.head_object(Bucket=storage.bucket, Key=full)
    return str(got.get("StorageClass", "STANDARD"))


def test_every_restored_object_goes_in_the_topic_storage_class(
    tmp_path: Path, s3_storage: S3Storage, s3_client: Any
) -> None:
    write_ring(tmp_path / "ring.json", "k1", {"k1": K1})
    ring = KeyRing(tmp_path / "ring.json")
    archive(tmp_path / "src", s3_storage, ring, "zstd")  # the source's copies: zstd
    config = TopicConfig(remote_storage_class="STANDARD_IA", remote_compression="lz4")
    meta = TopicMeta(name="orders", partitions=1, config=config, topic_id=TOPIC_ID, created_ms=1)
    s3_storage.put(naming.topic_object_key("orders"), meta.to_json())

    report, new = restore_point_in_time(
        s3_storage, "orders", "orders-then", to_timestamp=1525, ring=ring
    )
    [part] = report.partitions
    assert part.end_offset == 526 and part.segments_rewritten == 1 and part.segments_copied >= 2
    log_id = f"orders-then-{new.topic_id[:12]}-0"
    classes: dict[str, list[str]] = {}
    heads: dict[int, dict[str, Any]] = {}
    for info in s3_storage.list(naming.segment_objects_prefix(log_id)):
        parsed = naming.parse_segment_object_key(info.key)
        assert parsed is not None
        classes.setdefault(parsed[2], []).append(_head(s3_client, s3_storage, info.key))
        if parsed[2] == naming.RLI_SUFFIX:
            head = json.loads(s3_storage.get(info.key).partition(b"\n")[0])
            heads[int(head["next_offset"]) if "next_offset" in head else parsed[0]] = head
    assert len(classes[naming.LOG_SUFFIX]) == part.segments_copied + 1
    assert set(classes[naming.LOG_SUFFIX]) == {"STANDARD_IA"}  # the cut copy's too
    assert set(classes[naming.RLI_SUFFIX]) == {"STANDARD"}
    cut = max(heads)  # the copy holding the restore point: the last one
    assert heads[cut]["compression"] == "lz4"  # the topic's codec, not the source copy's
    assert heads[cut]["encryption"]["key_id"] == "k1"
    assert all(h["compression"] == "zstd" for b, h in heads.items() if b != cut)

    tlog = open_restored(tmp_path, s3_storage, "orders-then", ring)
    try:
        got = read_all(tlog, 526)
        assert [(r.offset, r.value) for r in got] == [(o, record(o).value) for o in range(526)]
    finally:
        tlog.close()
