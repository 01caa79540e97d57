"""Damaged tiering metadata: never a silently shorter log, never an object deleted on
another object's word, damage contained to what is damaged.

The copy journal, the local remote metadata, the ``.rli`` manifests and the remote-index
files are each damaged the way a disk, a bug or an operator's tool would, on both
backends (a local directory and moto's S3 server), and the log is opened again: on the
same directory, or on an empty one (a rebuild from the bucket alone).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tiered_log import CorruptIndexError, RemoteCorruptionError
from tiered_log.format import naming
from tiered_log.partition import TieredLog
from tiered_log.remote.fs import LocalDirStorage
from tiered_log.remote.manifest import decode_manifest
from tiered_log.remote.snapshot import snapshot_key
from tiered_log.remote.storage import RemoteStorage

from .test_tiered_log import check_record, open_log, produce, read_all_checked

N = 900


def _shipped(path: Path, storage: RemoteStorage) -> TieredLog:
    """A log of N records, every sealed segment shipped and dropped from local disk. The
    partition snapshot is deleted: these tests are about the manifests, which a rebuild
    reads without one."""
    tlog = open_log(path, storage, local_retention_bytes=0)
    produce(tlog, N)
    tlog.roll()
    tlog.tier_once()
    assert tlog.remote_tier is not None and len(tlog.remote_tier.finished_segments) >= 4
    storage.delete([snapshot_key("orders-0")])
    return tlog


def _keys(storage: RemoteStorage) -> set[str]:
    return {i.key for i in storage.list(naming.segment_objects_prefix("orders-0"))}


def _reopen_dir(tmp_path: Path, empty_dir: bool) -> Path:
    """Where the log opens again: an empty directory (a rebuild from the bucket), or its
    own with the remote-index files gone (they are not fsynced: a crash can lose them)."""
    if empty_dir:
        return tmp_path / "empty"
    shutil.rmtree(tmp_path / "log" / "remote" / "index")
    return tmp_path / "log"


def _rli(seg_base: int, seg_id: str) -> str:
    return naming.segment_object_key("orders-0", seg_base, seg_id, naming.RLI_SUFFIX)


@pytest.mark.parametrize("line", [0, 1, 5])
def test_damaged_journal_line_is_recovered_from_the_bucket(
    tmp_path: Path, storage: RemoteStorage, line: int
) -> None:
    """Issue 14: ``{`` -> ``[`` in a journal line used to forget that segment silently
    (log start moved up, or a hole answering 410 while a timestamp lookup skipped it)."""
    tlog = _shipped(tmp_path / "log", storage)
    assert tlog.remote_tier is not None
    ids = [s.id for s in tlog.remote_tier.finished_segments]
    objects = _keys(storage)
    tlog.close()
    journal = tmp_path / "log" / "remote" / "segments.jsonl"
    lines = journal.read_bytes().split(b"\n")
    assert lines[line].startswith(b"{")
    lines[line] = b"[" + lines[line][1:]
    journal.write_bytes(b"\n".join(lines))
    tlog = open_log(tmp_path / "log", storage)
    assert tlog.remote_tier is not None
    assert [s.id for s in tlog.remote_tier.finished_segments] == ids
    assert tlog.log_start_offset == 0
    read_all_checked(tlog, N)
    seg = tlog.remote_tier.finished_segments[line // 2]
    mid = (seg.base_offset + seg.next_offset) // 2
    assert tlog.offset_for_timestamp(1_000_000 + mid * 10) == mid
    assert _keys(storage) == objects  # nothing orphaned, nothing deleted
    # The damaged file is kept for the operator; the journal in use reads whole.
    assert list(journal.parent.glob("segments.jsonl.damaged-*"))
    tlog.close()
    tlog = open_log(tmp_path / "log", storage)
    read_all_checked(tlog, N)
    tlog.close()


def test_damaged_journal_with_an_unreachable_bucket_stops_the_partition(tmp_path: Path) -> None:
    """Without the bucket the damaged journal cannot be recovered: the log does not open
    (an error naming the file) rather than open shorter."""
    storage = LocalDirStorage(tmp_path / "bucket")
    _shipped(tmp_path / "log", storage).close()
    journal = tmp_path / "log" / "remote" / "segments.jsonl"
    lines = journal.read_bytes().split(b"\n")
    finished = [i for i, line in enumerate(lines) if b"COPY_FINISHED" in line]
    i = finished[len(finished) // 2]  # a copy in the middle finished in this line
    lines[i] = b"[" + lines[i][1:]
    journal.write_bytes(b"\n".join(lines))
    shutil.rmtree(tmp_path / "bucket")
    (tmp_path / "bucket").write_bytes(b"not a directory any more")
    with pytest.raises(CorruptIndexError, match=r"segments\.jsonl"):
        open_log(tmp_path / "log", storage)


def test_torn_last_journal_line_is_still_a_crash_not_damage(
    tmp_path: Path, storage: RemoteStorage
) -> None:
    tlog = _shipped(tmp_path / "log", storage)
    tlog.close()
    journal = tmp_path / "log" / "remote" / "segments.jsonl"
    journal.write_bytes(journal.read_bytes() + b'{"id":"abc","base_of')
    tlog = open_log(tmp_path / "log", storage)
    read_all_checked(tlog, N)
    assert not list(journal.parent.glob("segments.jsonl.damaged-*"))
    tlog.close()


def test_damaged_local_meta_is_taken_from_the_bucket(
    tmp_path: Path, storage: RemoteStorage
) -> None:
    tlog = _shipped(tmp_path / "log", storage)
    tlog.truncate(N - 5)  # a clip: the metadata matters
    tlog.close()
    (tmp_path / "log" / "remote" / "meta.json").write_bytes(b"{not json")
    tlog = open_log(tmp_path / "log", storage)
    assert tlog.next_offset == N - 5
    read_all_checked(tlog, N - 5)
    tlog.close()


@pytest.mark.parametrize("empty_dir", [False, True])
def test_damaged_manifest_is_made_again_from_its_data(
    tmp_path: Path, storage: RemoteStorage, empty_dir: bool
) -> None:
    """Issue 14: the local remote-index files gone (they are not fsynced) and one manifest
    damaged used to stop the whole service at start (or, on an empty data directory,
    leave the topic unrestored). The manifest is made again from its data object."""
    tlog = _shipped(tmp_path / "log", storage)
    assert tlog.remote_tier is not None
    seg = tlog.remote_tier.finished_segments[1]
    tlog.close()
    key = _rli(seg.base_offset, seg.id)
    blob = bytearray(storage.get(key))
    blob[len(blob) - 30] ^= 0x40  # inside the last remoteLogIndex entry
    storage.put(key, bytes(blob))
    path = _reopen_dir(tmp_path, empty_dir)
    tlog = open_log(path, storage)
    read_all_checked(tlog, N)
    assert tlog.remote_tier is not None and not tlog.remote_tier.damage
    rs, _, _, _ = decode_manifest(storage.get(key), key)  # put back, checked
    assert (rs.base_offset, rs.next_offset) == (seg.base_offset, seg.next_offset)
    tlog.close()


@pytest.mark.parametrize("empty_dir", [False, True])
def test_damaged_manifest_and_data_are_contained(tmp_path: Path, empty_dir: bool) -> None:
    """Manifest and data object both damaged: that range answers RemoteCorruptionError
    naming it, describe lists it, everything else serves, the log neither shrinks nor
    hands the offsets out again, and both objects stay in the bucket."""
    storage = LocalDirStorage(tmp_path / "bucket")
    tlog = _shipped(tmp_path / "log", storage)
    assert tlog.remote_tier is not None
    segs = tlog.remote_tier.finished_segments
    seg = segs[1]
    tlog.close()
    for suffix, at in ((naming.RLI_SUFFIX, -30), (naming.LOG_SUFFIX, 300)):
        p = (
            tmp_path
            / "bucket"
            / naming.segment_object_key("orders-0", seg.base_offset, seg.id, suffix)
        )
        blob = bytearray(p.read_bytes())
        blob[at] ^= 0x40
        p.write_bytes(bytes(blob))
    objects = _keys(storage)
    path = _reopen_dir(tmp_path, empty_dir)
    tlog = open_log(path, storage)
    assert tlog.next_offset == N
    assert tlog.log_start_offset == 0
    for o in [*range(0, seg.base_offset, 17), *range(seg.next_offset, N, 17)]:
        check_record(tlog.read(o), o)
    with pytest.raises(RemoteCorruptionError, match=seg.id):
        tlog.read(seg.base_offset + 1)
    with pytest.raises(RemoteCorruptionError):
        tlog.read_remote_batches(seg.base_offset)
    with pytest.raises(RemoteCorruptionError):
        tlog.offset_for_timestamp(1_000_000 + (seg.base_offset + 2) * 10)
    assert tlog.offset_for_timestamp(1_000_000 + (seg.next_offset + 2) * 10) == seg.next_offset + 2
    damage = tlog.describe()["remote_damage"]
    assert [(d["id"], d["base_offset"], d["next_offset"]) for d in damage] == [
        (seg.id, seg.base_offset, seg.next_offset)
    ]
    assert _keys(storage) == objects
    tlog.close()


def test_a_manifest_that_lies_deletes_nothing(tmp_path: Path, storage: RemoteStorage) -> None:
    """Issue 14: one manifest claiming ``next_offset`` far beyond its data used to make a
    rebuild delete the segments it claimed to cover, and serve nothing there. The claim
    is checked against the manifest's own entries and checksum and its data object's
    size; the manifest is made again from its data; nothing is deleted."""
    tlog = _shipped(tmp_path / "log", storage)
    assert tlog.remote_tier is not None
    first = tlog.remote_tier.finished_segments[0]
    liar_next = tlog.remote_tier.finished_segments[3].next_offset
    tlog.close()
    objects = _keys(storage)
    key = _rli(first.base_offset, first.id)
    head, _, rest = storage.get(key).partition(b"\n")
    fields = json.loads(head)
    fields["next_offset"] = liar_next
    for drop_checksum in (True, False):  # an old manifest (no checksum) lies just as well
        if drop_checksum:
            fields.pop("checksum", None)
        else:
            fields["checksum"] = "0" * 16
        storage.put(key, json.dumps(fields, separators=(",", ":")).encode() + b"\n" + rest)
        path = tmp_path / f"empty-{drop_checksum}"
        tlog = open_log(path, storage)
        assert _keys(storage) == objects
        assert tlog.next_offset == N
        read_all_checked(tlog, N)
        tlog.close()
