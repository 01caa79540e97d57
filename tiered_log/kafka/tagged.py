"""A flexible request without the tagged fields this listener does not know, so that kio
(which refuses them) can decode it, as Kafka's broker skips them.

A flexible version (KIP-482) ends the request header v2 and every structure of the body
(the body itself, each element of an array of structures) with a tagged-field
section; a newer client may put fields there that this version's spec does not name::

    tagged fields = count uvarint | (tag uvarint | size uvarint | size bytes) * count

The other fields of a flexible version, in their declared order (tagged ones are not
among them)::

    bool, int8           1 byte            int16, uint16      2 bytes (big-endian)
    int32                4 bytes           int64, float64     8 bytes
    uuid                 16 bytes
    string, bytes, records   length + 1 uvarint (0: null), then the bytes
    array                count + 1 uvarint (0: null), then each element
    structure            its fields, then its own tagged fields

except the header's ``client_id``, which keeps the old int16-length (nullable) string:
the header v2 is ``api_key int16 | api_version int16 | correlation_id int32 | client_id
| tagged fields``.

:func:`without_unknown_tags` walks a frame by the kio classes' field tables (the same
:func:`~tiered_log.kafka.fields.fields_of` the encoder uses) and copies it, leaving out
every tagged field whose tag the structure's class does not declare (a known one is kept,
its own structure cleaned the same way). It is the slow path: the listener calls it only
after kio refused a frame; a frame it cannot walk raises ValueError, and the connection is
closed as for any undecodable frame.

Pure functions over bytes: safe from any thread.
"""

from __future__ import annotations

import struct
from typing import Any

from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2

from .fields import Field, fields_of, uvarint

_FIXED: dict[str, int] = {
    "bool": 1,
    "int8": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "float64": 8,
    "uuid": 16,
}
"""The fixed sizes of kio's ``kafka_type`` names; the others (string, bytes, records)
are a uvarint length + 1, then the bytes."""

_HEAD = struct.Struct(">hhih")
"""The header v2's fields before its client id's bytes (the last: the id's length)."""


def without_unknown_tags(frame: bytes | bytearray | memoryview, body_class: type[Any]) -> bytes:
    """``frame`` (a flexible request, header v2, without its size prefix) without the
    tagged fields that neither the header nor ``body_class`` (kio's request class of
    the frame's version) declares; bytes after the body are kept as they are.
    ValueError when the frame ends early or a length is impossible."""
    view = memoryview(frame)
    if len(view) < _HEAD.size:
        raise ValueError("a request shorter than its header")
    *_, client_id = _HEAD.unpack_from(view, 0)
    if client_id < -1:
        raise ValueError(f"a client id of {client_id} bytes")
    pos = _HEAD.size + max(client_id, 0)
    _check(view, pos)
    out = bytearray(view[:pos])
    pos = _tags(view, pos, RequestHeaderV2, out)
    pos = _structure(view, pos, body_class, out)
    out += view[pos:]
    return bytes(out)


def _structure(view: memoryview, pos: int, cls: type[Any], out: bytearray) -> int:
    """Copy the structure of ``cls`` at ``pos`` to ``out``; the position after it."""
    for f in fields_of(cls):
        if f.tag is None:
            pos = _value(view, pos, f, out)
    return _tags(view, pos, cls, out)


def _value(view: memoryview, pos: int, f: Field, out: bytearray) -> int:
    """Copy field ``f``'s value at ``pos`` (an array: each element) to ``out``."""
    if not f.array:
        return _element(view, pos, f, out)
    count, at = _read_uvarint(view, pos)
    out += view[pos:at]
    for _ in range(count - 1):  # count 0: a null array
        at = _element(view, at, f, out)
    return at


def _element(view: memoryview, pos: int, f: Field, out: bytearray) -> int:
    if f.nested is not None:
        return _structure(view, pos, f.nested, out)
    size = _FIXED.get(f.kafka_type or "")
    if size is not None:
        end = pos + size
    else:
        length, at = _read_uvarint(view, pos)
        end = at + max(length - 1, 0)
    _check(view, end)
    out += view[pos:end]
    return end


def _tags(view: memoryview, pos: int, cls: type[Any], out: bytearray) -> int:
    """Copy the tagged-field section of ``cls`` at ``pos`` to ``out``, with only the
    tags ``cls`` declares (count rewritten); the position after the section."""
    known = {f.tag: f for f in fields_of(cls) if f.tag is not None}
    count, pos = _read_uvarint(view, pos)
    kept = bytearray()
    n = 0
    for _ in range(count):
        tag, pos = _read_uvarint(view, pos)
        size, pos = _read_uvarint(view, pos)
        end = pos + size
        _check(view, end)
        f = known.get(tag)
        if f is not None:
            payload = bytearray()
            at = _value(view[:end], pos, f, payload)
            payload += view[at:end]
            kept += uvarint(tag) + uvarint(len(payload)) + payload
            n += 1
        pos = end
    out += uvarint(n) + kept
    return pos


def _read_uvarint(view: memoryview, pos: int) -> tuple[int, int]:
    """The unsigned varint at ``pos`` and the position after it (at most 5 bytes, as
    Kafka's lengths and tags are 32-bit)."""
    n = shift = 0
    for at in range(pos, min(pos + 5, len(view))):
        b = view[at]
        n |= (b & 0x7F) << shift
        if b < 0x80:
            return n, at + 1
        shift += 7
    raise ValueError(f"a varint at byte {pos} runs past its 5 bytes or the frame")


def _check(view: memoryview, end: int) -> None:
    if end > len(view):
        raise ValueError(f"the frame ends at byte {len(view)}, before {end}")


__all__ = ["without_unknown_tags"]
