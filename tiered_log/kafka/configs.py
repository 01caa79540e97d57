"""DescribeConfigs (API key 32, versions 1-4), IncrementalAlterConfigs (44, 0-1) and the
legacy AlterConfigs (33, 0-2): a topic's settings under Kafka's names, so
``kafka-configs.sh``, an AdminClient's ``describe_configs`` /
``incremental_alter_configs`` / ``alter_configs`` and UIs built on them work.

Kafka's names map to the topic's settings (:data:`KAFKA_NAMES`); values travel as strings,
``-1`` meaning "no limit" as in Kafka (``local.retention.*``: ``-2``, Kafka's "as the
total retention", is the same as no local limit here, and is how one is described).
``remote.storage.enable=false`` follows KIP-950: it needs
``remote.log.delete.on.disable=true`` in the same request (the bucket's data is deleted),
else it is refused; ``remote.log.copy.disable=true`` stops copying and keeps the bucket's
data readable (this service's ``remote_disable_policy=retain``). An alter goes the HTTP
API's way (:func:`tiered_log.service.topic_alter.alter_topic`): validated, committed,
applied to every open partition, in a cluster through the metadata store.

AlterConfigs sends a resource's whole set of dynamic configs: as in Kafka, the keys
given are set and every other one returns to its default (:func:`legacy_changes`; the
same change path, ``validate_only`` included). Kafka's answers: a resource named twice,
a key given twice or with a null value is INVALID_REQUEST; a missing topic
UNKNOWN_TOPIC_OR_PARTITION; an unknown key or a bad value INVALID_CONFIG naming it.

A BROKER resource named by this node's id is described as Kafka describes a broker
(:func:`broker_described`): the topic defaults under their broker names
(``log.retention.ms``, ``log.segment.bytes``, ``message.max.bytes``...), ``broker.id``,
``num.partitions``, ``default.replication.factor``, ``auto.create.topics.enable`` and
``log.dirs``, every one read-only (they come from the service's settings file, Kafka's
``server.properties``): ``STATIC_BROKER_CONFIG`` when set there, ``DEFAULT_CONFIG``
otherwise. The empty name (the cluster-wide dynamic defaults) has none; another
broker's id is INVALID_REQUEST, as Kafka answers it. Its legacy alter is answered as Kafka answers one of a
config that cannot be updated dynamically (INVALID_CONFIG naming the keys; an empty set
changes nothing and succeeds); its incremental alter, and any other resource type, is
refused with INVALID_REQUEST. An unknown key or a bad value: INVALID_CONFIG naming it.

Concurrency: coroutines of the listener's loop; the change and the description run in
worker threads.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from ..errors import InvalidArgumentError, TieredLogError
from ..service.wire import CreateTopicRequest
from ..topic_config import TopicConfig
from .backend import Backend
from .errors import error_code, error_message
from .messages import Request

DESCRIBE_CONFIGS = 32
ALTER_CONFIGS = 33
INCREMENTAL_ALTER_CONFIGS = 44
CONFIG_APIS: dict[int, tuple[str, int, int]] = {
    DESCRIBE_CONFIGS: ("describe_configs", 1, 4),
    ALTER_CONFIGS: ("alter_configs", 0, 2),
    INCREMENTAL_ALTER_CONFIGS: ("incremental_alter_configs", 0, 1),
}
"""The configuration APIs served: key -> (kio's module name, first and last version)."""

TOPIC = 2
BROKER = 4
SET, DELETE = 0, 1
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5
INT = 3
BOOLEAN, STRING, LONG = 1, 2, 5
NEVER = (1 << 63) - 1
"""How a setting without a limit that Kafka writes as Long.MAX_VALUE is described."""


@dataclass(frozen=True, slots=True)
class KafkaName:
    """One Kafka topic config and the setting it is: its type (for DescribeConfigs v3+)
    and the value describing "no limit" (None: the setting always has one)."""

    setting: str
    kind: int
    unlimited: str | None = "-1"


KAFKA_NAMES: dict[str, KafkaName] = {
    "retention.ms": KafkaName("retention_ms", LONG),
    "retention.bytes": KafkaName("retention_bytes", LONG),
    "local.retention.ms": KafkaName("local_retention_ms", LONG, "-2"),
    "local.retention.bytes": KafkaName("local_retention_bytes", LONG, "-2"),
    "segment.bytes": KafkaName("segment_bytes", LONG, None),
    "segment.ms": KafkaName("segment_ms", LONG, str(NEVER)),
    "flush.messages": KafkaName("flush_messages", LONG, str(NEVER)),
    "flush.ms": KafkaName("flush_ms", LONG, str(NEVER)),
    "max.message.bytes": KafkaName("max_message_bytes", LONG, None),
    "message.timestamp.type": KafkaName("message_timestamp_type", STRING, None),
    "remote.storage.enable": KafkaName("remote_enabled", BOOLEAN, None),
}
"""Kafka's topic config names and the settings they are."""
BROKER_NAMES: dict[str, str] = {
    "retention.ms": "log.retention.ms",
    "retention.bytes": "log.retention.bytes",
    "local.retention.ms": "log.local.retention.ms",
    "local.retention.bytes": "log.local.retention.bytes",
    "segment.bytes": "log.segment.bytes",
    "segment.ms": "log.roll.ms",
    "flush.messages": "log.flush.interval.messages",
    "flush.ms": "log.flush.interval.ms",
    "max.message.bytes": "message.max.bytes",
    "message.timestamp.type": "log.message.timestamp.type",
    "remote.storage.enable": "remote.log.storage.system.enable",
    "cleanup.policy": "log.cleanup.policy",
    "compression.type": "compression.type",
}
"""Each topic config's broker-wide name (the default a broker gives its topics), as
Kafka's broker names them."""
REMOTE_DELETE_ON_DISABLE = "remote.log.delete.on.disable"
REMOTE_COPY_DISABLE = "remote.log.copy.disable"
FIXED: dict[str, tuple[str, str]] = {
    "cleanup.policy": ("delete", "no compaction here"),
    "compression.type": ("producer", "batches are stored as their producer compressed them"),
}
"""Kafka topic configs with the one value this broker has, and why: described with it,
accepted when a client sets it (nothing changes; tools send them at creation, and a
legacy alter sends back what DescribeConfigs listed), refused with any other value."""


def check_fixed(name: str, raw: str | None) -> None:
    """Nothing when ``raw`` is the one value of fixed config ``name``; else
    InvalidArgumentError naming it and why it is the only one."""
    value, why = FIXED[name]
    if (raw or "").strip().lower() != value:
        raise InvalidArgumentError(f"{name}: {raw!r} is not supported: only {value!r} ({why})")


def _entry(name: str, text: str, kind: int, source: int, read_only: bool) -> dict[str, Any]:
    """One DescribeConfigs entry (its fields for every version)."""
    return {
        "name": name,
        "value": text,
        "read_only": read_only,
        "config_source": source,
        "is_sensitive": False,
        "synonyms": (),
        "config_type": kind,
        "documentation": None,
        "is_default": source == DEFAULT_CONFIG,
    }


def _text(k: KafkaName, value: object) -> str:
    """A setting's value as Kafka's clients read it (``k.unlimited`` for no limit)."""
    if value is None:
        return k.unlimited or "-1"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def described(config: TopicConfig, defaults: TopicConfig, keys: Any) -> list[dict[str, Any]]:
    """The DescribeConfigs entries of ``config`` (``keys``: the names asked for, None or
    empty: all), each marked dynamic when it differs from the server's default."""
    wanted = set(keys) if keys else None
    out = []
    for name, k in KAFKA_NAMES.items():
        if wanted is None or name in wanted:
            value = getattr(config, k.setting)
            dynamic = value != getattr(defaults, k.setting)
            source = DYNAMIC_TOPIC_CONFIG if dynamic else DEFAULT_CONFIG
            out.append(_entry(name, _text(k, value), k.kind, source, False))
    for name, (value, _) in FIXED.items():
        if wanted is None or name in wanted:
            out.append(_entry(name, value, STRING, DEFAULT_CONFIG, False))
    return out


DEFAULT_PARTITIONS = int(CreateTopicRequest.model_fields["partitions"].default)
"""The partitions a topic gets when CreateTopics asks for the default (-1), as the HTTP
API's topic creation."""


def default_replication_factor(live_nodes: int) -> int:
    """The replication factor a topic gets when CreateTopics asks for the default (-1):
    as many copies as live nodes, up to 3 (one on a single node)."""
    return max(1, min(3, live_nodes))


@dataclass(frozen=True, slots=True)
class BrokerFacts:
    """What describes a broker besides its topic defaults."""

    node_id: int
    num_partitions: int
    default_replication_factor: int
    auto_create_topics: bool
    log_dirs: str


def broker_described(facts: BrokerFacts, defaults: TopicConfig, keys: Any) -> list[dict[str, Any]]:
    """The DescribeConfigs entries of this broker (see the module docstring; ``keys`` as
    :func:`described`'s), all read-only: a topic default is ``STATIC_BROKER_CONFIG`` when
    the service's settings changed it, else ``DEFAULT_CONFIG``."""
    wanted = set(keys) if keys else None
    out = []
    base = TopicConfig()
    for topic_name, name in BROKER_NAMES.items():
        if wanted is not None and name not in wanted:
            continue
        k = KAFKA_NAMES.get(topic_name)
        if k is None:
            out.append(_entry(name, FIXED[topic_name][0], STRING, DEFAULT_CONFIG, True))
            continue
        value = getattr(defaults, k.setting)
        source = STATIC_BROKER_CONFIG if value != getattr(base, k.setting) else DEFAULT_CONFIG
        out.append(_entry(name, _text(k, value), k.kind, source, True))
    facts_of = {
        "broker.id": (str(facts.node_id), INT),
        "num.partitions": (str(facts.num_partitions), INT),
        "default.replication.factor": (str(facts.default_replication_factor), INT),
        "auto.create.topics.enable": (
            "true" if facts.auto_create_topics else "false",
            BOOLEAN,
        ),
        "log.dirs": (facts.log_dirs, STRING),
    }
    for name, (text, kind) in facts_of.items():
        if wanted is None or name in wanted:
            out.append(_entry(name, text, kind, STATIC_BROKER_CONFIG, True))
    return out


def setting_value(name: str, raw: str | None) -> Any:
    """The setting's value of Kafka config ``name`` given as ``raw`` (InvalidArgumentError
    naming it when it is not one)."""
    k = KAFKA_NAMES[name]
    if raw is None:
        raise InvalidArgumentError(f"{name}: a value is needed")
    text = raw.strip()
    if k.kind == BOOLEAN:
        if text.lower() not in ("true", "false"):
            raise InvalidArgumentError(f"{name}: {raw!r} is not true or false")
        return text.lower() == "true"
    if k.kind == STRING:
        return text
    try:
        value = int(text)
    except ValueError:
        raise InvalidArgumentError(f"{name}: {raw!r} is not an integer") from None
    if value in (-1, -2) and k.unlimited is not None:
        return None
    if value == NEVER and k.unlimited == str(NEVER):
        return None
    return value


def kafka_changes(configs: Any) -> tuple[dict[str, Any], list[str], str | None]:
    """An IncrementalAlterConfigs resource's ``configs`` as ``(changes, reset,
    remote_disable_policy)`` of the topic's settings; InvalidArgumentError naming the
    first key that is unknown, has an operation other than SET or DELETE, or a bad
    value."""
    return _changes((c.name, int(c.config_operation), c.value) for c in configs)


def legacy_changes(configs: Any) -> tuple[dict[str, Any], list[str], str | None]:
    """An AlterConfigs resource's ``configs`` (the whole set of the topic's dynamic
    configs) as :func:`kafka_changes` answers them: each given key set, every other
    setting under a Kafka name (:data:`KAFKA_NAMES`) back to the server's default, as
    Kafka's legacy alter replaces a topic's dynamic configs. Settings without a Kafka
    name are not a Kafka client's to see, so they are kept. InvalidRequest for a key
    given twice or without a value (Kafka: "Null value not supported"), else as
    :func:`kafka_changes`."""
    names = [c.name for c in configs]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise InvalidRequest(f"each config may appear once: {', '.join(twice)} appear twice")
    nulls = [c.name for c in configs if c.value is None]
    if nulls:
        raise InvalidRequest(f"Null value not supported for topic configs: {', '.join(nulls)}")
    changes, _, policy = _changes((c.name, SET, c.value) for c in configs)
    reset = [k.setting for k in KAFKA_NAMES.values() if k.setting not in changes]
    return changes, reset, policy


def _changes(
    configs: Iterable[tuple[str, int, str | None]],
) -> tuple[dict[str, Any], list[str], str | None]:
    """``(name, operation, value)`` triples as :func:`kafka_changes` answers them."""
    changes: dict[str, Any] = {}
    reset: list[str] = []
    policy: str | None = None
    for name, op, value in configs:
        if op not in (SET, DELETE):
            raise InvalidArgumentError(f"{name}: only SET and DELETE operations apply")
        if name in (REMOTE_DELETE_ON_DISABLE, REMOTE_COPY_DISABLE):
            on = op == SET and _flag(name, value)
            if on and name == REMOTE_DELETE_ON_DISABLE:
                policy = "delete"
            elif on:
                policy = policy or "retain"
                changes["remote_enabled"] = False
            continue
        if name in FIXED:
            if op == SET:
                check_fixed(name, value)
            continue
        k = KAFKA_NAMES.get(name)
        if k is None:
            raise InvalidArgumentError(
                f"{name}: not a topic config this broker supports; it supports "
                f"{', '.join(KAFKA_NAMES)}, {REMOTE_DELETE_ON_DISABLE}, {REMOTE_COPY_DISABLE}, "
                f"{', '.join(FIXED)}"
            )
        if op == DELETE:
            reset.append(k.setting)
        else:
            changes[k.setting] = setting_value(name, value)
    if changes.get("remote_enabled") is False and policy is None:
        raise InvalidArgumentError(
            f"remote.storage.enable=false needs {REMOTE_DELETE_ON_DISABLE}=true (the remote "
            f"data is deleted) or {REMOTE_COPY_DISABLE}=true (copying stops, the remote data "
            "stays readable) in the same request"
        )
    return changes, reset, policy


_SETTING_WORD = re.compile(r"\b(" + "|".join(k.setting for k in KAFKA_NAMES.values()) + r")\b")
_KAFKA_NAME = {k.setting: name for name, k in KAFKA_NAMES.items()}


def kafka_message(message: str) -> str:
    """``message`` (the service's, naming its settings) with each setting named as Kafka
    names it (``segment_bytes`` -> ``segment.bytes``)."""
    return _SETTING_WORD.sub(lambda m: _KAFKA_NAME[m.group(1)], message)


def _flag(name: str, raw: str | None) -> bool:
    if raw is None or raw.strip().lower() not in ("true", "false"):
        raise InvalidArgumentError(f"{name}: {raw!r} is not true or false")
    return raw.strip().lower() == "true"


class InvalidRequest(Exception):
    """A request Kafka answers INVALID_REQUEST (a config given twice, or without a
    value, in a legacy alter); its message is the answer's."""


class ConfigHandlers:
    """DescribeConfigs and IncrementalAlterConfigs over one backend. Event-loop thread
    only."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def handlers(self) -> dict[int, Callable[[Request], Awaitable[dict[str, Any]]]]:
        """The handler of each configuration API key."""
        return {
            DESCRIBE_CONFIGS: self.describe_configs,
            ALTER_CONFIGS: self.alter_configs,
            INCREMENTAL_ALTER_CONFIGS: self.incremental_alter_configs,
        }

    def _topic_config(self, name: str) -> TopicConfig:
        state = self.backend.state
        cluster = state.cluster
        meta = cluster.topic_meta(name) if cluster is not None else None
        if meta is not None:
            return TopicConfig.model_validate(meta.config)
        return state.topics.get(name).meta.config

    async def describe_configs(self, req: Request) -> dict[str, Any]:
        defaults = self.backend.state.settings.topic_defaults
        results = []
        for res in req.body.resources:
            r: dict[str, Any] = {
                "error_code": ErrorCode.none,
                "error_message": None,
                "resource_type": res.resource_type,
                "resource_name": res.resource_name,
                "configs": (),
            }
            if res.resource_type == TOPIC:
                try:
                    config = await asyncio.to_thread(self._topic_config, res.resource_name)
                    r["configs"] = described(config, defaults, res.configuration_keys)
                except TieredLogError as exc:
                    r["error_code"], r["error_message"] = error_code(exc), error_message(exc)
            elif res.resource_type == BROKER:
                me = str(self.backend.node_id)
                if res.resource_name == me:
                    facts = await self._broker_facts()
                    r["configs"] = broker_described(facts, defaults, res.configuration_keys)
                elif res.resource_name:  # "": the cluster's dynamic defaults, none here
                    r["error_code"] = ErrorCode.invalid_request
                    r["error_message"] = (
                        f"Unexpected broker id, expected {me} or empty string, but "
                        f"received {res.resource_name}"
                    )
            else:
                r["error_code"] = ErrorCode.invalid_request
                r["error_message"] = "only topic (and broker) configs can be described"
            results.append(r)
        return {"throttle_time": 0, "results": results}

    async def _broker_facts(self) -> BrokerFacts:
        """This broker's facts for :func:`broker_described`: its id, CreateTopics'
        defaults (the replication factor a topic gets with -1: one copy on a single
        node, else as many as the live nodes up to 3), auto-creation, data directory."""
        state = self.backend.state
        cluster = state.cluster
        live = (
            await asyncio.to_thread(lambda: len(cluster.membership.live_nodes()))
            if cluster is not None
            else 1
        )
        return BrokerFacts(
            node_id=self.backend.node_id,
            num_partitions=DEFAULT_PARTITIONS,
            default_replication_factor=default_replication_factor(live),
            auto_create_topics=state.settings.kafka_auto_create_topics,
            log_dirs=str(state.settings.data_dir.resolve()),
        )

    async def incremental_alter_configs(self, req: Request) -> dict[str, Any]:
        body = req.body
        out = []
        for res in body.resources:
            r = _resource_answer(res)
            if res.resource_type != TOPIC:
                r["error_code"] = ErrorCode.invalid_request
                r["error_message"] = "only topic configs can be altered"
            else:
                await self._alter(r, kafka_changes, res.configs, bool(body.validate_only))
            out.append(r)
        return {"throttle_time": 0, "responses": out}

    async def alter_configs(self, req: Request) -> dict[str, Any]:
        """The legacy whole-set alter (see the module docstring)."""
        body = req.body
        keys = [(int(res.resource_type), res.resource_name) for res in body.resources]
        out = []
        for res, key in zip(body.resources, keys, strict=True):
            r = _resource_answer(res)
            kind, name = key
            if keys.count(key) > 1:
                r["error_code"] = ErrorCode.invalid_request
                r["error_message"] = "Each resource must appear at most once."
            elif kind == TOPIC:
                await self._alter(r, legacy_changes, res.configs, bool(body.validate_only))
            elif kind == BROKER:
                r["error_code"], r["error_message"] = _broker_alter(name, res.configs)
            else:
                r["error_code"] = ErrorCode.invalid_request
                r["error_message"] = f"AlterConfigs does not support resource type {kind}"
            out.append(r)
        return {"throttle_time": 0, "responses": out}

    async def _alter(
        self,
        r: dict[str, Any],
        changes_of: Callable[[Any], tuple[dict[str, Any], list[str], str | None]],
        configs: Any,
        validate_only: bool,
    ) -> None:
        """Change a topic's settings as ``changes_of(configs)`` says, through the HTTP
        API's path; the outcome into its answer ``r``."""
        from ..service.topic_alter import alter_topic  # the service's one path

        try:
            changes, reset, policy = changes_of(configs)
            await asyncio.to_thread(
                alter_topic,
                self.backend.state,
                r["resource_name"],
                changes,
                reset,
                remote_disable_policy=policy,
                validate_only=validate_only,
            )
        except InvalidRequest as exc:
            r["error_code"], r["error_message"] = ErrorCode.invalid_request, str(exc)
        except InvalidArgumentError as exc:
            r["error_code"] = ErrorCode.invalid_config
            r["error_message"] = kafka_message(exc.message)
        except TieredLogError as exc:
            r["error_code"], r["error_message"] = error_code(exc), error_message(exc)


def _resource_answer(res: Any) -> dict[str, Any]:
    """An alter's answer for resource ``res``, no error yet."""
    return {
        "error_code": ErrorCode.none,
        "error_message": None,
        "resource_type": res.resource_type,
        "resource_name": res.resource_name,
    }


def _broker_alter(name: str, configs: Any) -> tuple[ErrorCode, str | None]:
    """A legacy alter of a broker's configs: the broker has none that can change (each
    is read-only, as Kafka answers for one that cannot be updated dynamically); an empty
    set (every dynamic config back to its default) changes nothing and succeeds."""
    if name and not name.lstrip("-").isdigit():
        return ErrorCode.invalid_request, f"broker id must be an integer, not {name!r}"
    given = [c.name for c in configs]
    if given:
        return (
            ErrorCode.invalid_config,
            f"Cannot update these configs dynamically: {', '.join(given)} (a broker's "
            "configs are read-only here)",
        )
    return ErrorCode.none, None


__all__ = [
    "ALTER_CONFIGS",
    "BROKER_NAMES",
    "CONFIG_APIS",
    "DEFAULT_PARTITIONS",
    "DESCRIBE_CONFIGS",
    "FIXED",
    "INCREMENTAL_ALTER_CONFIGS",
    "KAFKA_NAMES",
    "BrokerFacts",
    "ConfigHandlers",
    "InvalidRequest",
    "broker_described",
    "check_fixed",
    "default_replication_factor",
    "described",
    "kafka_changes",
    "kafka_message",
    "legacy_changes",
    "setting_value",
]
