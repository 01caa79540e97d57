"""What goes over HTTP: JSON request/response models, record <-> JSON, binary framing.

**JSON records.** Record bytes (value, key, header values) are either text or binary.
In a request each byte field is given as text (``"value": "hello"``, UTF-8 encoded by
the server) or as base64 (``"value_b64": "aGVsbG8="``), never both. A value or key may
be JSON ``null`` (a null value is a tombstone, as Kafka's) or empty (``""``): null and
empty are different values and both are kept. In a response every record has the same
shape: ``value`` holds the text when the bytes are valid UTF-8 and ``value_b64`` is
null; otherwise ``value`` is null and ``value_b64`` holds base64; both null is a null
value (an empty value is ``"value": ""``). Keys and header values follow the same rule
(both null = no key / a null header value).

**Binary produce.** ``POST .../records`` with ``Content-Type:
application/vnd.tiered-log.frames`` (:data:`FRAMES`) takes a body of Kafka record
batches (magic 2, as Kafka's protocol defines them; build it with
:func:`tiered_log.format.records.encode_batch`, compressed or not; any base offset will
do). The server verifies every batch
(:func:`tiered_log.format.records.receive_batches`: framing, CRC-32C, the records parse,
values within the topic's append threshold, no transactional or control batch) and
stores it as sent, compression included: only its base offset (and partition leader
epoch) is written in place, outside the CRC; a timestamp of -1 means "the server's
clock". All or nothing: a bad batch is 400 naming it, a value over the topic's append
threshold 413, an empty body 400, more than :data:`MAX_BATCH_RECORDS` records 400; the
body is bounded by ``max_request_bytes`` (413). The answer is the same JSON as the JSON
form's. This is the fast form: no JSON, no base64, no re-encoding.

**Binary fetch.** With ``Accept: application/octet-stream`` the body is the stored
Kafka record batches exactly as stored (decode and verify them with
:func:`tiered_log.format.records.decode_records`, skipping records below the asked
offset: a page is whole batches), and the headers ``X-Next-Offset``,
``X-High-Watermark``, ``X-Log-Start-Offset``, ``X-Record-Count`` carry what the JSON
form has in its body.

Everything here is pure: safe from any thread.
"""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any, Literal, get_type_hints

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    WithJsonSchema,
    create_model,
    field_validator,
    model_validator,
)

from ..bounds import WIRE_FIELDS, PartitionBounds
from ..broker.topic_meta import TOPIC_NAME_PATTERN
from ..errors import (  # the request errors live in tiered_log.errors; re-exported here
    InvalidArgumentError,
    InvalidRequestError,
    RequestTooLargeError,
    ShuttingDownError,
    UnsupportedMediaTypeError,
)
from ..format.record_json import record_to_json
from ..format.records import MAX_HEADERS, ProducerRecord
from ..topic_config import LIMIT_FIELDS, MAX_INT, TopicConfig, no_limit

MAX_OFFSET = (1 << 63) - 1
MAX_BATCH_RECORDS = 10_000
BINARY = "application/octet-stream"
FRAMES = "application/vnd.tiered-log.frames"
"""Content-Type of a binary produce batch: record frames (see the module docstring)."""
JSON = "application/json"

MAX_HEADER_NAME_CHARS = 0xFFFF // 4
"""The longest header name the document promises (characters): its UTF-8 takes at most
4 bytes a character, and the format's limit is 65535 bytes (longer names in bytes: 400)."""

H_NEXT_OFFSET = "X-Next-Offset"
H_HIGH_WATERMARK = "X-High-Watermark"
H_LOG_START = "X-Log-Start-Offset"
H_RECORD_COUNT = "X-Record-Count"


def _b64(s: str, what: str) -> bytes:
    try:
        return base64.b64decode(s.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise ValueError(f"{what} is not valid base64") from None


def _utf8(s: str, what: str) -> bytes:
    try:
        return s.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{what} is not encodable as UTF-8 (lone surrogate?)") from None


class ErrorBody(BaseModel):
    code: str = Field(description="Stable machine-readable error name, e.g. topic_not_found.")
    message: str = Field(description="What went wrong, for people.")
    retriable: bool = Field(False, description="Whether repeating the request later may succeed.")
    details: dict[str, Any] | None = Field(
        None, description="Extra data, e.g. log_start_offset and next_offset for 416."
    )


class ErrorResponse(BaseModel):
    """Every error the API returns has this shape."""

    error: ErrorBody


def error_json(
    code: str, message: str, *, retriable: bool = False, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {"code": code, "message": message, "retriable": retriable}
    if details:
        body["details"] = details
    return {"error": body}


# ---- topics -------------------------------------------------------------------------------


def _like_topic_config(name: str) -> Any:
    """A field of :class:`TopicConfigOverrides` with the bounds and description that
    :class:`TopicConfig` gives ``name``: a request is validated, and documented, by the
    constraints the topic config is. The default None means "not given" (the server's
    topic default applies); it is not shown as a default in the document."""
    info = TopicConfig.model_fields[name]
    bounds: dict[str, Any] = {}
    for meta in info.metadata:
        for attr in ("gt", "ge", "lt", "le"):
            value = getattr(meta, attr, None)
            if value is not None:
                bounds[attr] = value
    return Field(
        None, description=info.description, json_schema_extra=info.json_schema_extra, **bounds
    )


def _overrides_json_schema(schema: dict[str, Any]) -> None:
    """The document's TopicConfigOverrides: no field has a default of its own (an omitted
    one takes the server's), and a limit may also be -1 ("no limit", as null)."""
    for name, prop in schema.get("properties", {}).items():
        prop.pop("default", None)
        if name in LIMIT_FIELDS and "anyOf" in prop:
            prop["anyOf"].insert(1, {"type": "integer", "const": -1})


class _OverridesBase(BaseModel):
    """What :class:`TopicConfigOverrides` adds to the fields it takes from TopicConfig."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_overrides_json_schema)

    @field_validator(*LIMIT_FIELDS, mode="before", check_fields=False)
    @classmethod
    def _minus_one_is_none(cls, v: object) -> object:
        """-1 is "no limit", read as TopicConfig reads it."""
        return no_limit(v)


_OVERRIDE_FIELDS: dict[str, Any] = {
    name: (info.annotation, _like_topic_config(name))
    for name, info in TopicConfig.model_fields.items()
}
_GeneratedOverrides = create_model(
    "_GeneratedOverrides", __base__=_OverridesBase, **_OVERRIDE_FIELDS
)


class TopicConfigOverrides(_GeneratedOverrides):  # type: ignore[misc, valid-type]
    """Per-topic overrides of the server's topic defaults; omitted fields take the default.

    Generated from :class:`~tiered_log.topic_config.TopicConfig`: every one of its
    fields, with its type, bounds and description (the server validates the merged
    config with that model), none restated here. ``null`` or ``-1`` for a flush or
    retention limit means "no limit"; the other fields cannot be null.
    """


class CreateTopicRequest(BaseModel):
    """``POST /v1/topics``."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(
        description="1-200 characters of A-Z a-z 0-9 . _ - (not '.' or '..').",
        json_schema_extra={"pattern": TOPIC_NAME_PATTERN},
    )
    partitions: int = Field(1, ge=1, le=1000, description="Number of partitions, 1-1000.")
    config: TopicConfigOverrides = Field(
        default_factory=lambda: TopicConfigOverrides.model_validate({})
    )
    replication_factor: int | None = Field(
        None,
        ge=1,
        le=100,
        description="Copies of each partition (cluster; default "
        "min(3, live nodes)). A single node takes only 1.",
    )
    min_insync_replicas: int | None = Field(
        None,
        ge=1,
        le=100,
        description="acks=all produce needs this many in-sync replicas "
        "(cluster; default min(2, replication_factor)).",
    )


class AlterTopicRequest(BaseModel):
    """``PATCH /v1/topics/{topic}``: change a topic's settings while it serves."""

    model_config = ConfigDict(extra="forbid")

    config: TopicConfigOverrides = Field(
        default_factory=lambda: TopicConfigOverrides.model_validate({}),
        description="Settings to change (only those given; null or -1 for a limit: no limit).",
    )
    partitions: int | None = Field(
        None,
        ge=1,
        description="Grow the topic to this many partitions (Kafka's CreatePartitions: the "
        "count only grows; existing partitions keep their records, and keys hashed by "
        "producers may go to another partition from then on).",
    )
    delete_config: list[str] = Field(
        default_factory=list,
        description="Settings set back to the server's topic defaults.",
    )
    remote_disable_policy: Literal["retain", "delete"] | None = Field(
        None,
        description="Needed when remote_enabled turns false (Kafka's KIP-950): 'retain' "
        "keeps the remote data readable until retention removes it, 'delete' deletes it.",
    )


class TieringFields(BaseModel):
    """Where a partition's remote tier stands: in ``GET .../bounds`` after the bounds,
    and in each partition of a topic's description."""

    remote_end_offset: int = Field(
        description="One past the last offset in the remote tier (the local start when "
        "nothing is there, or there is no remote tier)."
    )
    copy_lag_bytes: int = Field(description="Bytes of sealed local segments not shipped yet.")
    copy_lag_segments: int = Field(description="Sealed local segments not shipped yet.")


_FIELD_DOC = {k: str(f.description) for k, f in TieringFields.model_fields.items()}


class RemoteDamage(BaseModel):
    """A remote range that cannot be read: its manifest and data object are damaged."""

    id: str
    base_offset: int
    next_offset: int
    problem: str


class PartitionInfo(BaseModel):
    partition: int
    log_start_offset: int
    local_start_offset: int
    high_watermark: int
    next_offset: int
    flushed_offset: int
    remote_end_offset: int = Field(description=_FIELD_DOC["remote_end_offset"])
    copy_lag_bytes: int = Field(description=_FIELD_DOC["copy_lag_bytes"])
    copy_lag_segments: int = Field(description=_FIELD_DOC["copy_lag_segments"])
    remote_damage: list[RemoteDamage] = []
    leader: int | None = Field(
        None, description="Cluster only: the leader's node id (null while the partition has none)."
    )
    leader_epoch: int | None = Field(None, description="Cluster only: the leader epoch.")
    replicas: list[int] | None = Field(None, description="Cluster only: the replicas' nodes.")
    isr: list[int] | None = Field(None, description="Cluster only: the in-sync replicas.")
    lost_offsets: list[list[int]] | None = Field(
        None,
        description="Only when some are: [first, end) ranges of offsets acknowledged "
        "before the local disk was lost that never reached the bucket; never handed out "
        "again (reads there answer 410 data_loss).",
    )
    not_ready: str | None = Field(
        None,
        description="Only while this node has just become the partition's leader and "
        "has not read the bucket yet: why. The offsets shown are its view until then (its "
        "bounds and archived reads answer 503 not_ready meanwhile).",
    )
    anomalies: list[dict[str, Any]] | None = Field(
        None,
        description="Only when some are: the damaged segments this node's scrubber found "
        "in the partition the last time a pass covered it, repaired or not (as GET "
        ".../partitions/{p}/anomalies lists them).",
    )


class TopicSummary(BaseModel):
    name: str
    topic_id: str
    partitions: int
    created_ms: int
    config: TopicConfig
    replication_factor: int | None = Field(None, description="Cluster only.")
    min_insync_replicas: int | None = Field(None, description="Cluster only.")


class TopicDescription(TopicSummary):
    partition_info: list[PartitionInfo]


class TopicList(BaseModel):
    topics: list[TopicSummary]


# ---- records ------------------------------------------------------------------------------


class HeaderIn(BaseModel):
    """One record header: a name and a text or base64 value (both absent = null value)."""

    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"not": {"required": ["value", "value_b64"]}}
    )

    name: str = Field(json_schema_extra={"maxLength": MAX_HEADER_NAME_CHARS})
    value: str | None = None
    value_b64: Annotated[
        str | None,
        WithJsonSchema({"anyOf": [{"type": "string", "format": "byte"}, {"type": "null"}]}),
    ] = None

    @model_validator(mode="after")
    def _one_value(self) -> HeaderIn:
        if self.value is not None and self.value_b64 is not None:
            raise ValueError("give a header's value or value_b64, not both")
        return self

    def to_pair(self) -> tuple[str, bytes | None]:
        _utf8(self.name, "header name")
        if self.value_b64 is not None:
            return self.name, _b64(self.value_b64, "header value_b64")
        if self.value is not None:
            return self.name, _utf8(self.value, "header value")
        return self.name, None


def _headers_json_schema(schema: dict[str, Any]) -> None:
    """The format's limits on a record's headers, in both forms of ``headers``: at most
    :data:`MAX_HEADERS`, names of at most :data:`MAX_HEADER_NAME_CHARS` characters."""
    for branch in schema.get("anyOf", ()):
        if branch.get("type") == "object":
            branch["maxProperties"] = MAX_HEADERS
            branch["propertyNames"] = {"maxLength": MAX_HEADER_NAME_CHARS}
        elif branch.get("type") == "array":
            branch["maxItems"] = MAX_HEADERS


class RecordIn(BaseModel):
    """A record to append. Exactly one of ``value`` (text) / ``value_b64`` (base64, for
    binary values), either of which may be ``null`` (a null value: a tombstone) or
    empty; at most one of ``key`` / ``key_b64`` (absent or ``null``: no key; ``""``: an
    empty key); ``headers`` as an object of text values or a list of
    ``{name, value | value_b64}``; ``timestamp`` in ms since the epoch (default: the
    server's clock)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "oneOf": [
                {"required": ["value"], "not": {"required": ["value_b64"]}},
                {"required": ["value_b64"], "not": {"required": ["value"]}},
            ],
            "not": {"required": ["key", "key_b64"]},
        },
    )

    value: Annotated[
        str | None, WithJsonSchema({"anyOf": [{"type": "string"}, {"type": "null"}]})
    ] = Field(
        None,
        description="The value as text (stored UTF-8 encoded); null for a null value "
        '(a tombstone), distinct from an empty value "".',
    )
    value_b64: Annotated[
        str | None,
        WithJsonSchema({"anyOf": [{"type": "string", "format": "byte"}, {"type": "null"}]}),
    ] = Field(None, description="The value as base64 (binary values); null as for value.")
    key: Annotated[
        str | None, WithJsonSchema({"anyOf": [{"type": "string"}, {"type": "null"}]})
    ] = Field(None, description="The key as text; null or absent: no key.")
    key_b64: Annotated[
        str | None,
        WithJsonSchema({"anyOf": [{"type": "string", "format": "byte"}, {"type": "null"}]}),
    ] = Field(None, description="The key as base64.")
    headers: dict[str, str | None] | list[HeaderIn] | None = Field(
        None,
        description='{"name": "text value", ...} or [{"name": ..., "value_b64": ...}, ...]',
        json_schema_extra=_headers_json_schema,
    )
    timestamp: int | None = Field(
        None, ge=0, le=MAX_INT, description="Milliseconds since the epoch."
    )

    # The base64 fields are decoded once, by to_producer_record (an invalid one is an
    # InvalidArgumentError there, 400 like a validation error), not also while validating.

    @model_validator(mode="after")
    def _one_value(self) -> RecordIn:
        given = self.model_fields_set
        if ("value" in given) == ("value_b64" in given):
            raise ValueError(
                "each record needs exactly one of value or value_b64 (null for a null value)"
            )
        if self.key is not None and self.key_b64 is not None:
            raise ValueError("give a record's key or key_b64, not both")
        return self

    def to_producer_record(self) -> ProducerRecord:
        """The record to append; InvalidArgumentError for undecodable bytes (invalid
        base64, text that is not UTF-8 encodable)."""
        try:
            value: bytes | None = None
            if self.value_b64 is not None:
                value = _b64(self.value_b64, "value_b64")
            elif self.value is not None:
                value = _utf8(self.value, "value")
            key: bytes | None = None
            if self.key_b64 is not None:
                key = _b64(self.key_b64, "key_b64")
            elif self.key is not None:
                key = _utf8(self.key, "key")
            headers: list[tuple[str, bytes | None]] = []
            if isinstance(self.headers, dict):
                for name, hv in self.headers.items():
                    _utf8(name, "header name")
                    headers.append((name, None if hv is None else _utf8(hv, "header value")))
            elif self.headers is not None:
                headers = [h.to_pair() for h in self.headers]
        except ValueError as exc:
            raise InvalidArgumentError(str(exc)) from None
        return ProducerRecord(value, key, tuple(headers), self.timestamp)


class ProduceRequest(BaseModel):
    """A JSON batch of records, appended all-or-nothing, at consecutive offsets."""

    model_config = ConfigDict(extra="forbid")

    records: list[RecordIn] = Field(min_length=1, max_length=MAX_BATCH_RECORDS)


class TopicRecordIn(RecordIn):
    """A record to produce to a topic: a partition's record plus, optionally, the
    partition it must go to."""

    partition: int | None = Field(
        None, ge=0, description="The partition; absent: Kafka's default partitioner picks."
    )


class TopicProduceRequest(BaseModel):
    """A JSON batch of records for a topic, partitioned by the service."""

    model_config = ConfigDict(extra="forbid")

    records: list[TopicRecordIn] = Field(min_length=1, max_length=MAX_BATCH_RECORDS)


class ProduceResponse(BaseModel):
    offsets: list[int] = Field(description="The offset of each record, in request order.")
    first_offset: int
    last_offset: int
    durable: bool = Field(
        description="Whether the records were fsynced before this answer (the topic's "
        "flush policy; always true with flush_messages=1)."
    )


class HeaderOut(BaseModel):
    name: str
    value: str | None = Field(description="The value as text, when it is valid UTF-8.")
    value_b64: str | None = Field(description="The value as base64, when it is not text.")


class RecordOut(BaseModel):
    """A record read. ``value`` and ``value_b64`` both null: a null value (a tombstone);
    an empty value is ``"value": ""``. The same for the key (both null: no key)."""

    offset: int
    timestamp: int
    key: str | None = Field(description="The key as text when it is valid UTF-8.")
    key_b64: str | None = Field(description="The key as base64 when it is not text.")
    value: str | None = Field(
        description="The value as text when it is valid UTF-8 (null with value_b64 null: "
        "a null value)."
    )
    value_b64: str | None = Field(description="The value as base64 when it is not text.")
    headers: list[HeaderOut]


class FetchResponse(BaseModel):
    records: list[RecordOut]
    next_offset: int = Field(description="The offset to fetch next.")
    high_watermark: int = Field(description="One past the last readable record.")
    log_start_offset: int = Field(description="The first offset still in the log.")


class OffsetForTimestamp(BaseModel):
    timestamp: int
    offset: int | None = Field(
        description="First offset with a timestamp >= the given one; "
        "null when there is none (consume from next_offset)."
    )
    next_offset: int


_BOUNDS_HINTS = get_type_hints(PartitionBounds, include_extras=True)
_BOUNDS_FIELDS: dict[str, Any] = {k: (_BOUNDS_HINTS[k], ...) for k in WIRE_FIELDS}
Bounds: type[BaseModel] = create_model(
    "Bounds",
    __doc__="A truncation's answer (``GET .../bounds`` adds to it: BoundsDetail).",
    **_BOUNDS_FIELDS,
)
"""The OpenAPI model of :meth:`PartitionBounds.as_dict
<tiered_log.bounds.PartitionBounds.as_dict>`, generated from the one bounds type (its
wire fields, their descriptions), not restated."""


_DETAIL_FIELDS: dict[str, Any] = {
    **{k: (int, Field(description=d)) for k, d in _FIELD_DOC.items()},
    "lost_offsets": (
        list[list[int]],
        Field(
            description="[first, end) ranges of offsets acknowledged before the local "
            "disk was lost that never reached the bucket (empty when none): reads there "
            "answer 410 data_loss; never handed out again."
        ),
    ),
}
BoundsDetail: type[BaseModel] = create_model(
    "BoundsDetail",
    __base__=Bounds,
    __doc__="The body of ``GET .../bounds``: the bounds, then the remote tier's end and "
    "copy lag, and the lost ranges.",
    **_DETAIL_FIELDS,
)


class TruncateRequest(BaseModel):
    """``POST .../truncate``."""

    model_config = ConfigDict(extra="forbid")

    offset: int = Field(
        ge=0, le=MAX_OFFSET, strict=True, description="Remove every record at and after it."
    )

    @field_validator("offset", mode="before")
    @classmethod
    def _integral_number(cls, v: object) -> object:
        """A JSON number with a zero fraction (``5.0``) is an integer, as JSON Schema
        counts them, when it names one offset exactly (up to 2**53); any other float
        stays refused (truncation removes records: no rounding to a nearby offset)."""
        if isinstance(v, float) and v.is_integer() and abs(v) <= 1 << 53:
            return int(v)
        return v


class DeleteRecordsRequest(BaseModel):
    """``POST .../delete-records``."""

    model_config = ConfigDict(extra="forbid")

    before_offset: int = Field(
        ge=-1,
        le=MAX_OFFSET,
        strict=True,
        description="Delete every record below it: the log start moves up to it (at most "
        "the high watermark; -1: the high watermark, every committed record).",
    )


class Health(BaseModel):
    """``GET /healthz``: liveness only (it needs no token, so it tells nothing else)."""

    status: str = Field(description="ok, or stopping while the server shuts down.")


__all__ = [
    "BINARY",
    "FRAMES",
    "H_HIGH_WATERMARK",
    "H_LOG_START",
    "H_NEXT_OFFSET",
    "H_RECORD_COUNT",
    "JSON",
    "MAX_BATCH_RECORDS",
    "MAX_OFFSET",
    "TOPIC_NAME_PATTERN",
    "AlterTopicRequest",
    "Bounds",
    "BoundsDetail",
    "CreateTopicRequest",
    "ErrorResponse",
    "FetchResponse",
    "InvalidRequestError",
    "ProduceRequest",
    "ProduceResponse",
    "RecordIn",
    "RequestTooLargeError",
    "ShuttingDownError",
    "TieringFields",
    "TopicConfigOverrides",
    "TopicDescription",
    "TopicList",
    "TopicProduceRequest",
    "TopicRecordIn",
    "UnsupportedMediaTypeError",
    "error_json",
    "record_to_json",
]
