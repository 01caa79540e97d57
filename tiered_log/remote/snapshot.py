"""The partition snapshot: a compact copy of one log's remote view, kept in the bucket,
so that a replica taking the lead (or a node rebuilding on a new disk) learns what the
bucket holds in a few requests instead of one GET per archived segment.

Object ``<log>/snapshot.bin`` (:func:`snapshot_key`)::

    b"TLSNAP1\\n"                magic and version
    <16 hex digits>\\n          xxh3-64 of the compressed body below
    zlib(JSON body)

The JSON body: ``version`` (1, or 2 when it names spills), ``leader_epoch`` (the
writer's; null on a single node), ``end`` (the remote end when written: every finished
copy below it is listed, here or in a spill), ``written_ms``, ``batch_format`` (that of
the copies' batches, as their manifests carry it:
:data:`~tiered_log.remote.manifest.BATCH_FORMAT`; a snapshot without it lists copies of
the former format and is refused as their manifests are), ``spills`` (below),
``segments`` (each finished copy's journal record above the last spill, as the copy
journal writes it) and ``entries`` (base64 of the remoteLogIndex entries of those copies,
in offset order, encoded as the local remoteLogIndex file holds them).

**Spills** keep the snapshot small however long the archive grows (Redpanda's manifest
spillover): the older copies move, in offset order, into immutable objects
``<log>/snapshot-spills/<base>-<end>-<tag>.bin`` (:func:`spill_key`) of the same layout
(version 1, no spills of their own), each covering the copies whose base offset lies in
``[base, end)``. The snapshot lists them (``key``, ``base``, ``end``, ``count``) in offset
order; its own ``segments`` start at the last one's ``end``. A writer keeps between
``spill_segments`` and twice that many copies in the snapshot itself, spills the oldest
``spill_segments`` beyond, and merges the two newest spills while the older is no
larger than the newer (a binary counter, up to :data:`SPILL_MAX_FACTOR` times
``spill_segments`` a spill): a write costs what the newest copies cost, each copy is
rewritten a few times over the archive's life, and a reader makes a handful of GETs.
A spill is put before the snapshot naming it and deleted only after a snapshot no
longer naming it is in place; a reader that finds a named spill gone (a writer merged
it meanwhile) reads the snapshot again (:func:`read_snapshot`).

The per-segment manifests (``.rli``) stay the source of truth: the snapshot only saves
reading them. A reader takes the snapshot and its spills, drops what lies below the log
start that ``meta.json`` records (retention moved it since; a spill wholly below it is
not read), and lists only the segment objects at or above the snapshot's ``end``
(``StartAfter``), reading their manifests as a full rebuild would. A missing or damaged
snapshot or spill means a full rebuild, never a wrong view.

Who writes: the leader (or single node) that ships, fenced as its copies are; a remote
truncation deletes the snapshot (and the spills it knows) before it deletes objects (a
snapshot naming deleted copies is never read), and the next round writes a new one.
Spill keys are unique (a random tag), so two writers never overwrite each other's
spills; one left unnamed by a crash or a deposed leader is an orphan for ``archive
reconcile``. Plain functions, no state: thread-safe as the storage is.
"""

from __future__ import annotations

import base64
import json
import os
import time
import zlib
from dataclasses import dataclass, field

import xxhash

from ..errors import CorruptIndexError, RemoteCorruptionError, RemoteObjectNotFoundError
from ..format import naming
from ..format.remote_index import RemoteLogIndexEntry, decode_entries
from .manifest import BATCH_FORMAT, FORMER_FORMAT, format_error
from .metadata import RemoteSegment
from .storage import RemoteStorage

MAGIC = b"TLSNAP1\n"

SPILL_MAX_FACTOR = 16
"""A merge of two spills stops at this many times ``spill_segments`` copies (so no
single write encodes a large part of a very long archive)."""

READ_ATTEMPTS = 3
"""How often a reader reads the snapshot again when a spill it names is gone."""


snapshot_key = naming.snapshot_object_key


def spill_key(log_id: str, base: int, end: int) -> str:
    """A new spill object's key for the copies with base offsets in ``[base, end)``
    (unique: a random tag)."""
    return (
        f"{naming.log_prefix(log_id)}/{SPILLS_DIR}/"
        f"{naming.offset_name(base)}-{naming.offset_name(end)}-{os.urandom(6).hex()}.bin"
    )


SPILLS_DIR = "snapshot-spills"
"""The folder of a log's spill objects, under its prefix."""


def tail_start_after(log_id: str, end: int) -> str:
    """The ``start_after`` key of a listing of the segment objects whose base offset is
    at or above ``end`` (keys sort by base offset: 20-digit names)."""
    return naming.segment_objects_prefix(log_id) + naming.offset_name(end)


@dataclass(frozen=True)
class Spill:
    """One spill object as the snapshot names it: the copies whose base offsets lie in
    ``[base, end)``, ``count`` of them."""

    key: str
    base: int
    end: int
    count: int


@dataclass
class Snapshot:
    """A decoded snapshot (see the module docstring). As :func:`read_snapshot` returns
    it, ``segments`` and ``entries`` include its spills' (those not wholly below the
    start it was given) and ``reads`` counts the objects read to make it."""

    leader_epoch: int | None
    end: int
    segments: list[RemoteSegment]
    entries: list[RemoteLogIndexEntry]
    written_ms: int = 0
    spills: list[Spill] = field(default_factory=list)
    reads: int = 1


def encode_snapshot(snap: Snapshot) -> bytes:
    """The object's bytes for ``snap`` (a spill object: a snapshot without spills)."""
    doc: dict[str, object] = {
        "version": 2 if snap.spills else 1,
        "leader_epoch": snap.leader_epoch,
        "end": snap.end,
        "written_ms": snap.written_ms or int(time.time() * 1000),
        "batch_format": BATCH_FORMAT,
        "segments": [json.loads(s.to_json()) for s in snap.segments],
        "entries": base64.b64encode(b"".join(e.encode() for e in snap.entries)).decode(),
    }
    if snap.spills:
        doc["spills"] = [
            {"key": p.key, "base": p.base, "end": p.end, "count": p.count} for p in snap.spills
        ]
    packed = zlib.compress(json.dumps(doc, separators=(",", ":")).encode(), 6)
    return MAGIC + xxhash.xxh3_64_hexdigest(packed).encode() + b"\n" + packed


def decode_snapshot(data: bytes, key: str) -> Snapshot:
    """The snapshot (or spill) in ``data``, its spills named but not read;
    RemoteCorruptionError naming ``key`` when anything does not check (magic, digest,
    JSON, records, entries, spills); CorruptRecordError
    (:func:`~tiered_log.remote.manifest.format_error`) when it lists copies of another
    batch format than :data:`~tiered_log.remote.manifest.BATCH_FORMAT`."""
    try:
        if not data.startswith(MAGIC):
            raise ValueError("not a snapshot (bad magic)")
        digest, _, packed = data[len(MAGIC) :].partition(b"\n")
        if xxhash.xxh3_64_hexdigest(packed).encode() != digest:
            raise ValueError("its checksum does not match")
        d = json.loads(zlib.decompress(packed))
        if d.get("version") not in (1, 2):
            raise ValueError(f"unknown version {d.get('version')!r}")
        segments = [RemoteSegment.from_dict(s) for s in d["segments"]]
        entries = [e for _, e in decode_entries(base64.b64decode(d["entries"]))]
        spills = [
            Spill(str(p["key"]), int(p["base"]), int(p["end"]), int(p["count"]))
            for p in d.get("spills", [])
        ]
        epoch = d.get("leader_epoch")
        snap = Snapshot(
            None if epoch is None else int(epoch),
            int(d["end"]),
            segments,
            entries,
            int(d.get("written_ms", 0)),
            spills,
        )
        found = d.get("batch_format")
    except (ValueError, KeyError, TypeError, zlib.error, CorruptIndexError) as exc:
        raise RemoteCorruptionError(f"partition snapshot {key} is damaged: {exc}") from exc
    if found is None:
        raise format_error(f"partition snapshot {key} lists segments of {FORMER_FORMAT}")
    if found != BATCH_FORMAT:
        raise format_error(f"partition snapshot {key} lists batches of an unknown format {found!r}")
    return snap


def read_snapshot(storage: RemoteStorage, log_id: str, start: int = -1) -> Snapshot | None:
    """The log's snapshot with the copies of its spills (those ending above ``start``,
    the log start the reader knows) ahead of its own, or None when there is none.
    RemoteCorruptionError when it or a spill is damaged, or a spill it names stays
    missing; RemoteStorageError when the bucket fails."""
    key = snapshot_key(log_id)
    reads = 0
    for _ in range(READ_ATTEMPTS):
        try:
            data = storage.get(key)
        except RemoteObjectNotFoundError:
            return None
        reads += 1
        snap = decode_snapshot(data, key)
        try:
            parts = [read_spill(storage, p) for p in snap.spills if p.end > start]
        except RemoteObjectNotFoundError:
            reads += 1
            continue  # merged or dropped since: the snapshot now names others
        reads += len(parts)
        snap.segments = [s for part in parts for s in part.segments] + snap.segments
        snap.entries = [e for part in parts for e in part.entries] + snap.entries
        snap.reads = reads
        return snap
    raise RemoteCorruptionError(
        f"partition snapshot {key} names spill objects that are missing (read {reads} times)"
    )


def read_spill(storage: RemoteStorage, spill: Spill) -> Snapshot:
    """One spill object, checked against what the snapshot says of it.
    RemoteObjectNotFoundError when it is gone; RemoteCorruptionError when it does not
    check or holds other copies than named."""
    part = decode_snapshot(storage.get(spill.key), spill.key)
    if (
        part.spills
        or len(part.segments) != spill.count
        or any(not spill.base <= s.base_offset < spill.end for s in part.segments)
    ):
        raise RemoteCorruptionError(
            f"partition snapshot spill {spill.key} does not hold the {spill.count} copies "
            f"of [{spill.base}, {spill.end}) the snapshot names"
        )
    return part


def is_spill_key(rest: str) -> bool:
    """Whether ``rest`` (a key below a log's prefix) names a spill object."""
    return rest.startswith(SPILLS_DIR + "/") and rest.endswith(".bin")


__all__ = [
    "SPILLS_DIR",
    "Snapshot",
    "Spill",
    "decode_snapshot",
    "encode_snapshot",
    "is_spill_key",
    "read_snapshot",
    "read_spill",
    "snapshot_key",
    "spill_key",
    "tail_start_after",
]
