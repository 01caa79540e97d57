"""A topic's metadata, the one definition the single node and the cluster share: its
name and id, partition count, replication settings, creation time and log settings
(:class:`TopicMeta`), and the rules of a topic's name and partition count.

Where it is stored, always in the one JSON form of :meth:`TopicMeta.to_dict`:

- ``<data_dir>/topics/<topic>/topic.json`` (the local topic's commit point,
  :mod:`tiered_log.broker.topics`; indented, :meth:`TopicMeta.to_json`);
- ``topics/<topic>.json`` in the bucket (a lost disk or another cluster restores the topic
  from it);
- the cluster's etcd key ``topics/<topic>`` (:mod:`tiered_log.cluster.metadata`).

JSON::

    {"version": 1, "name": "orders", "topic_id": "9f0c...", "partitions": 6,
     "replication_factor": 3, "min_insync_replicas": 2, "created_ms": 1767225600000,
     "config": {"segment_bytes": 1073741824, ...}}

``config`` is a whole :class:`~tiered_log.config.TopicConfig`. Decoding is strict
(a missing ``name``, ``partitions`` or ``config``, a wrong type, an invalid setting or
another ``version`` raises :class:`~tiered_log.errors.InvalidArgumentError`, one line
naming the field); ``topic_id`` (empty), ``replication_factor`` and
``min_insync_replicas`` (1), ``created_ms`` (0) and ``restored`` (false) may be
missing: a single node's ``topic.json`` written before they were stored lacks them.
Keys it does not know are ignored (a newer writer may add some).

Thread-safety: a TopicMeta is immutable (a frozen dataclass holding a frozen
TopicConfig); every function here is pure: safe from any thread.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from ..config import TopicConfig
from ..errors import InvalidArgumentError, InvalidTopicNameError
from ..json_fields import (
    FORMAT_VERSION,
    check_version,
    int_field,
    mapping,
    required,
    str_field,
)
from ..json_fields import decode as decode_json
from ..topic_config import TOPIC_DEFAULTS

TOPIC_NAME_PATTERN = r"^(?!\.\.?$)[A-Za-z0-9._-]{1,200}$"
"""A valid topic name: 1-200 of ``A-Z a-z 0-9 . _ -``, not ``.`` or ``..`` (what
:func:`validate_topic_name` accepts; the OpenAPI document states it): a topic name is a
directory name."""
TOPIC_NAME_RE = re.compile(TOPIC_NAME_PATTERN)
"""What :func:`validate_topic_name` accepts (whole names: ``fullmatch``); the OpenAPI
document states the same pattern."""
MAX_TOPIC_NAME = 200
MAX_PARTITIONS = 1000


def validate_topic_name(name: object) -> str:
    """Return ``name`` if it is a valid topic name, else raise InvalidTopicNameError.

    1-200 characters of ``A-Z a-z 0-9 . _ -``, and not ``.`` or ``..``: a name is a
    directory name, so nothing that could leave the topics directory is accepted.
    """
    if not isinstance(name, str):
        raise InvalidTopicNameError("topic name must be a string")
    if not TOPIC_NAME_RE.fullmatch(name) or name in (".", ".."):
        shown = name if len(name) <= 40 else name[:40] + "..."
        raise InvalidTopicNameError(
            f"invalid topic name {shown!r}: use 1-{MAX_TOPIC_NAME} letters, digits, '.', '_' "
            "or '-' (not '.' or '..')"
        )
    return name


def validate_partitions(partitions: object) -> int:
    """``partitions`` if it is a partition count a node accepts (1 to
    :data:`MAX_PARTITIONS`), else InvalidArgumentError."""
    if (
        not isinstance(partitions, int)
        or isinstance(partitions, bool)
        or not (1 <= partitions <= MAX_PARTITIONS)
    ):
        raise InvalidArgumentError(f"partitions must be an integer from 1 to {MAX_PARTITIONS}")
    return partitions


def check_growth(name: str, current: int, count: int) -> int:
    """``count`` if topic ``name`` may grow to it from ``current`` partitions (Kafka's
    CreatePartitions: the count only grows), else InvalidArgumentError."""
    validate_partitions(count)
    if count <= current:
        raise InvalidArgumentError(
            f"topic {name!r} has {current} partition(s): the count can only grow "
            f"(asked for {count})"
        )
    return count


@dataclass(frozen=True, slots=True)
class TopicMeta:
    """A topic: what the controller creates, what ``topic.json`` and the bucket hold.

    ``partitions`` >= 1; ``replication_factor`` >= 1 (copies of each partition; 1 on a
    single node); ``min_insync_replicas`` (Kafka's ``min.insync.replicas``): an
    ``acks=all`` write is refused while the ISR is smaller, 1 <= it <=
    ``replication_factor``; ``config``: the log settings; ``topic_id``: the topic's
    unique id (a topic deleted and created again under the same name gets a new one, so
    its remote objects never mix with the old), empty when not assigned;
    ``created_ms``: when this node created its copy (0: not known, as in the cluster's
    metadata); ``restored``: the topic was made again from the bucket (a cluster's
    restore), so its replicas' logs, empty when created, continue from the bucket (see
    :mod:`tiered_log.partition.empty_lead`); stored only when true.
    """

    name: str
    partitions: int
    replication_factor: int = 1
    min_insync_replicas: int = 1
    config: TopicConfig = TOPIC_DEFAULTS
    topic_id: str = ""
    created_ms: int = 0
    restored: bool = False

    def __post_init__(self) -> None:
        validate_topic_name(self.name)
        what = f"topic {self.name}"
        int_field(self.partitions, f"{what} partitions", minimum=1)
        int_field(self.replication_factor, f"{what} replication factor", minimum=1)
        int_field(self.min_insync_replicas, f"{what} min insync replicas", minimum=1)
        if self.min_insync_replicas > self.replication_factor:
            raise InvalidArgumentError(
                f"{what}: min insync replicas {self.min_insync_replicas} is more than the "
                f"replication factor {self.replication_factor}"
            )
        str_field(self.topic_id, f"{what} id")
        int_field(self.created_ms, f"{what} creation time")
        if not isinstance(self.restored, bool):
            raise InvalidArgumentError(f"{what} restored must be true or false")
        if not isinstance(self.config, TopicConfig):
            raise InvalidArgumentError(f"{what} config must be a TopicConfig")

    def to_dict(self) -> dict[str, Any]:
        """The stored JSON object (the module docstring)."""
        return {
            "version": FORMAT_VERSION,
            "name": self.name,
            "topic_id": self.topic_id,
            "partitions": self.partitions,
            "replication_factor": self.replication_factor,
            "min_insync_replicas": self.min_insync_replicas,
            "created_ms": self.created_ms,
            "config": self.config.model_dump(mode="json"),
        } | ({"restored": True} if self.restored else {})

    @classmethod
    def from_dict(cls, obj: object) -> TopicMeta:
        """Decode :meth:`to_dict`'s object (strict: the module docstring)."""
        d = mapping(obj, "topic metadata")
        check_version(d, "topic metadata")
        name = validate_topic_name(required(d, "name", "topic metadata"))
        what = f"topic {name} metadata"

        def count(key: str) -> int:
            return int_field(d.get(key, 1), f"{what} {key}", minimum=1)

        config = mapping(required(d, "config", what), f"{what} config")
        try:
            settings = TopicConfig.model_validate(config)
        except ValidationError as exc:
            err = exc.errors(include_url=False, include_input=False)[0]
            where = ".".join(str(p) for p in err.get("loc", ())) or "config"
            raise InvalidArgumentError(f"{what} config {where}: {err['msg']}") from None
        return cls(
            name=name,
            partitions=int_field(required(d, "partitions", what), f"{what} partitions", minimum=1),
            replication_factor=count("replication_factor"),
            min_insync_replicas=count("min_insync_replicas"),
            config=settings,
            topic_id=str_field(d.get("topic_id", ""), f"{what} topic_id"),
            created_ms=int_field(d.get("created_ms", 0), f"{what} created_ms"),
            restored=d.get("restored", False),
        )

    def to_json(self) -> bytes:
        """:meth:`to_dict` as indented JSON (what ``topic.json`` and the bucket hold)."""
        return json.dumps(self.to_dict(), indent=2, allow_nan=False).encode()

    @classmethod
    def from_json(cls, data: str | bytes) -> TopicMeta:
        return cls.from_dict(decode_json(data, "topic metadata"))

    def as_dict(self) -> dict[str, Any]:
        """The topic as the HTTP API describes it on a single node."""
        return {
            "name": self.name,
            "topic_id": self.topic_id,
            "partitions": self.partitions,
            "created_ms": self.created_ms,
            "config": self.config.model_dump(mode="json"),
        }


__all__ = [
    "MAX_PARTITIONS",
    "MAX_TOPIC_NAME",
    "TOPIC_NAME_PATTERN",
    "TOPIC_NAME_RE",
    "TopicMeta",
    "check_growth",
    "validate_partitions",
    "validate_topic_name",
]
