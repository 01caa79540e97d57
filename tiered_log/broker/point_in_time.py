"""Point-in-time restore: a new topic holding a prefix of another topic's records, made
in the bucket (``tiered-log archive restore``, ``POST /v1/archive/restore``, and
``cluster restore --to-timestamp``).

What the new topic holds, per partition: exactly the source partition's records from its
log start up to (not including) the *restore end* ``E``, with their offsets, timestamps,
keys, values (null ones too), headers and producer fields. ``E`` is the smallest of

    the first offset whose record's timestamp is later than ``to_timestamp``
    ``to_offset``
    the partition's end (its bucket copies' end, or a running service's high watermark)

so with timestamps that grow with offsets (a producer's clock, or LogAppendTime) the
prefix is every record up to the last one at or before ``to_timestamp``. A record batch
that straddles ``E`` is cut inside: its records below ``E`` are written again as a batch
of their own (:func:`~tiered_log.format.batch_encode.rebatch`: same codec, timestamp
type, partition leader epoch, producer id, epoch and base sequence), so nothing after
``E`` is kept and nothing before it is lost. A partition with no record before ``E`` is
restored empty (it starts at the source's log start); when *every* partition is, nothing
is restored: InvalidArgumentError naming the first record's time.

How it is built (only new objects; the source's are read, never changed)::

    for each partition p:
      the source's view       rebuilt from the bucket alone, as a log on an empty disk
                              rebuilds it (read-only: the snapshot, the manifests, the
                              log's meta.json; nothing written)
      copies wholly below E   data object copied byte for byte under the new log's prefix
                              (compressed and encrypted chunks stay as they are: a chunk's
                              cipher does not depend on its key), manifest rewritten with
                              the new keys (same index files, entries, codec, wrapped key)
      the copy holding E      downloaded, decoded (the key ring unwraps its data key), cut
                              at E, and stored again as a new copy as the topic ships one
                              (its ``remote_compression``; encrypted with a new data key
                              under the ring's active key if it was encrypted or the
                              service encrypts)
      the unshipped tail      (a running service) the records from the bucket's end to E,
                              read from the partition's log, stored as one more copy with
                              the topic's codec and the service's ring

Every data object written goes in the new topic's ``remote_storage_class`` (manifests
and ``meta.json`` in the default class), as a shipper stores its copies.
      <new log>/meta.json     log start = the source's, end_offset = E (a log rebuilt from
                              it continues at E), the source's lost ranges below E
    topics/<new>.json         last: the commit point (a new topic id, the source's config)

What the source's content can make fail (nothing to restore, a damaged range, a key the
ring lacks) fails while planning, before anything is written: the copies to cut are read
then. A restore that fails while writing deletes what it wrote, each new log's deletion
marker first (:func:`~tiered_log.remote.reconcile.delete_deleted_log`), so what the
failing bucket leaves is a deleted topic's to ``archive reconcile --delete``; a restore
killed half way leaves logs no metadata names, which reconcile reports
(``unreferenced_log``) and never deletes. Running the restore again makes a new topic id.
A topic replaced by its restore (``replace_topic``) has its old logs marked deleted once
the new metadata is in: their objects are reconcile's to delete.

Blocking I/O, one call at a time per report; safe while services ship to and read from
the bucket (what the source ships meanwhile is past the view taken, or read from the
service's tail).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import struct
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import (
    InvalidArgumentError,
    RemoteCorruptionError,
    RemoteObjectNotFoundError,
    TieredLogError,
    TopicExistsError,
    TopicNotFoundError,
)
from ..format import naming
from ..format.batch import HEADER_SIZE, BatchInfo
from ..format.batch_decode import batch_table, decode_records
from ..format.batch_encode import rebatch
from ..format.remote_index import RemoteLogIndexEntry
from ..remote.chunk_codec import decode_chunk, encode_chunk
from ..remote.crypto import KeyRing, KeyUnavailableError, new_data_key
from ..remote.manifest import cut_chunks, decode_manifest, encode_manifest, manifest_encryption
from ..remote.metadata import CopyState, RemoteMeta, RemoteSegment, new_segment_id
from ..remote.reconcile import delete_deleted_log, mark_log_deleted
from ..remote.recovery import RecoveryTask
from ..remote.state import TierState
from ..remote.storage import RemoteStorage, put_in_class
from ..remote.tier_config import TierConfig
from .topics import TopicMeta, log_id_of, validate_topic_name

log = logging.getLogger(__name__)

TailReader = Callable[[int, int], Iterable[bytes | memoryview]]
"""``(partition, offset)`` -> the stored batches of a running service's partition log,
from the batch holding ``offset`` on up to what consumers may read, in order: the
records not shipped yet. Absent when restoring from the bucket alone."""

_BASE = struct.Struct(">q")
"""A batch's baseOffset (its first 8 bytes)."""


@dataclass
class PartitionRestore:
    """What one partition of the new topic holds and how it was made."""

    partition: int
    log_start_offset: int
    end_offset: int
    """The restore end ``E``: the new partition's records are ``[log_start, E)``."""
    bucket_end: int
    """Where the source's copies in the bucket ended when its view was taken."""
    segments_copied: int = 0
    segments_rewritten: int = 0
    tail_records: int = 0
    """Records taken from the service's unshipped tail (0 from the bucket alone)."""

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class RestoreReport:
    """The outcome (and, during the run, the progress) of a point-in-time restore."""

    topic: str
    as_topic: str
    topic_id: str = ""
    to_timestamp: int | None = None
    to_offset: int | None = None
    partitions: list[PartitionRestore] = field(default_factory=list)
    segments_total: int = 0
    segments_done: int = 0
    bytes_copied: int = 0
    """Bytes of objects copied as they were (data objects and manifests)."""
    bytes_written: int = 0
    """Bytes of objects written anew (cut copies, the tail, their manifests)."""

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["partitions"] = [p.to_json() for p in self.partitions]
        d["records"] = sum(max(0, p.end_offset - p.log_start_offset) for p in self.partitions)
        return d


@dataclass
class _Plan:
    """One partition's restore, decided before anything is written."""

    out: PartitionRestore
    source_log: str
    target_log: str
    copies: list[tuple[RemoteSegment, int]]
    """The source copies the new log takes, each with the end it serves (a clip)."""
    damage: dict[str, str]
    meta: RemoteMeta
    plain: dict[str, tuple[bytes, str | None, bool]] = field(default_factory=dict)
    """Copies already downloaded and decoded while looking for ``E``: by id, their
    batches, codec and whether they were encrypted."""
    tail: bytes = b""
    """The records ``[bucket_end, E)`` of the service's tail, as stored batches."""


def restore_point_in_time(
    storage: RemoteStorage,
    topic: str,
    as_topic: str,
    *,
    to_timestamp: int | None = None,
    to_offset: int | None = None,
    ring: KeyRing | None = None,
    source_meta: TopicMeta | None = None,
    tail: TailReader | None = None,
    tail_codec: str = "none",
    tail_ring: KeyRing | None = None,
    chunk_bytes: int = 1 << 20,
    replace_topic: bool = False,
    progress: Callable[[RestoreReport], None] | None = None,
) -> tuple[RestoreReport, TopicMeta]:
    """Make topic ``as_topic`` in the bucket: ``topic``'s records up to the restore end
    (module docstring). Returns the report and the new topic's metadata (put last, as
    ``topics/<as_topic>.json``); a service then opens it as a topic restored from the
    bucket.

    ``ring``: unwraps the data keys of encrypted copies that must be read (the one cut,
    and those searched for ``to_timestamp``); the cut copy is encrypted again with its
    active key. ``source_meta``: the source's metadata when the bucket may lack it (a
    service's own view); ``tail``/``tail_codec``/``tail_ring``: a running service's
    unshipped records and how its topic ships them. ``replace_topic``: ``as_topic`` is
    ``topic`` itself (a cluster restored to a time): its metadata in the bucket is
    replaced by the new topic's (new id), the source's objects stay as they are.
    ``progress`` is called after each copy written.

    Errors: InvalidArgumentError (neither bound given, a bad name, nothing at or before
    the bounds), TopicNotFoundError (``topic`` unknown to the bucket), TopicExistsError
    (``as_topic`` exists), KeyUnavailableError (an encrypted copy must be read and the
    ring lacks its key), RemoteCorruptionError (a range to restore is damaged),
    RemoteStorageError (the bucket fails).
    """
    if to_timestamp is None and to_offset is None:
        raise InvalidArgumentError("give to_timestamp or to_offset (or both)")
    for name, value in (("to_timestamp", to_timestamp), ("to_offset", to_offset)):
        if value is not None and value < 0:
            raise InvalidArgumentError(f"{name} must not be negative, got {value}")
    validate_topic_name(as_topic)
    src = source_meta if source_meta is not None else _topic_meta(storage, topic)
    if not replace_topic:
        if as_topic == topic:
            raise TopicExistsError(f"topic {as_topic!r} is the topic restored from")
        if _exists(storage, naming.topic_object_key(as_topic)):
            raise TopicExistsError(f"topic {as_topic!r} exists already (in {storage.url})")
    new = TopicMeta(
        as_topic,
        src.partitions,
        config=src.config,
        topic_id=uuid.uuid4().hex,
        created_ms=time.time_ns() // 1_000_000,
    )
    report = RestoreReport(topic, as_topic, new.topic_id, to_timestamp, to_offset)
    plans = [
        _plan(storage, src, new, p, to_timestamp, to_offset, ring, tail, chunk_bytes)
        for p in range(src.partitions)
    ]
    if all(pl.out.end_offset <= pl.out.log_start_offset for pl in plans):
        raise InvalidArgumentError(
            f"topic {topic!r} has no record before the restore point "
            f"({_bounds_text(to_timestamp, to_offset)}){_first_record_text(plans)}: "
            "nothing to restore"
        )
    report.partitions = [pl.out for pl in plans]
    report.segments_total = sum(len(_to_write(pl)) + (1 if pl.tail else 0) for pl in plans)
    form = _Form(
        ring,
        tail_codec,
        tail_ring,
        chunk_bytes,
        new.config.remote_compression,
        new.config.remote_storage_class,
    )
    if progress is not None:
        progress(report)
    try:
        for pl in plans:
            _write(storage, pl, form, report, progress)
        storage.put(naming.topic_object_key(as_topic), new.to_json())
    except BaseException:
        _abandon(storage, new, plans)
        raise
    if replace_topic:  # the source's logs are served no more
        for p in range(src.partitions):
            mark_log_deleted(storage, log_id_of(src, p), src.name, src.topic_id)
    return report, new


def _abandon(storage: RemoteStorage, new: TopicMeta, plans: list[_Plan]) -> None:
    """Delete what a failed restore wrote (best effort: the bucket may be what failed;
    each log's deletion marker goes first, so what is left is reconcile's to delete)."""
    for pl in plans:
        try:
            delete_deleted_log(storage, pl.target_log, new.name, new.topic_id)
        except TieredLogError as exc:
            log.warning("restore of %s: %s not cleaned up: %s", new.name, pl.target_log, exc)


def _bounds_text(to_timestamp: int | None, to_offset: int | None) -> str:
    parts = []
    if to_timestamp is not None:
        parts.append(f"timestamp {to_timestamp}")
    if to_offset is not None:
        parts.append(f"offset {to_offset}")
    return ", ".join(parts)


def _first_record_text(plans: list[_Plan]) -> str:
    """What the error of a restore point before every record says of the source's
    first archived record (partition, offset, timestamp)."""
    firsts = [
        (s.first_timestamp, pl.out.partition, max(s.base_offset, pl.out.log_start_offset))
        for pl in plans
        for s, _ in pl.copies[:1]
    ]
    if not firsts:
        return "; it has no archived record"
    ts, p, off = min(firsts)
    return f"; its first archived record (partition {p}, offset {off}) has timestamp {ts}"


def _exists(storage: RemoteStorage, key: str) -> bool:
    try:
        storage.size(key)
    except RemoteObjectNotFoundError:
        return False
    return True


def _topic_meta(storage: RemoteStorage, topic: str) -> TopicMeta:
    """The source's metadata from ``topics/<topic>.json``; TopicNotFoundError if the
    bucket has none, RemoteCorruptionError if it does not read."""
    key = naming.topic_object_key(validate_topic_name(topic))
    try:
        blob = storage.get(key)
    except RemoteObjectNotFoundError:
        raise TopicNotFoundError(f"topic {topic!r} is not in {storage.url} (no {key})") from None
    try:
        meta = TopicMeta.from_json(blob)
    except (ValueError, KeyError, TypeError) as exc:
        raise RemoteCorruptionError(f"{key} does not read: {exc}") from exc
    if meta.name != topic:
        raise RemoteCorruptionError(f"{key} names topic {meta.name!r}")
    return meta


def _view(
    storage: RemoteStorage, log_id: str, chunk_bytes: int
) -> tuple[list[tuple[RemoteSegment, int]], RemoteMeta, dict[str, str]]:
    """A log's copies in the bucket as a log rebuilt from it would serve them (each with
    its served end), its metadata and its damaged copies; read-only."""
    with tempfile.TemporaryDirectory(prefix="tiered-log-restore-") as tmp:
        (Path(tmp) / naming.REMOTE_DIR).mkdir()
        st = TierState(
            Path(tmp), log_id, storage, TierConfig(chunk_bytes=chunk_bytes), RemoteMeta()
        )
        RecoveryTask(st).rebuild_from_bucket(read_only=True)
        copies = [(s, st.served_end(s)) for s in st.finished]
        return copies, st.meta, dict(st.damage)


def _plan(
    storage: RemoteStorage,
    src: TopicMeta,
    new: TopicMeta,
    p: int,
    to_timestamp: int | None,
    to_offset: int | None,
    ring: KeyRing | None,
    tail: TailReader | None,
    chunk_bytes: int,
) -> _Plan:
    """Find partition ``p``'s restore end (reading only what it must: the copy whose
    max timestamp first passes ``to_timestamp``, then the tail)."""
    source_log = log_id_of(src, p)
    copies, meta, damage = _view(storage, source_log, chunk_bytes)
    start = meta.log_start_offset
    copies = [(s, end) for s, end in copies if end > start]
    bucket_end = max([start, *(end for _, end in copies)])
    limit = to_offset if to_offset is not None else 1 << 62
    plan = _Plan(
        PartitionRestore(p, start, start, bucket_end),
        source_log,
        log_id_of(new, p),
        copies,
        damage,
        meta,
    )
    found: int | None = None
    if to_timestamp is not None:
        for s, end in copies:
            if s.base_offset >= limit:
                break
            if s.max_timestamp <= to_timestamp:
                continue
            _check_readable(plan, s)
            got = _plain(storage, source_log, s, ring)
            plan.plain[s.id] = got
            found = _first_after(got[0], to_timestamp, min(end, limit), start)
            if found is not None:
                break
    end = min(found if found is not None else 1 << 62, limit, bucket_end)
    if found is None and tail is not None and limit > bucket_end:
        end, plan.tail, plan.out.tail_records = _tail(
            tail, p, _past_lost(bucket_end, meta), to_timestamp, limit
        )
    plan.out.end_offset = max(start, end)
    for s, cut in _to_write(plan):  # what cannot be read fails now, before any write
        _check_readable(plan, s)
        if cut != s.next_offset and s.id not in plan.plain:
            plan.plain[s.id] = _plain(storage, source_log, s, ring)
    return plan


def _past_lost(offset: int, meta: RemoteMeta) -> int:
    """``offset``, or the end of the lost range it falls in (never read: 410)."""
    for a, b in meta.lost:
        if a <= offset < b:
            return b
    return offset


def _tail(
    tail: TailReader, p: int, start: int, to_timestamp: int | None, limit: int
) -> tuple[int, bytes, int]:
    """Read the service's tail from ``start``: ``(E, the records [start, E) as stored
    batches, their count)``."""
    parts: list[bytes] = []
    end = start
    found: int | None = None
    for buf in tail(p, start):
        data = bytes(buf)
        if not data:
            break
        batches, _ = _batches(data, "the service's tail")
        for b in batches:  # each batch once, should two reads both hold one
            if b.next_offset > end:
                parts.append(data[b.position : b.position + b.size])
                end = b.next_offset
        if to_timestamp is not None:
            found = _first_after(data, to_timestamp, limit, start)
            if found is not None:
                break
        if end >= limit:
            break
    stop = min(found if found is not None else end, limit)
    if stop <= start:
        return start, b"", 0
    cut = _slice_records(b"".join(parts), start, stop, "the service's tail")
    return stop, cut, stop - start


def _batches(data: bytes, where: str) -> tuple[list[BatchInfo], int]:
    """The verified batches of ``data`` (stored batches from byte 0);
    RemoteCorruptionError naming ``where`` when any does not verify."""
    if len(data) < HEADER_SIZE:
        raise RemoteCorruptionError(f"{where}: {len(data)} bytes hold no record batch")
    batches, end = batch_table(data, _BASE.unpack_from(data, 0)[0])
    if not batches or end != len(data):
        raise RemoteCorruptionError(f"{where}: the record batches do not verify past byte {end}")
    return batches, end


def _first_after(data: bytes, to_timestamp: int, limit: int, lo: int = 0) -> int | None:
    """The first offset in ``[lo, limit)`` of the stored batches ``data`` whose record
    is later than ``to_timestamp`` (only batches whose max timestamp passes it are
    decoded), or None."""
    batches, _ = _batches(data, "a copy")
    for b in batches:
        if b.base_offset >= limit:
            return None
        if b.max_timestamp <= to_timestamp or b.next_offset <= lo:
            continue
        recs, _, _ = decode_records(data, b.position, b.position + b.size)
        for r in recs:
            if r.offset >= limit:
                return None
            if r.offset >= lo and r.timestamp > to_timestamp:
                return r.offset
    return None


def _slice_records(data: bytes, lo: int, hi: int, where: str) -> bytes:
    """The records ``[lo, hi)`` of the stored batches ``data``: whole batches as they
    are; a batch that ``lo`` or ``hi`` cuts is written again holding only its records
    in range (codec, timestamp type, leader epoch and producer fields kept)."""
    batches, _ = _batches(data, where)
    out: list[bytes] = []
    view = memoryview(data)
    for b in batches:
        if b.next_offset <= lo or b.base_offset >= hi:
            continue
        whole = view[b.position : b.position + b.size]
        if lo <= b.base_offset and b.next_offset <= hi:
            out.append(bytes(whole))
            continue
        recs, _, _ = decode_records(data, b.position, b.position + b.size)
        kept = [r for r in recs if lo <= r.offset < hi]
        if kept:
            out.append(rebatch(kept, like=whole[:HEADER_SIZE]))
    return b"".join(out)


def _check_readable(plan: _Plan, s: RemoteSegment) -> None:
    why = plan.damage.get(s.id)
    if s.unreadable or why is not None:
        raise RemoteCorruptionError(
            f"{plan.source_log} offsets [{s.base_offset}, {s.next_offset}) cannot be read "
            f"({why or 'damaged'}); restore to a point before offset {s.base_offset}"
        )


def _keys(log_id: str, s: RemoteSegment) -> tuple[str, str]:
    return (
        naming.segment_object_key(log_id, s.base_offset, s.id, naming.LOG_SUFFIX),
        naming.segment_object_key(log_id, s.base_offset, s.id, naming.RLI_SUFFIX),
    )


def _head(blob: bytes) -> dict[str, Any]:
    head = json.loads(blob.partition(b"\n")[0])
    assert isinstance(head, dict)
    return head


def _plain(
    storage: RemoteStorage, log_id: str, s: RemoteSegment, ring: KeyRing | None
) -> tuple[bytes, str | None, bool]:
    """A copy's batches (every chunk verified and decoded), its codec and whether it
    was encrypted. KeyUnavailableError when it is and ``ring`` cannot unwrap its key."""
    data_key, rli_key = _keys(log_id, s)
    blob = storage.get(rli_key)
    _, entries, _, _ = decode_manifest(blob, rli_key)
    enc = manifest_encryption(blob, rli_key)
    dek: bytes | None = None
    if enc is not None:
        if ring is None:
            raise KeyUnavailableError(
                f"{log_id} offsets [{s.base_offset}, {s.next_offset}) are encrypted with "
                f"key {enc[0]!r}: give the key ring that holds it (--key-file)"
            )
        dek = ring.unwrap(*enc)
    data = memoryview(storage.get(data_key))
    plain = b"".join(
        bytes(
            decode_chunk(
                data[e.position : e.position + e.data_length], dek, f"{data_key} byte {e.position}"
            )
        )
        for e in entries
    )
    codec = _head(blob).get("compression")
    return plain, (str(codec) if codec is not None else None), enc is not None


@dataclass(frozen=True)
class _Form:
    """How the new topic's copies are stored: ``ring`` reads the source's encrypted
    copies (and encrypts the cut one if it was encrypted), ``tail_codec``/``tail_ring``
    are the service's for its topic (``tail_ring``: it encrypts every copy), ``codec``
    and ``storage_class`` the new topic's ``remote_compression`` and
    ``remote_storage_class``."""

    ring: KeyRing | None
    tail_codec: str
    tail_ring: KeyRing | None
    chunk_bytes: int
    codec: str
    storage_class: str


def _write(
    storage: RemoteStorage,
    plan: _Plan,
    form: _Form,
    report: RestoreReport,
    progress: Callable[[RestoreReport], None] | None,
) -> None:
    """Write one partition of the new topic (module docstring), its ``meta.json`` last."""
    e = plan.out.end_offset
    for s, cut in _to_write(plan):
        _check_readable(plan, s)
        if cut == s.next_offset:
            report.bytes_copied += _copy(
                storage, plan.source_log, plan.target_log, s, form.storage_class
            )
            plan.out.segments_copied += 1
        else:
            got = plan.plain.get(s.id) or _plain(storage, plan.source_log, s, form.ring)
            records = _slice_records(got[0], s.base_offset, cut, f"copy {s.id}")
            if records:
                report.bytes_written += _put_segment(
                    storage,
                    plan.target_log,
                    records,
                    form.codec,
                    form.ring if got[2] else form.tail_ring,
                    form.chunk_bytes,
                    form.storage_class,
                )
            plan.out.segments_rewritten += 1
        report.segments_done += 1
        if progress is not None:
            progress(report)
    if plan.tail:
        report.bytes_written += _put_segment(
            storage,
            plan.target_log,
            plan.tail,
            form.tail_codec,
            form.tail_ring,
            form.chunk_bytes,
            form.storage_class,
        )
        report.segments_done += 1
        if progress is not None:
            progress(report)
    meta = RemoteMeta(
        log_start_offset=plan.out.log_start_offset,
        end_offset=e,
        lost=[[a, min(b, e)] for a, b in plan.meta.lost if a < e],
    )
    storage.put(naming.meta_object_key(plan.target_log), meta.to_bytes())


def _to_write(plan: _Plan) -> list[tuple[RemoteSegment, int]]:
    """The source copies the new log is made of, each with where it ends in the new
    log (its served end, or the restore end inside it)."""
    e, start = plan.out.end_offset, plan.out.log_start_offset
    return [
        (s, min(served, e))
        for s, served in plan.copies
        if s.base_offset < e and min(served, e) > start
    ]


def _copy(
    storage: RemoteStorage, source_log: str, target_log: str, s: RemoteSegment, storage_class: str
) -> int:
    """Copy one whole copy under the new log (a new segment id), its data object in
    ``storage_class``; returns the bytes."""
    src_data, src_rli = _keys(source_log, s)
    blob = storage.get(src_rli)
    rs, entries, index, timeindex = decode_manifest(blob, src_rli)
    head = _head(blob)
    data = storage.get(src_data)
    stored = int(head.get("stored_size", rs.size))
    if len(data) != stored:
        raise RemoteCorruptionError(
            f"{src_data} has {len(data)} bytes, its manifest {src_rli} says {stored}"
        )
    new = dataclasses.replace(
        rs, id=new_segment_id(), state=CopyState.COPY_FINISHED, leader_epoch=None
    )
    dst_data, dst_rli = _keys(target_log, new)
    enc = head.get("encryption")
    manifest = encode_manifest(
        new,
        [dataclasses.replace(en, object_key=dst_data) for en in entries],
        index,
        timeindex,
        stored_size=head.get("stored_size"),
        compression=head.get("compression"),
        encryption=dict(enc) if isinstance(enc, dict) else None,
    )
    put_in_class(storage, dst_data, data, storage_class)
    storage.put(dst_rli, manifest)
    return len(data) + len(manifest)


def _put_segment(
    storage: RemoteStorage,
    log_id: str,
    records: bytes,
    codec: str,
    ring: KeyRing | None,
    chunk_bytes: int,
    storage_class: str,
) -> int:
    """Store the batches ``records`` as one new copy of ``log_id`` as a shipper would
    (chunks of ``chunk_bytes``; compressed with ``codec``, encrypted with a new data key
    wrapped by ``ring``'s active key when a ring is given; the data object in
    ``storage_class``); returns the bytes put."""
    batches, end = _batches(records, f"{log_id}: the records to store")
    base = batches[0].base_offset
    seg_id = new_segment_id()
    data_key = naming.segment_object_key(log_id, base, seg_id, naming.LOG_SUFFIX)
    rli_key = naming.segment_object_key(log_id, base, seg_id, naming.RLI_SUFFIX)
    entries = cut_chunks(batches, end, data_key, chunk_bytes)
    dek = new_data_key() if ring is not None else None
    framed = codec != "none" or dek is not None
    stored: list[RemoteLogIndexEntry] = entries
    data = records
    if framed:
        parts: list[bytes] = []
        stored, pos = [], 0
        view = memoryview(records)
        for en in entries:
            blob = encode_chunk(view[en.position : en.position + en.data_length], codec, dek)
            parts.append(blob)
            stored.append(dataclasses.replace(en, position=pos, data_length=len(blob)))
            pos += len(blob)
        data = b"".join(parts)
    rs = RemoteSegment(
        seg_id,
        base,
        batches[-1].next_offset,
        len(records),
        batches[0].first_timestamp,
        max(b.max_timestamp for b in batches),
        CopyState.COPY_FINISHED,
        chunks=len(entries),
    )
    encryption = None
    if ring is not None and dek is not None:
        key_id, wrapped = ring.wrap(dek)
        encryption = {"key_id": key_id, "wrapped_key": wrapped}
    manifest = encode_manifest(
        rs,
        stored,
        b"",
        b"",
        stored_size=len(data) if framed else None,
        compression=codec if framed else None,
        encryption=encryption,
    )
    put_in_class(storage, data_key, data, storage_class)
    storage.put(rli_key, manifest)
    return len(data) + len(manifest)


__all__ = [
    "PartitionRestore",
    "RestoreReport",
    "TailReader",
    "restore_point_in_time",
]
