"""The manifest of a copied segment (``<base>-<id>.rli``): what it holds, how it is made
from a sealed store, how it is checked, and how a damaged one is made again.

A manifest is::

    one line of JSON: the segment (id, base/next offset, size, first/max timestamp,
                      chunks), "index_bytes", "timeindex_bytes", "batch_format", the
                      codec fields below where they apply, and "checksum"; then b"\n"
    index_bytes       the segment's offset index file, as on local disk
    timeindex_bytes   its time index file
    the rest          ``chunks`` remoteLogIndex entries (the remote-index layout)

``checksum`` is the xxh3-64 hex digest of the header line written without it (the same
JSON, keys in the same order) followed by everything after the line, so the manifest
vouches for itself: a copy or a restore tool that drops the object's metadata drops
nothing the manifest needs. Manifests written before it existed have none; they, like
new ones, must also be *consistent* (:func:`decode_manifest`): the header names the
object key's base offset and id, the entries tile ``[base, next)`` and the data object's
bytes ``[0, size)`` with no gap, and the data object is ``size`` bytes long. A manifest
that fails any check is damaged: it is never believed, and it can be made again from its
data object alone (:func:`repair_manifest`), which verifies every batch.

A segment shipped compressed or encrypted (:mod:`~tiered_log.remote.chunk_codec`) has
chunks of other lengths than its batches: its entries give the *stored* chunks' places,
``size`` stays the segment's own bytes (what retention counts) and the header adds
``stored_size`` (the data object's bytes), ``compression`` (the topic's codec when it
was shipped; each chunk's frame says what it really holds) and, when encrypted,
``encryption``: ``{"key_id": <the KEK's id>, "wrapped_key": <the wrapped data key>}``
(:mod:`~tiered_log.remote.crypto`). Manifests without them are plain archives, read as
they always were. :func:`rewrap_manifest` re-wraps the data key; nothing else changes.

``batch_format`` names the format of the segment's record batches: ``"kafka-v2"``
(:data:`BATCH_FORMAT`, Kafka's record batch v2, the only one this version writes or
reads). A manifest without it was written before that format: its segment holds
tiered_log's former batches (:mod:`~tiered_log.format.legacy`), and
:func:`decode_manifest` refuses it with one line saying so (a
:class:`~tiered_log.format.batch.LegacyFormatError`, a CorruptRecordError, not a damaged
manifest: nothing is repaired, journaled unreadable or deleted because of it), as :func:`check_batch_format`
refuses a chunk or data object whose first batch is not Kafka's.

Pure functions and blocking I/O on the given paths and store; safe from any thread.
"""

from __future__ import annotations

import json
import os
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import xxhash

from ..errors import CorruptIndexError, CorruptRecordError, RemoteCorruptionError
from ..format import naming
from ..format.records import (
    HEADER_SIZE,
    BatchInfo,
    LegacyFormatError,
    batch_header,
    batch_table,
    is_legacy_batch,
)
from ..format.remote_index import RemoteLogIndexEntry, decode_entries
from .chunk_codec import (
    chunk_is_encrypted,
    decode_chunk,
    encode_store,
    frame_codec,
    frame_size,
    is_framed,
)
from .crypto import KeyRing
from .metadata import CopyState, RemoteSegment
from .storage import RemoteStorage

SCAN_WINDOW = 8 << 20
"""Bytes of a store file a copy's scan reads at a time (see :func:`scan_store`)."""

COMMITTED = frozenset((naming.LOG_SUFFIX, naming.RLI_SUFFIX))
"""The objects a copy must have in the bucket to count as complete."""

FORMER_FORMAT = "tiered_log's former 'TB' record batch format"
"""How refusals name the batch format before Kafka's (:mod:`~tiered_log.format.legacy`)."""

BATCH_FORMAT = "kafka-v2"
"""The ``batch_format`` of every manifest this version writes: the segment's batches
are Kafka's record batch v2. A manifest without the field describes a segment of
tiered_log's former batch format (:mod:`~tiered_log.format.legacy`)."""

REIMPORT = (
    "this version reads only Kafka record batches (v2); re-import the records with the "
    "version that wrote them (consume them there, produce them here) into a new bucket "
    "or log id"
)
"""What to do about a bucket of the former format, as the refusals say it."""


def format_error(what: str) -> LegacyFormatError:
    """The one-line refusal of ``what`` (a manifest, chunk or data object of a batch
    format this version does not read: not damage, nothing to repair)."""
    return LegacyFormatError(f"{what}: {REIMPORT}")


def check_batch_format(data: bytes | memoryview, where: str) -> None:
    """Refuse (:func:`format_error`, naming ``where``) the bytes of a chunk or data
    object whose first batch is of tiered_log's former format
    (:func:`~tiered_log.format.batch.is_legacy_batch`). Anything else that is not a
    Kafka v2 batch is damage, left to the checked walks."""
    if is_legacy_batch(data):
        raise format_error(f"{where} holds batches of {FORMER_FORMAT}")


def scan_store(
    path: Path, size: int, base_offset: int, window: int = SCAN_WINDOW
) -> tuple[list[BatchInfo], int]:
    """The verified batches of the first ``size`` bytes of the store file ``path`` and the
    byte after the last one, as :func:`~tiered_log.format.records.batch_table` gives for
    the whole buffer, but read ``window`` bytes at a time: a copy's memory is the window
    (or its largest batch), not the segment. Stops at the first batch that is
    incomplete, damaged or out of sequence."""
    out: list[BatchInfo] = []
    pos = 0
    expect = base_offset
    window = max(window, HEADER_SIZE)  # at least a batch header, to learn a batch's size
    with open(path, "rb") as f:
        fd = f.fileno()
        while pos < size:
            buf = os.pread(fd, min(window, size - pos), pos)
            batches, end = batch_table(buf, expect)
            if end == 0 and len(buf) >= HEADER_SIZE:
                whole = batch_header(buf)[1]  # a batch larger than the window?
                if len(buf) < whole <= size - pos:
                    buf = os.pread(fd, whole, pos)
                    batches, end = batch_table(buf, expect)
            if end == 0:
                break
            out.extend(b._replace(position=b.position + pos) for b in batches)
            expect = batches[-1].next_offset
            pos += end
    return out, pos


def chunk_entries(
    path: Path, size: int, base_offset: int, expected_next: int, object_key: str, chunk_bytes: int
) -> list[RemoteLogIndexEntry]:
    """Cut a sealed store (the first ``size`` bytes of ``path``) into chunks of whole
    batches and describe each one.

    Verifies every batch (:func:`scan_store`); CorruptRecordError if the store is damaged
    anywhere (a damaged segment is never shipped). A chunk ends with the first batch that
    takes it to ``chunk_bytes`` or more.
    """
    batches, end = scan_store(path, size, base_offset)
    nxt = batches[-1].next_offset if batches else base_offset
    if end != size or nxt != expected_next:
        raise CorruptRecordError(
            f"segment {naming.offset_name(base_offset)} is damaged at byte {end}; not shipping it"
        )
    return cut_chunks(batches, end, object_key, chunk_bytes)


def encode_segment(
    path: Path,
    size: int,
    base_offset: int,
    expected_next: int,
    object_key: str,
    chunk_bytes: int,
    codec: str,
    dek: bytes | None,
    out: Path,
) -> list[RemoteLogIndexEntry]:
    """:func:`chunk_entries` (verifying every batch), then each chunk encoded
    (:func:`~tiered_log.remote.chunk_codec.encode_store`) into the file ``out``: the
    data object of a segment shipped compressed or encrypted, and its entries."""
    entries = chunk_entries(path, size, base_offset, expected_next, object_key, chunk_bytes)
    return encode_store(path, entries, out, codec, dek)


def cut_chunks(
    batches: Sequence[BatchInfo], end: int, object_key: str, chunk_bytes: int
) -> list[RemoteLogIndexEntry]:
    """The remoteLogIndex entries of verified ``batches`` (a store's, ending at byte
    ``end``), cut into chunks of whole batches: a chunk ends with the first batch that
    takes it to ``chunk_bytes`` or more."""
    positions = [b.position for b in batches]
    entries: list[RemoteLogIndexEntry] = []
    i, n = 0, len(batches)
    while i < n:
        start = positions[i]
        # The first batch starting at or past start + chunk_bytes begins the next chunk.
        j = max(bisect_left(positions, start + chunk_bytes, i + 1), i + 1)
        stop = positions[j] if j < n else end
        entries.append(
            RemoteLogIndexEntry(
                batches[i].base_offset,
                batches[j - 1].next_offset - 1,
                batches[i].first_timestamp,
                max(b.max_timestamp for b in batches[i:j]),
                stop - start,
                object_key,
                start,
            )
        )
        i = j
    return entries


def clip_entries(entries: Sequence[RemoteLogIndexEntry], end: int) -> list[RemoteLogIndexEntry]:
    """The remote-index entries of ``entries`` that serve offsets below ``end``, the one
    holding ``end - 1`` ending there (its chunk's bytes still hold the records above;
    readers stop at an entry's ``last_offset``). Keeps the index free of overlaps after a
    truncation inside a chunk, whatever is appended at ``end`` later."""
    return [
        e if e.last_offset < end else replace(e, last_offset=end - 1)
        for e in entries
        if e.first_offset < end
    ]


def _checksum(head: dict[str, object], rest: bytes | memoryview) -> str:
    h = xxhash.xxh3_64(json.dumps(head, separators=(",", ":")).encode())
    h.update(b"\n")
    h.update(rest)
    return str(h.hexdigest())


def encode_manifest(
    rs: RemoteSegment,
    entries: Sequence[RemoteLogIndexEntry],
    index: bytes,
    timeindex: bytes,
    *,
    stored_size: int | None = None,
    compression: str | None = None,
    encryption: dict[str, str] | None = None,
) -> bytes:
    """The ``.rli`` object of a copied segment (layout in the module docstring);
    ``stored_size``, ``compression`` and ``encryption`` for a segment shipped encoded."""
    head = json.loads(rs.to_json())
    head["index_bytes"], head["timeindex_bytes"] = len(index), len(timeindex)
    head["batch_format"] = BATCH_FORMAT
    if stored_size is not None:
        head["stored_size"] = stored_size
    if compression is not None:
        head["compression"] = compression
    if encryption is not None:
        head["encryption"] = dict(encryption)
    rest = b"".join([index, timeindex, *(e.encode() for e in entries)])
    return _with_checksum(head, rest)


def _with_checksum(head: dict[str, object], rest: bytes | memoryview) -> bytes:
    head.pop("checksum", None)
    head["checksum"] = _checksum(head, rest)
    return json.dumps(head, separators=(",", ":")).encode() + b"\n" + rest


def _verified_head(blob: bytes, key: str) -> tuple[dict[str, object], bytes]:
    """The header fields (without ``checksum``) and the rest of the manifest ``key``,
    its checksum verified; RemoteCorruptionError naming ``key`` otherwise."""
    head, sep, rest = blob.partition(b"\n")
    try:
        if not sep:
            raise ValueError("no header line")
        fields = json.loads(head)
        if not isinstance(fields, dict):
            raise ValueError("the header is not a JSON object")
        checksum = fields.pop("checksum", None)
        if checksum is not None and checksum != _checksum(fields, rest):
            raise ValueError("its checksum does not match its bytes")
    except ValueError as exc:
        raise RemoteCorruptionError(f"manifest {key} is damaged: {exc}") from exc
    return fields, rest


def manifest_encryption(blob: bytes, key: str) -> tuple[str, str] | None:
    """``(key id, wrapped data key)`` of the manifest ``key`` (its checksum verified),
    None for a segment shipped unencrypted; RemoteCorruptionError if it is damaged."""
    fields, _ = _verified_head(blob, key)
    enc = fields.get("encryption")
    if enc is None:
        return None
    if (
        not isinstance(enc, dict)
        or not isinstance(enc.get("key_id"), str)
        or not isinstance(enc.get("wrapped_key"), str)
    ):
        raise RemoteCorruptionError(f"manifest {key} is damaged: bad encryption field {enc!r}")
    return enc["key_id"], enc["wrapped_key"]


def rewrap_manifest(blob: bytes, key: str, ring: KeyRing) -> bytes | None:
    """The manifest ``key`` with its data key wrapped with ``ring``'s active key, or
    None when it needs no change (unencrypted, or wrapped with the active key already).
    The data key is unwrapped first (KeyUnavailableError naming a key the ring lacks;
    RemoteCorruptionError if the manifest is damaged or the key does not unwrap);
    everything but the ``encryption`` field and the checksum stays as it was."""
    fields, rest = _verified_head(blob, key)
    found = manifest_encryption(blob, key)
    if found is None or found[0] == ring.active_id:
        return None
    dek = ring.unwrap(*found)
    key_id, wrapped = ring.wrap(dek)
    fields["encryption"] = {"key_id": key_id, "wrapped_key": wrapped}
    return _with_checksum(fields, rest)


def check_entries(
    rs: RemoteSegment,
    entries: Sequence[RemoteLogIndexEntry],
    data_key: str,
    object_size: int | None = None,
) -> None:
    """That ``entries`` describe exactly ``rs``'s data object ``data_key``: offsets
    ``[base, next)`` and bytes ``[0, object_size)`` (default ``rs.size``: a plain
    object), each chunk right after the one before. CorruptIndexError naming what does
    not fit."""
    if len(entries) != rs.chunks:
        raise CorruptIndexError(f"it holds {len(entries)} of {rs.chunks} entries")
    offset, pos = rs.base_offset, 0
    for e in entries:
        if (
            e.first_offset != offset
            or e.last_offset < e.first_offset
            or e.position != pos
            or e.data_length <= 0
            or e.object_key != data_key
        ):
            raise CorruptIndexError(
                f"its entry [{e.first_offset}, {e.last_offset}] at byte {e.position} of "
                f"{e.object_key} does not follow offset {offset - 1} at byte {pos} of {data_key}"
            )
        offset, pos = e.last_offset + 1, e.position + e.data_length
    size = rs.size if object_size is None else object_size
    if offset != rs.next_offset or pos != size:
        raise CorruptIndexError(
            f"its entries end at offset {offset} and byte {pos}, its header says "
            f"{rs.next_offset} and {size}"
        )


def decode_manifest(
    blob: bytes, key: str, data_size: int | None = None
) -> tuple[RemoteSegment, list[RemoteLogIndexEntry], bytes, bytes]:
    """``(segment, entries, offset index, time index)`` of the manifest ``key``;
    RemoteCorruptionError (naming ``key``) when it is damaged or inconsistent in any way
    (see the module docstring), or when ``data_size``, the listed size of its data
    object, is not the size it claims; CorruptRecordError (:func:`format_error`) when it
    is whole but describes batches of another format than :data:`BATCH_FORMAT`."""
    parsed = naming.parse_segment_object_key(key)
    head, sep, rest = blob.partition(b"\n")
    try:
        if not sep:
            raise ValueError("no header line")
        fields = json.loads(head)
        if not isinstance(fields, dict):
            raise ValueError("the header is not a JSON object")
        checksum = fields.pop("checksum", None)
        if checksum is not None and checksum != _checksum(fields, rest):
            raise ValueError("its checksum does not match its bytes")
        rs = RemoteSegment.from_dict(fields)
        if parsed is not None and (rs.base_offset, rs.id) != (parsed[0], parsed[1]):
            raise ValueError(f"its header names segment {rs.base_offset}-{rs.id}")
        n1, n2 = int(fields.get("index_bytes", 0)), int(fields.get("timeindex_bytes", 0))
        if n1 < 0 or n2 < 0 or n1 + n2 > len(rest):
            raise ValueError(f"index lengths {n1}, {n2} do not fit in {len(rest)} bytes")
        entries = [e for _, e in decode_entries(memoryview(rest)[n1 + n2 :])]
        data_key = naming.data_key_of(key)
        stored = int(fields.get("stored_size", rs.size))
        check_entries(rs, entries, data_key, stored)
        if data_size is not None and data_size != stored:
            raise ValueError(f"its data object has {data_size} bytes, it says {stored}")
    except (ValueError, TypeError, AttributeError, CorruptIndexError) as exc:
        msg = exc.message if isinstance(exc, CorruptIndexError) else str(exc)
        raise RemoteCorruptionError(f"manifest {key} is damaged: {msg}") from exc
    found = fields.get("batch_format")
    if found is None:
        raise format_error(f"manifest {key} describes a segment of {FORMER_FORMAT}")
    if found != BATCH_FORMAT:
        raise format_error(f"manifest {key} describes batches of an unknown format {found!r}")
    return rs, entries, rest[:n1], rest[n1 : n1 + n2]


def repair_manifest(
    storage: RemoteStorage,
    rli_key: str,
    chunk_bytes: int,
    *,
    data_key: tuple[str, str] | None = None,
    ring: KeyRing | None = None,
) -> tuple[RemoteSegment, list[RemoteLogIndexEntry]]:
    """Make the manifest ``rli_key`` (damaged or missing) again from its data object, and
    put it back.

    Downloads the data object, verifies every batch in one pass over it (as a copy's
    scan does) and cuts it into chunks of ``chunk_bytes``; the new
    manifest carries no index files (``index_bytes`` 0: readers use the entries only).
    A compressed object's frames are decoded and each is one chunk again (the header's
    ``compression`` is the codec its frames use). An encrypted one needs its data key,
    which only its manifest held in the bucket: ``data_key`` is the copy's ``(key id,
    wrapped key)`` as a node kept it (:mod:`~tiered_log.remote.data_keys`), unwrapped
    with ``ring``; the new manifest carries it wrapped as it was. RemoteCorruptionError
    if the data object is damaged too, or encrypted and its key is not at hand (it is
    then kept as it is); KeyUnavailableError if the ring lacks the key that wrapped it;
    CorruptRecordError (:func:`check_batch_format`) if it holds batches of another
    format than Kafka's v2; RemoteStorageError if the bucket fails.
    """
    parsed = naming.parse_segment_object_key(rli_key)
    if parsed is None:
        raise RemoteCorruptionError(f"{rli_key} is not a segment manifest's key")
    base, seg_id, _ = parsed
    object_key = naming.data_key_of(rli_key)
    dek = ring.unwrap(*data_key) if data_key is not None and ring is not None else None
    blob = storage.get(object_key)
    batches, entries, size, codecs = _walk_stored(blob, base, object_key, rli_key, chunk_bytes, dek)
    rs = RemoteSegment(
        seg_id,
        base,
        batches[-1].next_offset,
        size,
        batches[0].first_timestamp,
        max(b.max_timestamp for b in batches),
        CopyState.COPY_FINISHED,
        chunks=len(entries),
    )
    encoded = size != len(blob) or bool(codecs)
    compressed = sorted(codecs - {"none"})
    encrypted = codecs and dek is not None and data_key is not None
    storage.put(
        rli_key,
        encode_manifest(
            rs,
            entries,
            b"",
            b"",
            stored_size=len(blob) if encoded else None,
            compression=(compressed[0] if compressed else "none") if encoded else None,
            encryption=(
                {"key_id": data_key[0], "wrapped_key": data_key[1]}
                if encrypted and data_key is not None
                else None
            ),
        ),
    )
    return rs, entries


def _walk_stored(
    blob: bytes, base: int, data_key: str, rli_key: str, chunk_bytes: int, dek: bytes | None
) -> tuple[list[BatchInfo], list[RemoteLogIndexEntry], int, set[str]]:
    """The verified batches of a data object (positions as in the segment), its
    entries (stored places: a frame is one chunk, a run of plain batches is cut into
    chunks of ``chunk_bytes``), the segment's own bytes and the codecs its frames use
    (empty: no frame). An encrypted frame is read with ``dek``. RemoteCorruptionError
    naming the manifest when any of it does not verify."""
    batches: list[BatchInfo] = []
    entries: list[RemoteLogIndexEntry] = []
    codecs: set[str] = set()
    pos, plain, expect = 0, 0, base
    view = memoryview(blob)
    while pos < len(blob):
        rest = view[pos:]
        if is_framed(rest):
            n = frame_size(rest)
            if chunk_is_encrypted(rest) and dek is None:
                raise RemoteCorruptionError(
                    f"data object {data_key} is encrypted and this node does not keep its "
                    f"data key: its manifest {rli_key} held it and cannot be made again"
                )
            codecs.add(frame_codec(rest))
            try:
                data = decode_chunk(rest[:n], dek, f"{data_key} byte {pos}")
            except RemoteCorruptionError as exc:
                raise RemoteCorruptionError(
                    f"{exc.message}: its damaged manifest {rli_key} cannot be made again"
                ) from exc
            check_batch_format(data, f"data object {data_key} (byte {pos})")
            got, end = batch_table(data, expect)
            if not got or end != len(data):
                break
            entries.append(
                RemoteLogIndexEntry(
                    got[0].base_offset,
                    got[-1].next_offset - 1,
                    got[0].first_timestamp,
                    max(b.max_timestamp for b in got),
                    n,
                    data_key,
                    pos,
                )
            )
            batches.extend(b._replace(position=b.position + plain) for b in got)
            pos, plain, expect = pos + n, plain + len(data), got[-1].next_offset
            continue
        check_batch_format(rest, f"data object {data_key} (byte {pos})")
        got, end = batch_table(rest, expect)
        if not got:
            break
        entries.extend(
            replace(e, position=e.position + pos)
            for e in cut_chunks(got, end, data_key, chunk_bytes)
        )
        batches.extend(b._replace(position=b.position + plain) for b in got)
        pos, plain, expect = pos + end, plain + end, got[-1].next_offset
    if not batches or pos != len(blob):
        raise RemoteCorruptionError(
            f"data object {data_key} does not verify past byte {pos} of {len(blob)}: "
            f"its damaged manifest {rli_key} cannot be made again"
        )
    return batches, entries, plain, codecs
