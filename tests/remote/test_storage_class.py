"""A topic's ``remote_storage_class``: its data objects go to S3 in that class (moto's
server records it: HeadObject shows it), by one PutObject and by a multipart upload,
shipped in this process and through the tier's worker, plain and encoded; manifests stay
in the default class; the directory store ignores it; the classes that need a restore
before a read (GLACIER, DEEP_ARCHIVE) are refused when a configuration is made."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from tiered_log import LogConfig, ProducerRecord, TieredLog
from tiered_log.errors import InvalidArgumentError
from tiered_log.format import naming
from tiered_log.partition.scrub import scrub_partition
from tiered_log.remote.fs import LocalDirStorage
from tiered_log.remote.limits import RateLimiter
from tiered_log.remote.s3 import S3Storage
from tiered_log.remote.scrub import ScrubReport
from tiered_log.remote.storage import RemoteStorage
from tiered_log.remote.tier import TierConfig
from tiered_log.topic_config import TopicConfig

pytestmark = pytest.mark.timeout(120)

SEGMENT = LogConfig(segment_bytes=40 * 1024)
RECORDS = 1200


def value(o: int) -> bytes:
    return f'{{"n": {o}, "msg": "order {o} shipped to warehouse {o % 13}"}}'.encode() + bytes(
        [o % 251]
    ) * (o % 200)


def shipped(path: Path, storage: RemoteStorage, **tier: Any) -> TieredLog:
    """An open log of a few segments, every one shipped (``tier``: its settings)."""
    cfg = TierConfig(chunk_bytes=16 << 10, **tier)
    tlog = TieredLog(
        path, log_id="orders-0", storage=storage, config=SEGMENT, tier=cfg, start_shipper=False
    )
    for s in range(0, RECORDS, 100):
        tlog.append_batch([ProducerRecord(value(o), timestamp=1000 + o) for o in range(s, s + 100)])
    tlog.flush()
    tlog.roll()
    tlog.tier_once()
    return tlog


def ship_and_read(path: Path, storage: RemoteStorage, **tier: Any) -> None:
    """Fill a log of a few segments, ship them all, and read every record back from the
    bucket (the local copies are gone)."""
    tlog = shipped(path, storage, local_retention_bytes=0, **tier)
    try:
        assert tlog.bounds().local_start_offset == RECORDS
        o = 0
        while o < RECORDS:
            recs = tlog.read_range(o, 500, 1 << 20)
            assert recs and recs[0].offset == o
            assert [r.value for r in recs] == [value(r.offset) for r in recs]
            o = recs[-1].offset + 1
    finally:
        tlog.close()


def classes(client: Any, storage: S3Storage) -> dict[str, list[str]]:
    """Suffix -> the storage class of each of the log's segment objects (HeadObject's
    ``StorageClass``; S3 leaves it out for STANDARD)."""
    out: dict[str, list[str]] = {}
    for info in storage.list(naming.segment_objects_prefix("orders-0")):
        parsed = naming.parse_segment_object_key(info.key)
        assert parsed is not None
        full = f"{storage.prefix}/{info.key}" if storage.prefix else info.key
        head = client.head_object(Bucket=storage.bucket, Key=full)
        out.setdefault(parsed[2], []).append(head.get("StorageClass", "STANDARD"))
    return out


@pytest.mark.parametrize(
    ("storage_class", "tier", "multipart"),
    [
        pytest.param(
            "STANDARD_IA",
            {"worker_processes": 0, "compression": "none"},
            False,
            id="ia-plain-in-process",
        ),
        pytest.param(
            "ONEZONE_IA",
            {"worker_processes": 1, "compression": "zstd"},
            False,
            id="onezone-encoded-worker",
        ),
        pytest.param(
            "GLACIER_IR",
            {"worker_processes": 1, "compression": "none"},
            True,
            id="glacier-ir-multipart-worker",
        ),
        pytest.param(
            "INTELLIGENT_TIERING",
            {"worker_processes": 0, "compression": "zstd"},
            True,
            id="tiering-multipart-encoded",
        ),
    ],
)
def test_data_objects_go_in_the_topic_storage_class(
    tmp_path: Path,
    s3_storage_factory: Callable[..., S3Storage],
    s3_client: Any,
    storage_class: str,
    tier: dict[str, Any],
    multipart: bool,
) -> None:
    opts = {"multipart_threshold": 8 << 10} if multipart else {}
    storage = s3_storage_factory(prefix="sc", **opts)
    ship_and_read(tmp_path / "log", storage, storage_class=storage_class, **tier)
    found = classes(s3_client, storage)
    assert len(found[naming.LOG_SUFFIX]) >= 3
    assert set(found[naming.LOG_SUFFIX]) == {storage_class}
    assert set(found[naming.RLI_SUFFIX]) == {"STANDARD"}  # manifests: the default class


def test_standard_sends_no_storage_class(
    tmp_path: Path, s3_storage_factory: Callable[..., S3Storage], s3_client: Any
) -> None:
    """The default class is not sent (stores without classes take the upload as before)
    and is what HeadObject reports."""
    storage = s3_storage_factory(prefix="std")
    ship_and_read(tmp_path / "log", storage, worker_processes=0)
    found = classes(s3_client, storage)
    assert set(found[naming.LOG_SUFFIX]) == set(found[naming.RLI_SUFFIX]) == {"STANDARD"}


def test_directory_store_ignores_the_storage_class(tmp_path: Path) -> None:
    ship_and_read(
        tmp_path / "log", LocalDirStorage(tmp_path / "bucket"), storage_class="STANDARD_IA"
    )


@pytest.mark.parametrize("refused", ["GLACIER", "DEEP_ARCHIVE", "glacier"])
def test_classes_needing_a_restore_are_refused(refused: str) -> None:
    with pytest.raises(ValidationError) as info:
        TopicConfig.model_validate({"remote_storage_class": refused})
    msg = str(info.value)
    assert refused.upper() in msg and "restored" in msg and "STANDARD_IA" in msg
    with pytest.raises(InvalidArgumentError) as err:
        TierConfig(storage_class=refused)
    assert "restored" in err.value.message


def test_storage_class_values() -> None:
    def topic(**config: object) -> TopicConfig:
        return TopicConfig.model_validate(config)

    assert topic().remote_storage_class == "STANDARD"
    assert topic(remote_storage_class=" standard_ia ").remote_storage_class == "STANDARD_IA"
    assert TierConfig.of(topic(remote_storage_class="ONEZONE_IA")).storage_class == "ONEZONE_IA"
    with pytest.raises(ValidationError, match="unknown S3 storage class 'COLD'"):
        TopicConfig.model_validate({"remote_storage_class": "COLD"})
    with pytest.raises(ValidationError, match="a string"):
        TopicConfig.model_validate({"remote_storage_class": 3})


@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_a_data_object_the_scrubber_repairs_stays_in_the_topic_storage_class(
    tmp_path: Path,
    s3_storage_factory: Callable[..., S3Storage],
    s3_client: Any,
    compression: str,
) -> None:
    """A damaged data object made again from the local log goes back in the topic's
    class, as its copy put it (not the default class)."""
    storage = s3_storage_factory(prefix="repair")
    tlog = shipped(tmp_path / "log", storage, storage_class="STANDARD_IA", compression=compression)
    try:
        key = next(
            i.key
            for i in storage.list(naming.segment_objects_prefix("orders-0"))
            if i.key.endswith(naming.LOG_SUFFIX)
        )
        data = bytearray(storage.get(key))
        data[len(data) // 2] ^= 0x20
        storage.put(key, bytes(data))  # damaged, and now in the default class
        assert set(classes(s3_client, storage)[naming.LOG_SUFFIX]) == {
            "STANDARD_IA",
            "STANDARD",
        }
        rep = ScrubReport()
        scrub_partition(tlog, "orders", 0, rep, RateLimiter(None))
        [d] = rep.damaged
        assert d.repaired == "from the local log", d.unrepaired
        assert set(classes(s3_client, storage)[naming.LOG_SUFFIX]) == {"STANDARD_IA"}
    finally:
        tlog.close()
