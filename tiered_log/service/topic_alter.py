"""Changing a topic's settings, the one path the HTTP API (``PATCH /v1/topics/{t}``) and
the Kafka listener (IncrementalAlterConfigs) share.

A single node changes them in its :class:`~tiered_log.broker.topics.TopicManager`
(``topic.json`` committed, then every open partition log reconfigured). A cluster
changes them in the metadata store (etcd), compare-and-swapped on the topic's key; every
node applies them at its next metadata read (this one at once), so every replica of a
partition takes the same settings. Turning tiering off keeps or deletes the bucket's
data as asked (Kafka's KIP-950): the policy is stored with the settings
(``remote_delete_on_disable``), so every replica, and a node that applies the change
late or after a restart, applies the same one (the leader deletes the objects);
turning it on again ships from where each leader stands.

Blocking (disk, etcd): call from a worker thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

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


__all__ = ["alter_topic"]
