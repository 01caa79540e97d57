"""The service in a cluster: the node's view of the local topics
(:class:`TopicLogs`, the :class:`~tiered_log.cluster.node.LocalLogs` the node drives),
making the node from the settings (:func:`start_node`), and the cluster's side of
creating a topic (:func:`create_cluster_topic`).

In a cluster the topic list is etcd's: a topic is created there (replicas assigned over
the live nodes) and every node then creates its local logs with the same topic id, so a
partition's log has one id on every node. A topic gone from etcd is deleted locally.

Concurrency: the node calls :class:`TopicLogs` from its poll thread; everything here
blocks (etcd, disk): call it from worker threads, never on the event loop.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from typing import Any

from pydantic import ValidationError

from ..cluster.model import TopicMeta as ClusterTopic
from ..cluster.node import ClusterNode, NodeConfig
from ..config import Settings
from ..errors import InvalidArgumentError, TieredLogError, TopicExistsError, TopicNotFoundError
from ..local.log import LogConfig
from ..tiered import TieredLog
from ..topic_config import TopicConfig
from .topics import TopicManager, TopicMeta, validate_partitions, validate_topic_name

log = logging.getLogger(__name__)


class TopicLogs:
    """The local topics as the cluster node sees them (see the module docstring)."""

    def __init__(self, topics: TopicManager) -> None:
        self.topics = topics

    def ensure_topic(self, meta: ClusterTopic) -> None:
        have = next((t for t in self.topics.list() if t.name == meta.name), None)
        if have is not None:
            if have.meta.topic_id == meta.topic_id:
                return
            log.info("topic %s was created again in the cluster: replacing the local one",
                     meta.name)
            self.topics.delete(meta.name)
        config = TopicConfig.model_validate(meta.config)
        local = TopicMeta(meta.name, meta.topic_id, meta.partitions, config,
                          time.time_ns() // 1_000_000)
        with contextlib.suppress(TopicExistsError):  # created meanwhile on this node
            self.topics.adopt(local)

    def drop_topic(self, name: str) -> None:
        with contextlib.suppress(TopicNotFoundError):
            self.topics.delete(name)

    def local_topics(self) -> set[str]:
        return {t.name for t in self.topics.list()}

    def partition_log(self, topic: str, partition: int) -> TieredLog | None:
        try:
            t = self.topics.get(topic)
        except TieredLogError:  # not held (or unavailable)
            return None
        return t.logs[partition] if 0 <= partition < len(t.logs) else None


def start_node(settings: Settings, topics: TopicManager) -> ClusterNode:
    """Join the cluster the settings name (MetadataUnavailableError if etcd cannot be
    reached)."""
    assert settings.node_id is not None and settings.advertised_url and settings.cluster_etcd
    headers = ({"Authorization": f"Bearer {settings.cluster_token.get_secret_value()}"}
               if settings.cluster_token else {})
    config = NodeConfig(
        node_id=settings.node_id, advertised_url=settings.advertised_url,
        etcd_url=settings.cluster_etcd, cluster_name=settings.cluster_name,
        lease_ttl_s=settings.cluster_lease_ttl_s,
        replica_lag_time_max_ms=settings.replica_lag_time_max_ms,
        unclean_leader_election=settings.unclean_leader_election, fetch_headers=headers)
    return ClusterNode(config, TopicLogs(topics)).start()


def create_cluster_topic(node: ClusterNode, settings: Settings, name: str, partitions: int,
                         overrides: dict[str, Any], replication_factor: int | None,
                         min_insync_replicas: int | None) -> None:
    """Create a topic in the cluster and wait (a few seconds at most) until this node
    holds its logs. The replication factor defaults to ``min(3, live nodes)`` and
    ``min_insync_replicas`` to ``min(2, replication_factor)``, as a Kafka cluster is
    usually configured. TopicExistsError, InvalidArgumentError."""
    validate_topic_name(name)
    validate_partitions(partitions)
    try:
        config = settings.topic_defaults.with_overrides(overrides)
        LogConfig.of(config)
    except ValidationError as exc:
        err = exc.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(p) for p in err.get("loc", ())) or "config"
        raise InvalidArgumentError(f"invalid topic config {where}: {err['msg']}") from None
    live = len(node.membership.live_nodes())
    rf = replication_factor if replication_factor is not None else max(1, min(3, live))
    min_isr = min_insync_replicas if min_insync_replicas is not None else min(2, rf)
    meta = ClusterTopic(name=name, partitions=partitions, replication_factor=rf,
                        min_insync_replicas=min_isr,
                        config=config.model_dump(mode="json"),
                        topic_id=uuid.uuid4().hex)
    node.create_topic(meta)
    node.wait_until(lambda: node.partition_state(name, 0) is not None, 10.0)


__all__ = ["TopicLogs", "create_cluster_topic", "start_node"]
