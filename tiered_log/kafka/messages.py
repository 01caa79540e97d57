"""Kafka protocol messages: the request and response framing, and the bodies through
``kio`` (Python types and codecs generated from Kafka's JSON message specs).

A Kafka connection carries size-prefixed frames (all integers big-endian)::

    request  = size int32 | header | body
    header v1 = api_key int16 | api_version int16 | correlation_id int32
                | client_id nullable string (int16 length, -1: null)
    header v2 = header v1 | tagged fields (uvarint count, then tag/size/bytes each)
    response = size int32 | correlation_id int32 | [tagged fields: header v1] | body

Which header a message uses follows its API version: the "flexible" versions (compact
strings and arrays, tagged fields; e.g. Metadata 9+, Produce 9+, Fetch 12+) take header
v2 and answer with header v1; the others header v1 and v0. ApiVersions answers with
header v0 at every version, so that a client that sent a version the broker does not
know can still read the error and the supported ranges (v0's body).

:data:`APIS` lists what this listener serves: the API keys and version ranges advertised
in ApiVersions. Bodies are decoded to kio's frozen dataclasses (:func:`parse_request`)
and encoded from plain dicts (:func:`encode_response`: :func:`build` turns a dict into
the dataclass of the exact version, dropping fields that version lacks and filling
those it adds with their defaults), so a handler writes one answer for all versions.

Pure functions over bytes; the class caches are filled once per (class) and only read
after: safe from any thread.
"""

from __future__ import annotations

import datetime
import functools
import io
import os
import struct
from dataclasses import MISSING, dataclass
from types import ModuleType
from typing import Any

from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

from ..local.ranges import FetchRanges, FileRange
from .fields import fields_of, read_uvarint, uvarint
from .produce_request import read_produce


@dataclass(frozen=True, slots=True)
class ApiSpec:
    """One API this listener serves: its key, name (kio's module name) and the versions
    it handles; ``advertised_min`` may be lower (versions advertised and refused)."""

    key: int
    name: str
    min_version: int
    max_version: int
    advertised_min: int


PRODUCE = 0
FETCH = 1
LIST_OFFSETS = 2
METADATA = 3
API_VERSIONS = 18

APIS: dict[int, ApiSpec] = {
    PRODUCE: ApiSpec(PRODUCE, "produce", 3, 9, 0),
    FETCH: ApiSpec(FETCH, "fetch", 4, 12, 4),
    LIST_OFFSETS: ApiSpec(LIST_OFFSETS, "list_offsets", 1, 10, 1),
    METADATA: ApiSpec(METADATA, "metadata", 1, 12, 1),
    API_VERSIONS: ApiSpec(API_VERSIONS, "api_versions", 0, 3, 0),
}
"""The served APIs. Produce advertises 0-2 and refuses them (the connection is closed),
as Kafka 4.0 does: librdkafka before 2.10 compresses only when the broker advertises
Produce v0 among its versions."""

_SIZE = struct.Struct(">i")
_HEAD = struct.Struct(">hhi")
_CORRELATION = struct.Struct(">ii")


class BadFrame(Exception):
    """A frame that cannot be answered: the connection is closed (message: why, for the
    one log line)."""


@dataclass(frozen=True, slots=True)
class Request:
    """A decoded request: its header fields, its body (a kio dataclass) and the host it
    came from, as Kafka's broker names a client's (``/`` and its address: what
    DescribeGroups lists as a member's ``client_host``; empty when not known)."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any
    client_host: str = ""


def peek_header(frame: bytes | bytearray | memoryview) -> tuple[int, int, int]:
    """``(api_key, api_version, correlation_id)`` of a request frame (without its size
    prefix); BadFrame if it is shorter than those fields."""
    if len(frame) < _HEAD.size:
        raise BadFrame(f"a request of {len(frame)} bytes is shorter than its header")
    key, version, correlation = _HEAD.unpack_from(frame, 0)
    return key, version, correlation


def is_supported(api_key: int, api_version: int) -> bool:
    """Whether this listener handles ``api_key`` at ``api_version``."""
    spec = APIS.get(api_key)
    return spec is not None and spec.min_version <= api_version <= spec.max_version


@functools.cache
def _module(api_key: int, version: int, kind: EntityType) -> ModuleType:
    return load_payload_module(api_key, version, kind)  # type: ignore[arg-type]


@functools.cache
def request_class(api_key: int, version: int) -> type[Any]:
    """kio's request dataclass of ``api_key`` at ``version``."""
    mod = _module(api_key, version, EntityType.request)
    cls: type[Any] = next(
        v
        for v in vars(mod).values()
        if isinstance(v, type) and getattr(v, "__type__", None) == EntityType.request
    )
    return cls


@functools.cache
def response_class(api_key: int, version: int) -> type[Any]:
    """kio's response dataclass of ``api_key`` at ``version``."""
    mod = _module(api_key, version, EntityType.response)
    cls: type[Any] = next(
        v
        for v in vars(mod).values()
        if isinstance(v, type) and getattr(v, "__type__", None) == EntityType.response
    )
    return cls


def parse_request(frame: bytes | bytearray | memoryview, client_host: str = "") -> Request:
    """Decode a request frame (without its size prefix) of a supported API and version,
    sent from ``client_host`` (:attr:`Request.client_host`); BadFrame when the header or
    the body does not decode (bytes after the body are ignored, as Kafka does; so are
    tagged fields this version's spec does not name, :mod:`tiered_log.kafka.tagged`)."""
    key, version, _ = peek_header(frame)
    if isinstance(frame, bytearray) or (isinstance(frame, memoryview) and not frame.readonly):
        frame = memoryview(frame).toreadonly()  # kio's readers take read-only buffers only
    cls = request_class(key, version)
    flexible = bool(cls.__flexible__)
    head_cls: type[Any] = RequestHeaderV2 if flexible else RequestHeaderV1
    try:
        head: Any
        head, at = entity_reader(head_cls)(frame, 0)
        if key == PRODUCE:  # its records are left in the frame, not copied
            body = read_produce(cls, frame, at)
        else:
            body, _ = entity_reader(cls)(frame, at)
    except Exception as exc:  # kio raises its own and struct/value errors on bad bytes
        if not flexible:
            raise BadFrame(f"undecodable {APIS[key].name} v{version} request: {exc}") from None
        # kio refuses tagged fields it does not know, which Kafka skips (a newer client
        # may send them): decode again without them (the tolerant path, taken only here).
        from .tagged import without_unknown_tags  # it reads this module's field tables

        try:
            clean = without_unknown_tags(frame, cls)
            head, at = entity_reader(head_cls)(clean, 0)
            body, _ = entity_reader(cls)(clean, at)
        except Exception:
            raise BadFrame(f"undecodable {APIS[key].name} v{version} request: {exc}") from None
    # Bytes after the body are ignored, as Kafka's broker ignores them (it reads the
    # fields a version has and no more): librdkafka 2.x's Metadata v12 for every topic
    # carries 3 of them, and closing its connection would fail every topic listing.
    return Request(key, version, head.correlation_id, head.client_id, body, client_host)


def frame_response(api_key: int, version: int, correlation_id: int, body: bytes) -> bytes:
    """The size-prefixed response frame: header v0 (ApiVersions, and non-flexible
    versions) or v1 (flexible: an empty tagged-field section), then ``body``."""
    flexible = api_key != API_VERSIONS and bool(response_class(api_key, version).__flexible__)
    head = _CORRELATION.pack(0, correlation_id)
    size = len(head) - 4 + (1 if flexible else 0) + len(body)
    out = bytearray(_SIZE.pack(size))
    out += head[4:]
    if flexible:
        out += b"\x00"
    out += body
    return bytes(out)


def encode_body(api_key: int, version: int, body: dict[str, Any]) -> bytes:
    """The response body of ``api_key`` at ``version`` built from ``body`` (see
    :func:`build`)."""
    cls = response_class(api_key, version)
    buf = io.BytesIO()
    entity_writer(cls)(buf, build(cls, body))
    return buf.getvalue()


def encode_response(api_key: int, version: int, correlation_id: int, body: dict[str, Any]) -> bytes:
    """:func:`encode_body` in its frame (:func:`frame_response`)."""
    return frame_response(api_key, version, correlation_id, encode_body(api_key, version, body))


Piece = bytes | FileRange
"""A piece of a response frame: bytes, or a range of a file sent as it lies there."""


def encode_fetch_response(version: int, correlation_id: int, body: dict[str, Any]) -> list[Piece]:
    """A Fetch response frame whose partitions' ``records`` may be
    :class:`~tiered_log.local.ranges.FetchRanges` (stored batches as places in files):
    the frame as pieces, the file ranges left in place for ``sendfile``, so no byte of
    a batch in a file passes through this program.

    How: each such ``records`` is encoded as a distinct placeholder (a random marker
    and its index) whose length field precedes it in the encoded bytes (int32 in
    versions before 12, an unsigned varint of length + 1 in the flexible 12); the frame
    is cut at each placeholder, whose length field is replaced by the ranges' size and
    which is replaced by the ranges' parts. ``records`` is the last field of a
    partition before its tagged fields, so nothing else moves. The size prefix of the
    frame counts every piece. The pieces hold the ranges' files open (a
    :class:`~tiered_log.local.ranges.FileRange` holds its descriptor): they close as the
    sender drops the pieces once sent.

    A partition may also carry :data:`EXTRA_TAGS` (v12 only): ``[(tag, bytes), ...]``
    beyond the tags kio knows (a replica fetch's, :mod:`tiered_log.cluster.protocol`),
    each above every tag of Kafka's spec; they are appended to the partition's
    tagged-field section (``uvarint count | (uvarint tag | uvarint size | bytes)*``),
    whose count is rewritten."""
    ranges: list[FetchRanges | bytes] = []
    extra: list[list[tuple[int, bytes]]] = []
    marker = os.urandom(16)
    for topic in body.get("responses", ()):
        for part in topic.get("partitions", ()):
            got = part.get("records")
            tags = part.pop(EXTRA_TAGS, None)
            if tags and version < 12:
                raise ValueError("tagged fields need Fetch v12")
            if isinstance(got, FetchRanges) or tags:
                part["records"] = marker + _INDEX.pack(len(ranges))
                ranges.append(got if isinstance(got, FetchRanges) else bytes(got or b""))
                extra.append(sorted(tags or ()))
    frame = encode_response(FETCH, version, correlation_id, body)
    if not ranges:
        return [frame]
    flexible = version >= 12
    placeholder = len(marker) + _INDEX.size
    head = uvarint(placeholder + 1) if flexible else _SIZE.pack(placeholder)
    pieces: list[Piece] = []
    pos = 0
    first = -1  # where the frame's first piece ends
    for i, got in enumerate(ranges):
        at = frame.find(marker + _INDEX.pack(i), pos)
        if at < 0 or frame[at - len(head) : at] != head:
            raise ValueError("a Fetch response's records placeholder was not found")
        size = got.size if isinstance(got, FetchRanges) else len(got)
        if first < 0:
            first = at - len(head)
        pieces.append(frame[pos : at - len(head)])
        pieces.append(uvarint(size + 1) if flexible else _SIZE.pack(size))
        if isinstance(got, FetchRanges):
            pieces.extend(bytes(p) if isinstance(p, memoryview) else p for p in got.parts)
        else:
            pieces.append(got)
        pos = at + placeholder
        if extra[i]:
            count, q = read_uvarint(frame, pos)
            start = q
            for _ in range(count):  # kio's own tags of the partition, kept as they are
                _, q = read_uvarint(frame, q)
                n, q = read_uvarint(frame, q)
                q += n
            ours = b"".join(uvarint(t) + uvarint(len(v)) + v for t, v in extra[i])
            pieces.append(uvarint(count + len(extra[i])) + frame[start:q] + ours)
            pos = q
    pieces.append(frame[pos:])
    total = sum(p.length if isinstance(p, FileRange) else len(p) for p in pieces)
    pieces[0] = _SIZE.pack(total - 4) + frame[4:first]
    return [p for p in pieces if not isinstance(p, bytes) or p]


EXTRA_TAGS = "_extra_tags"
"""The key of a Fetch answer's partition dict holding tagged fields kio does not know
(see :func:`encode_fetch_response`)."""


_INDEX = struct.Struct(">I")


def _coerce(kafka_type: str | None, value: Any) -> Any:
    if kafka_type == "error_code":
        return ErrorCode(int(value))
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return datetime.timedelta(milliseconds=value)
    if kafka_type == "datetime_i64" and isinstance(value, int):
        if value < 0:
            return None
        return datetime.datetime.fromtimestamp(value / 1000, datetime.UTC)
    return value


def build(cls: type[Any], values: dict[str, Any]) -> Any:
    """kio's dataclass ``cls`` from ``values`` (field name -> value; nested entities as
    dicts, arrays of them as lists of dicts). Names ``cls`` lacks are dropped; fields
    missing from ``values`` take their default (a required one without: ValueError).
    Error codes, durations (ms) and timestamps (ms, -1 for none) are given as ints."""
    kwargs: dict[str, Any] = {}
    for f in fields_of(cls):
        if f.name in values:
            v = values[f.name]
            if f.nested is not None and v is not None:
                v = tuple(build(f.nested, x) for x in v) if f.array else build(f.nested, v)
            elif f.array and v is not None:
                v = tuple(v)
            else:
                v = _coerce(f.kafka_type, v)
        elif f.default is not MISSING:
            continue
        elif f.array:
            v = ()
        else:
            raise ValueError(f"{cls.__name__}.{f.name} is required")
        kwargs[f.name] = v
    return cls(**kwargs)


def millis(value: datetime.timedelta | int) -> int:
    """A duration field of a request in ms (kio decodes them to timedelta)."""
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    return int(value)


__all__ = [
    "APIS",
    "API_VERSIONS",
    "EXTRA_TAGS",
    "FETCH",
    "LIST_OFFSETS",
    "METADATA",
    "PRODUCE",
    "ApiSpec",
    "BadFrame",
    "Piece",
    "Request",
    "build",
    "encode_body",
    "encode_fetch_response",
    "encode_response",
    "frame_response",
    "is_supported",
    "millis",
    "parse_request",
    "peek_header",
    "request_class",
    "response_class",
]
