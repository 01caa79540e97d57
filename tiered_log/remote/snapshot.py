"""The partition snapshot: a compact copy of one log's remote view, kept in the bucket,
so that a replica taking the lead (or a node rebuilding on a new disk) learns what the
bucket holds in a few requests instead of one GET per archived segment.

Object ``<log>/snapshot.bin`` (:func:`snapshot_key`)::

    b"TLSNAP1\\n"                magic and version
    <16 hex digits>\\n          xxh3-64 of the compressed body below
    zlib(JSON body)

The JSON body: ``leader_epoch`` (the writer's; null on a single node), ``end`` (the
remote end when written: every finished copy below it is listed), ``written_ms``,
``batch_format`` (that of the copies' batches, as their manifests carry it:
:data:`~tiered_log.remote.manifest.BATCH_FORMAT`; a snapshot without it lists copies of
the former format and is refused as their manifests are),
``segments`` (each finished copy's journal record, as the copy journal writes it) and
``entries`` (base64 of the remoteLogIndex entries of those copies, in offset order,
encoded as the local remoteLogIndex file holds them).

The per-segment manifests (``.rli``) stay the source of truth: the snapshot only saves
reading them. A reader takes the snapshot, drops what lies below the log start that
``meta.json`` records (retention moved it since), and lists only the segment objects at
or above the snapshot's ``end`` (``StartAfter``), reading their manifests as a full
rebuild would. A missing or damaged snapshot means a full rebuild, never a wrong view.

Who writes: the leader (or single node) that ships, fenced as its copies are; a remote
truncation deletes the snapshot before it deletes objects (a snapshot naming deleted
copies is never read), and the next round writes a new one. Plain functions, no state:
thread-safe as the storage is.
"""

from __future__ import annotations

import base64
import json
import time
import zlib
from dataclasses import dataclass

import xxhash

from ..errors import CorruptIndexError, RemoteCorruptionError, RemoteObjectNotFoundError
from ..format import naming
from ..format.remote_index import RemoteLogIndexEntry, decode_entries
from .manifest import BATCH_FORMAT, FORMER_FORMAT, format_error
from .metadata import RemoteSegment
from .storage import RemoteStorage

MAGIC = b"TLSNAP1\n"


snapshot_key = naming.snapshot_object_key


def tail_start_after(log_id: str, end: int) -> str:
    """The ``start_after`` key of a listing of the segment objects whose base offset is
    at or above ``end`` (keys sort by base offset: 20-digit names)."""
    return naming.segment_objects_prefix(log_id) + naming.offset_name(end)


@dataclass
class Snapshot:
    """A decoded snapshot (see the module docstring)."""

    leader_epoch: int | None
    end: int
    segments: list[RemoteSegment]
    entries: list[RemoteLogIndexEntry]
    written_ms: int = 0


def encode_snapshot(snap: Snapshot) -> bytes:
    """The object's bytes for ``snap``."""
    body = json.dumps(
        {
            "version": 1,
            "leader_epoch": snap.leader_epoch,
            "end": snap.end,
            "written_ms": snap.written_ms or int(time.time() * 1000),
            "batch_format": BATCH_FORMAT,
            "segments": [json.loads(s.to_json()) for s in snap.segments],
            "entries": base64.b64encode(b"".join(e.encode() for e in snap.entries)).decode(),
        },
        separators=(",", ":"),
    ).encode()
    packed = zlib.compress(body, 6)
    return MAGIC + xxhash.xxh3_64_hexdigest(packed).encode() + b"\n" + packed


def decode_snapshot(data: bytes, key: str) -> Snapshot:
    """The snapshot in ``data``; RemoteCorruptionError naming ``key`` when anything does
    not check (magic, digest, JSON, records, entries); CorruptRecordError
    (:func:`~tiered_log.remote.manifest.format_error`) when it lists copies of another
    batch format than :data:`~tiered_log.remote.manifest.BATCH_FORMAT`."""
    try:
        if not data.startswith(MAGIC):
            raise ValueError("not a snapshot (bad magic)")
        digest, _, packed = data[len(MAGIC) :].partition(b"\n")
        if xxhash.xxh3_64_hexdigest(packed).encode() != digest:
            raise ValueError("its checksum does not match")
        d = json.loads(zlib.decompress(packed))
        if d.get("version") != 1:
            raise ValueError(f"unknown version {d.get('version')!r}")
        segments = [RemoteSegment.from_dict(s) for s in d["segments"]]
        entries = [e for _, e in decode_entries(base64.b64decode(d["entries"]))]
        epoch = d.get("leader_epoch")
        snap = Snapshot(
            None if epoch is None else int(epoch),
            int(d["end"]),
            segments,
            entries,
            int(d.get("written_ms", 0)),
        )
        found = d.get("batch_format")
    except (ValueError, KeyError, TypeError, zlib.error, CorruptIndexError) as exc:
        raise RemoteCorruptionError(f"partition snapshot {key} is damaged: {exc}") from exc
    if found is None:
        raise format_error(f"partition snapshot {key} lists segments of {FORMER_FORMAT}")
    if found != BATCH_FORMAT:
        raise format_error(f"partition snapshot {key} lists batches of an unknown format {found!r}")
    return snap


def read_snapshot(storage: RemoteStorage, log_id: str) -> Snapshot | None:
    """The log's snapshot, or None when there is none. RemoteCorruptionError when it is
    damaged; RemoteStorageError when the bucket fails."""
    key = snapshot_key(log_id)
    try:
        data = storage.get(key)
    except RemoteObjectNotFoundError:
        return None
    return decode_snapshot(data, key)


__all__ = [
    "Snapshot",
    "decode_snapshot",
    "encode_snapshot",
    "read_snapshot",
    "snapshot_key",
    "tail_start_after",
]
