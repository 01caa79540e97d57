"""Changing a topic's settings, the one path the HTTP API (``PATCH /v1/topics/{t}``) and
the Kafka listener (IncrementalAlterConfigs) share.

A single node changes them in its :class:`~tiered_log.broker.topics.TopicManager`
(``topic.json`` committed, then every open partition log reconfigured). A cluster
changes them in the metadata store (etcd), compare-and-swapped on the topic's key; every
node applies them at its next metadata read (this one at once), so every replica of a
partition takes the same settings. Tiering may only be turned off there, keeping the
bucket's data (``retain``): a remote tier appearing or going on a replicated partition
is not supported yet.

Blocking (disk, etcd): call from a worker thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..broker.topics import Topic, altered_config, check_remote_disable
from ..errors import InvalidArgumentError, TopicNotFoundError
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
    check_remote_disable(current, config, remote_disable_policy)
    if (
        cluster is not None
        and current.remote_enabled != config.remote_enabled
        and (config.remote_enabled or remote_disable_policy != "retain")
    ):
        raise InvalidArgumentError(
            "in a cluster, remote_enabled can only be turned off, with "
            "remote_disable_policy=retain (not deleted, not turned on: not yet supported)"
        )
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
