"""The one per-log configuration, :class:`TopicConfig`, its defaults and the "-1" rule.

A topic's settings (its segment, flush, retention and remote-tier settings) are stated
here once: the local log's :class:`~tiered_log.local.log.LogConfig` and the remote
tier's :class:`~tiered_log.remote.tier_config.TierConfig` take their defaults from
:data:`TOPIC_DEFAULTS` and are derived from a TopicConfig by their ``of`` classmethods;
the service's ``topic_defaults`` and the HTTP API's overrides are TopicConfig's fields.

:func:`no_limit` is the one place of the rule that ``-1`` (as in Kafka) means "no limit"
(``None``) for a limit (:data:`LIMIT_FIELDS`, and the tier's rate limits).

This module is the bottom layer of configuration: it imports pydantic only, so every
layer (local, remote, the tiered log, the service) may import it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

MAX_INT = (1 << 62) - 1
"""The largest integer setting (and timestamp) accepted."""
MAX_SEGMENT_BYTES = (1 << 31) - 1
"""The largest segment: its positions must fit the offset index's 32-bit entries."""
_DAY_MS = 24 * 3600 * 1000
MIN_MESSAGE_BYTES = 61 + 7
"""The smallest ``max_message_bytes``: a batch header (61 bytes) and one empty record."""
DEFAULT_MAX_MESSAGE_BYTES = (8 << 20) + 1024
"""The default ``max_message_bytes``: a batch of one record holding the largest value the
default ``append_threshold`` takes, with room for its key and headers (Kafka's own
default, 1 MiB, would refuse the large values this service takes by default)."""

LIMIT_FIELDS = (
    "segment_ms",
    "flush_messages",
    "flush_ms",
    "local_retention_bytes",
    "local_retention_ms",
    "retention_bytes",
    "retention_ms",
)
"""The TopicConfig fields that are limits: ``None`` (or ``-1`` on input) means none."""

STORAGE_CLASSES = ("STANDARD", "STANDARD_IA", "ONEZONE_IA", "INTELLIGENT_TIERING", "GLACIER_IR")
"""The S3 storage classes a topic's data objects may be stored in: every one is read by a
plain (ranged) GET at once, as the archive's readers, the scrubber and a rebuild read."""
RESTORE_CLASSES = ("GLACIER", "DEEP_ARCHIVE")
"""S3 storage classes refused: an object in them must be restored (hours) before a GET
can read it, so a consumer, the scrubber or a rebuild would fail on it."""


def check_storage_class(value: object) -> str:
    """``value`` as an S3 storage class a topic may use (upper-cased); ValueError (one
    line saying why) for a class that needs a restore before reading, or an unknown one."""
    if not isinstance(value, str):
        raise ValueError(f"an S3 storage class is a string, got {value!r}")
    name = value.strip().upper()
    if name in RESTORE_CLASSES:
        raise ValueError(
            f"{name} is refused: its objects must be restored (hours) before they can be "
            "read, and the archive is read directly by consumers, the scrubber and rebuilds; "
            f"use one of {', '.join(STORAGE_CLASSES)}"
        )
    if name not in STORAGE_CLASSES:
        raise ValueError(
            f"unknown S3 storage class {value!r}; use one of {', '.join(STORAGE_CLASSES)}"
        )
    return name


def no_limit(value: Any) -> Any:
    """``None`` for ``-1`` or ``"-1"`` ("no limit", as in Kafka); any other value as is.

    The one place of that rule: TopicConfig, the API's overrides, LogConfig and
    TierConfig all read a limit through it. A bool is never a limit value (it stays).
    """
    if isinstance(value, bool):
        return value
    if value == -1 or (isinstance(value, str) and value.strip() == "-1"):
        return None
    return value


class TopicConfig(BaseModel):
    """The log settings of one topic (all of its partitions). Immutable.

    The one configuration of a log: :class:`~tiered_log.local.log.LogConfig` (the local
    log's settings) and :class:`~tiered_log.remote.tier_config.TierConfig` (the remote
    tier's) derive from it (``LogConfig.of(topic)``, ``TierConfig.of(topic, ...)``) and
    take their defaults from :data:`TOPIC_DEFAULTS`.

    ``None`` (or ``-1`` on input, as in Kafka) for a flush or retention limit means "no
    limit". ``local_retention_*`` bound what stays on local disk once a segment is in the
    remote tier; ``retention_*`` bound the whole log (both tiers). Without a remote tier
    (``remote_enabled=false``) only ``retention_*`` applies.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    segment_bytes: int = Field(
        64 << 20, ge=64, le=MAX_SEGMENT_BYTES, description="Roll a segment at this size (bytes)."
    )
    segment_ms: int | None = Field(
        7 * _DAY_MS, ge=1, le=MAX_INT, description="Roll a segment at this age (ms); null: never."
    )
    flush_messages: int | None = Field(
        1,
        ge=1,
        le=MAX_INT,
        description="fsync after this many records; 1 (the default) = every append is durable "
        "before it is acknowledged; null: only by flush_ms, segment rolls and shutdown.",
    )
    flush_ms: int | None = Field(
        None, ge=0, le=MAX_INT, description="fsync when this many ms passed since the last fsync."
    )
    local_retention_bytes: int | None = Field(
        None, ge=0, le=MAX_INT, description="Local bytes to keep of segments already copied."
    )
    local_retention_ms: int | None = Field(
        None, ge=0, le=MAX_INT, description="Keep copied segments locally this long (ms)."
    )
    retention_bytes: int | None = Field(
        None, ge=0, le=MAX_INT, description="Total retention (both tiers), bytes; null: forever."
    )
    retention_ms: int | None = Field(
        None, ge=0, le=MAX_INT, description="Total retention (both tiers), ms; null: forever."
    )
    remote_enabled: bool = Field(True, description="Copy sealed segments to the remote tier.")
    remote_delete_on_disable: bool = Field(
        False,
        description="Kafka's remote.log.delete.on.disable: when remote_enabled is turned "
        "off, delete the remote data (true) or keep it readable until retention removes "
        "it (false). Set from the change's remote_disable_policy; what every replica of a "
        "cluster applies.",
    )
    remote_compression: Literal["none", "zstd", "lz4", "gzip"] = Field(
        "zstd",
        description="Compress each chunk of a shipped segment with this codec (a chunk it "
        "does not shrink by 1/16 is stored as it is); reads are unchanged. Applies to "
        "segments shipped from then on.",
    )
    remote_storage_class: str = Field(
        "STANDARD",
        description="The S3 storage class of the data objects shipped from then on ("
        + ", ".join(STORAGE_CLASSES)
        + "); manifests stay STANDARD. GLACIER and DEEP_ARCHIVE are refused (a restore "
        "before every read). A directory store ignores it.",
        json_schema_extra={"enum": list(STORAGE_CLASSES)},
    )
    append_threshold: int = Field(
        8 << 20, ge=1, le=1 << 30, description="Largest record value accepted (bytes)."
    )
    max_message_bytes: int = Field(
        DEFAULT_MAX_MESSAGE_BYTES,
        ge=MIN_MESSAGE_BYTES,
        le=1 << 30,
        description="Kafka's max.message.bytes: the largest record batch a produce may "
        "append, as sent (after the producer's compression); a record given alone (a JSON "
        "record, a raw body) counts as the batch holding it alone. Larger: refused whole "
        "(HTTP 413, Kafka MESSAGE_TOO_LARGE), nothing appended.",
    )
    message_timestamp_type: Literal["CreateTime", "LogAppendTime"] = Field(
        "CreateTime",
        description="Kafka's message.timestamp.type: CreateTime keeps the timestamps the "
        "producer set; LogAppendTime gives every appended batch the broker's clock "
        "(attributes bit 3 and maxTimestamp in the batch header, the CRC recomputed).",
    )

    @field_validator(*LIMIT_FIELDS, mode="before")
    @classmethod
    def _minus_one_is_none(cls, v: object) -> object:
        return no_limit(v)

    @field_validator("remote_storage_class", mode="before")
    @classmethod
    def _storage_class(cls, v: object) -> str:
        return check_storage_class(v)

    def with_overrides(self, overrides: dict[str, Any]) -> TopicConfig:
        """These settings with ``overrides`` applied and validated (ValidationError)."""
        return TopicConfig.model_validate({**self.model_dump(), **overrides})


TOPIC_DEFAULTS = TopicConfig.model_validate({})
"""Every topic setting's default: the one place LogConfig, TierConfig and the service's
``topic_defaults`` take them from."""

__all__ = [
    "DEFAULT_MAX_MESSAGE_BYTES",
    "LIMIT_FIELDS",
    "MAX_INT",
    "MAX_SEGMENT_BYTES",
    "MIN_MESSAGE_BYTES",
    "RESTORE_CLASSES",
    "STORAGE_CLASSES",
    "TOPIC_DEFAULTS",
    "TopicConfig",
    "check_storage_class",
    "no_limit",
]
