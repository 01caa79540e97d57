"""Putting a damaged archived data object back from a good copy of its batches (the
scrubber's repair, :mod:`tiered_log.partition.scrub`).

A copy's manifest (:mod:`~tiered_log.remote.manifest`) stays the source of truth: the
data object is made again *in place*, under the same key, so that every entry of the
manifest and of the leader's remote-index files still names the right bytes. Given the
segment's batches ``[base, next)`` exactly (``size`` bytes, from a local log that still
holds them)::

    plain copy      the data object is those bytes
    encoded copy    chunk by chunk, in the manifest's order: a stored chunk that still
                    decodes to its batches is kept as it is; any other is encoded again
                    (:func:`~tiered_log.remote.chunk_codec.encode_chunk`, the manifest's
                    codec, the segment's own data key unwrapped with the key ring) and
                    must come out exactly as long as the entry says (compression is
                    deterministic; a new nonce changes only bytes, not lengths)

Nothing is written unless the whole object can be made: a copy whose bytes would not
fit its manifest is left as it is, with the reason. Who may call: the partition's leader
(the caller holds its tier's lock and has asked the fence), as for any write to the
log's prefix. Blocking I/O; safe from any thread.
"""

from __future__ import annotations

import json

from ..errors import RemoteCorruptionError, RemoteObjectNotFoundError
from ..format import naming
from ..format.records import batch_table
from .chunk_codec import decode_chunk, encode_chunk
from .crypto import KeyRing
from .manifest import decode_manifest, manifest_encryption
from .storage import RemoteStorage, put_in_class


class RepairError(RemoteCorruptionError):
    """A damaged data object that cannot be made again from the bytes at hand (the
    message says why); nothing was written."""


def rebuild_data_object(
    storage: RemoteStorage,
    rli_key: str,
    batches: bytes | memoryview,
    ring: KeyRing | None,
    storage_class: str | None = None,
) -> int:
    """Make the data object of the copy whose manifest is ``rli_key`` again from
    ``batches`` (the segment's batches, all of them) and put it in place, in
    ``storage_class`` (the topic's, as a copy puts it); the bytes put. RepairError when they do not fit the manifest (other offsets or length, a chunk
    that encodes to another length, an encrypted copy without its key);
    RemoteStorageError if the bucket fails."""
    data_key = naming.data_key_of(rli_key)
    blob = storage.get(rli_key)
    rs, entries, _, _ = decode_manifest(blob, rli_key)
    raw = memoryview(batches)
    if len(raw) != rs.size:
        raise RepairError(f"the good copy is {len(raw)} bytes, the segment {rs.size}")
    got, end = batch_table(raw, rs.base_offset)
    if end != len(raw) or not got or got[-1].next_offset != rs.next_offset:
        raise RepairError(
            f"the good copy does not hold the batches [{rs.base_offset}, {rs.next_offset}) "
            f"whole (it verifies to byte {end} of {len(raw)})"
        )
    head = json.loads(blob.partition(b"\n")[0])
    if "stored_size" not in head:  # a plain copy: the object is the batches
        put_in_class(storage, data_key, raw, storage_class)
        return len(raw)
    starts = {b.base_offset: b.position for b in got}
    starts[rs.next_offset] = len(raw)
    dek: bytes | None = None
    wrapped = manifest_encryption(blob, rli_key)
    if wrapped is not None:
        if ring is None:
            raise RepairError(f"the copy is encrypted with key {wrapped[0]!r} and no key ring")
        dek = ring.unwrap(*wrapped)
    codec = str(head.get("compression", "none"))
    whole: bytes | None
    try:
        whole = storage.get(data_key)
    except RemoteObjectNotFoundError:
        whole = b""
    except RemoteCorruptionError:  # its stored digest fails: read chunk by chunk
        whole = None
    parts: list[bytes] = []
    for e in sorted(entries, key=lambda e: e.position):
        lo, hi = starts.get(e.first_offset), starts.get(e.last_offset + 1)
        if lo is None or hi is None:
            raise RepairError(
                f"chunk [{e.first_offset}, {e.last_offset}] does not begin and end at a batch"
            )
        want = raw[lo:hi]
        stored = (
            whole[e.position : e.position + e.data_length]
            if whole is not None
            else _stored_chunk(storage, data_key, e.position, e.data_length)
        )
        if len(stored) == e.data_length:
            try:
                if decode_chunk(stored, dek, data_key) == want:
                    parts.append(stored)
                    continue
            except RemoteCorruptionError:
                pass
        made = encode_chunk(want, codec, dek)
        if len(made) != e.data_length:
            raise RepairError(
                f"chunk [{e.first_offset}, {e.last_offset}] encodes to {len(made)} bytes, its "
                f"entry says {e.data_length}"
            )
        parts.append(made)
    data = b"".join(parts)
    put_in_class(storage, data_key, data, storage_class)
    return len(data)


def _stored_chunk(storage: RemoteStorage, key: str, pos: int, length: int) -> bytes:
    """The stored bytes of one chunk (a ranged GET), b"" when they cannot be read."""
    try:
        return storage.get(key, pos, pos + length)
    except (RemoteObjectNotFoundError, RemoteCorruptionError):
        return b""


__all__ = ["RepairError", "rebuild_data_object"]
