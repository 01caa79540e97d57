"""Changing a topic's settings and growing its partition count, the one path the HTTP
API (``PATCH /v1/topics/{t}``) and the Kafka listener (IncrementalAlterConfigs,
AlterConfigs, CreatePartitions) share.

A single node changes them in its :class:`~tiered_log.broker.topics.TopicManager`
(``topic.json`` committed, then every open partition log reconfigured). A cluster
changes them in the metadata store (etcd), compare-and-swapped on the topic's key; every
node applies them at its next metadata read (this one at once), so every replica of a
partition takes the same settings. Turning tiering off keeps or deletes the bucket's
data as asked (Kafka's KIP-950): the policy is stored with the settings
(``remote_delete_on_disable``), so every replica, and a node that applies the change
late or after a restart, applies the same one (the leader deletes the objects);
turning it on again ships from where each leader stands.

Partitions are added as Kafka adds them: the count only grows, the existing partitions
keep their records and offsets, and producers that hash keys send a key to another
partition from then on. A single node creates the new logs at once; a cluster writes the
new count and the new partitions' states (replicas over the live nodes) in one etcd
transaction, and every node creates their logs at its next metadata read (this one is
waited for, a few seconds at most).

Blocking (disk, etcd): call from a worker thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..broker.topic_meta import check_growth
from ..broker.topics import Topic, altered_config, check_remote_disable
from ..errors import TopicNotFoundError
from ..topic_config import TopicConfig

if TYPE_CHECKING:
    from .state import ServiceState


def alter_topic(
    state: ServiceState,
    name: str,
    changes: dict[str, Any],
    reset: Sequence[str] = (),
    *,
    remote_disable_policy: str | None = None,
    validate_only: bool = False,
) -> TopicConfig:
    """Change topic ``name``'s settings (``changes`` set, ``reset`` back to the server's
    topic defaults; see :func:`~tiered_log.broker.topics.altered_config`); returns the
    new settings. ``validate_only``: check only, change nothing. TopicNotFoundError,
    InvalidArgumentError (one line naming the key)."""
    cluster = state.cluster
    if cluster is None:
        current = state.topics.get(name).meta.config
    else:
        meta = cluster.topic_meta(name)
        if meta is None:
            raise TopicNotFoundError(f"topic {name!r} does not exist")
        current = TopicConfig.model_validate(meta.config)
    config = altered_config(current, state.settings.topic_defaults, changes, reset)
    if remote_disable_policy is None and "remote_delete_on_disable" in changes:
        # Kafka's way: remote.log.delete.on.disable given with the change says it.
        remote_disable_policy = "delete" if config.remote_delete_on_disable else "retain"
    check_remote_disable(current, config, remote_disable_policy)
    if remote_disable_policy is not None and not config.remote_enabled:
        delete = remote_disable_policy == "delete"  # kept with the settings it applies to
        changes = {**changes, "remote_delete_on_disable": delete}
        config = config.model_copy(update={"remote_delete_on_disable": delete})
    if validate_only:
        return config
    if cluster is None:
        topic: Topic = state.topics.alter(
            name, changes, reset, remote_disable_policy=remote_disable_policy
        )
        return topic.meta.config
    cluster.alter_topic(name, config.model_dump(mode="json"))
    return config


def add_partitions(
    state: ServiceState, name: str, count: int, *, validate_only: bool = False
) -> int:
    """Grow topic ``name`` to ``count`` partitions (see the module docstring); returns
    the count it had. ``validate_only``: check only. TopicNotFoundError;
    InvalidArgumentError (one line) when ``count`` is not above the current count or
    passes the limits."""
    cluster = state.cluster
    if cluster is None:
        current = len(state.topics.get(name).logs)
    else:
        meta = cluster.topic_meta(name)
        if meta is None:
            raise TopicNotFoundError(f"topic {name!r} does not exist")
        current = meta.partitions
    check_growth(name, current, count)
    state.topics.check_writable(f"cannot add partitions to {name!r}")  # a read-only mount
    if validate_only:
        return current
    if cluster is None:
        state.topics.add_partitions(name, count)
        return current
    cluster.add_partitions(name, count)
    cluster.wait_until(lambda: state.topics.partition_log(name, count - 1) is not None, 10.0)
    return current


__all__ = ["add_partitions", "alter_topic"]
