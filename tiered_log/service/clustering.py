"""The service in a cluster: making the node from the settings (:func:`start_node`; it
drives the broker's topic manager directly), and the cluster's side of
creating a topic (:func:`create_cluster_topic`) and of restoring a whole cluster's
topics from the bucket (:func:`restore_cluster_topics`).

In a cluster the topic list is etcd's: a topic is created there (replicas assigned over
the live nodes) and every node then creates its local logs with the same topic id, so a
partition's log has one id on every node. A topic gone from etcd is deleted locally.

Concurrency: everything here blocks (etcd, disk): call it from worker threads, never on
the event loop.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from pydantic import ValidationError

from ..broker.topics import TopicManager, TopicMeta, validate_partitions, validate_topic_name
from ..cluster.node import ClusterNode, NodeConfig
from ..config import Settings
from ..errors import InvalidArgumentError, TieredLogError, TopicExistsError
from ..format import naming
from ..local.log import LogConfig
from ..remote.storage import RemoteStorage
from ..topic_config import TopicConfig

log = logging.getLogger(__name__)


def start_node(
    settings: Settings, topics: TopicManager, kafka_address: str | None = None
) -> ClusterNode:
    """Join the cluster the settings name (MetadataUnavailableError if etcd cannot be
    reached); ``kafka_address``: this node's Kafka listener, registered for the
    others' Metadata answers."""
    assert settings.node_id is not None and settings.advertised_url and settings.cluster_etcd
    headers = (
        {"Authorization": f"Bearer {settings.cluster_token.get_secret_value()}"}
        if settings.cluster_token
        else {}
    )
    config = NodeConfig(
        node_id=settings.node_id,
        advertised_url=settings.advertised_url,
        etcd_url=settings.cluster_etcd,
        cluster_name=settings.cluster_name,
        lease_ttl_s=settings.cluster_lease_ttl_s,
        replica_lag_time_max_ms=settings.replica_lag_time_max_ms,
        unclean_leader_election=settings.unclean_leader_election,
        fetch_headers=headers,
        cluster_token=(
            settings.cluster_token.get_secret_value() if settings.cluster_token else None
        ),
        replication_transport=settings.replication_transport,
        replica_fetch_wait_ms=settings.replica_fetch_wait_max_ms,
        kafka_address=kafka_address,
    )
    return ClusterNode(config, topics).start()


def create_cluster_topic(
    node: ClusterNode,
    settings: Settings,
    name: str,
    partitions: int,
    overrides: dict[str, Any],
    replication_factor: int | None,
    min_insync_replicas: int | None,
    *,
    config: TopicConfig | None = None,
    topic_id: str | None = None,
) -> None:
    """Create a topic in the cluster and wait (a few seconds at most) until this node
    holds its logs. The replication factor defaults to ``min(3, live nodes)`` and
    ``min_insync_replicas`` to ``min(2, replication_factor)``, as a Kafka cluster is
    usually configured. ``config``/``topic_id``: a topic restored from the bucket keeps
    its own (its logs' objects are named by the id; the topic is marked ``restored``);
    else the defaults with ``overrides`` and a new id. TopicExistsError,
    InvalidArgumentError."""
    validate_topic_name(name)
    validate_partitions(partitions)
    if config is None:
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
    meta = TopicMeta(
        name=name,
        partitions=partitions,
        replication_factor=rf,
        min_insync_replicas=min_isr,
        config=config,
        topic_id=topic_id or uuid.uuid4().hex,
        restored=topic_id is not None,
    )
    node.create_topic(meta)
    node.wait_until(lambda: node.partition_state(name, 0) is not None, 10.0)


def restore_cluster_topics(
    node: ClusterNode,
    settings: Settings,
    topics: TopicManager,
    names: list[str] | None,
    replication_factor: int | None,
    min_insync_replicas: int | None,
    to_timestamp: int | None = None,
) -> dict[str, Any]:
    """Whole-cluster restore (as Redpanda's): recreate in the cluster the topics whose
    metadata the bucket keeps (``topics/<name>.json``) and the cluster lacks, with their
    own topic id, partitions and config, so each partition's logs find their objects.
    Each partition's first leader, whose log is empty, rebuilds its view from the
    bucket and continues above every offset the partition handed out, reporting those
    never shipped as lost; followers rebuild from it (KIP-1023). ``names``: only these
    (None: every topic in the bucket). Returns ``{"restored": [{name, topic_id,
    partitions}], "skipped": [{name, reason}], "missing": [names asked, not in the
    bucket]}``. InvalidArgumentError without a remote store; RemoteStorageError when
    the bucket fails; MetadataUnavailableError when etcd does.

    ``to_timestamp``: each topic is restored to that time instead
    (:func:`~tiered_log.broker.point_in_time.restore_point_in_time` with the topic as its
    own target): new logs under a new topic id hold its records up to the last one at
    or before it, and the bucket's ``topics/<name>.json`` names them; the old logs'
    objects stay in the bucket, unreferenced (``archive reconcile --delete`` removes
    them). A restored entry then lists each partition's ``end_offsets``; a topic with
    nothing to restore is skipped with why."""
    storage = topics.storage
    if storage is None:
        raise InvalidArgumentError("this node has no remote store to restore from")
    in_bucket = {
        key[len(naming.TOPIC_OBJECTS_PREFIX) :].removesuffix(".json"): key
        for key in (i.key for i in storage.list(naming.TOPIC_OBJECTS_PREFIX))
        if key.endswith(".json")
    }
    wanted = sorted(in_bucket) if names is None else sorted(set(names))
    existing = node.metadata.topics()
    out: dict[str, Any] = {
        "restored": [],
        "skipped": [],
        "missing": [n for n in wanted if n not in in_bucket],
    }
    for name in (n for n in wanted if n in in_bucket):
        if name in existing:
            out["skipped"].append({"name": name, "reason": "the cluster has this topic"})
            continue
        try:
            meta = TopicMeta.from_json(storage.get(in_bucket[name]))
            if meta.name != name:
                raise ValueError(f"it names {meta.name!r}")
        except (OSError, ValueError, KeyError, TypeError, ValidationError) as exc:
            out["skipped"].append({"name": name, "reason": f"unreadable metadata: {exc}"})
            continue
        entry: dict[str, Any] = {}
        if to_timestamp is not None:
            try:
                meta, entry = _restore_to_time(settings, storage, meta, to_timestamp)
            except TieredLogError as exc:
                out["skipped"].append({"name": name, "reason": exc.message})
                continue
        try:
            create_cluster_topic(
                node,
                settings,
                name,
                meta.partitions,
                {},
                replication_factor,
                min_insync_replicas,
                config=meta.config,
                topic_id=meta.topic_id,
            )
        except TopicExistsError:
            out["skipped"].append({"name": name, "reason": "the cluster has this topic"})
            continue
        log.info(
            "restored topic %s (%d partition(s), id %s) from the bucket",
            name,
            meta.partitions,
            meta.topic_id,
        )
        out["restored"].append(
            {"name": name, "topic_id": meta.topic_id, "partitions": meta.partitions, **entry}
        )
    return out


def _restore_to_time(
    settings: Settings, storage: RemoteStorage, meta: TopicMeta, to_timestamp: int
) -> tuple[TopicMeta, dict[str, Any]]:
    """Make the topic's new logs holding its records up to ``to_timestamp`` (see
    :func:`restore_cluster_topics`): the new metadata and the restored entry's fields."""
    from ..broker.point_in_time import restore_point_in_time
    from ..broker.topics import tier_config_of

    ring = tier_config_of(meta.config, settings).key_ring
    report, new = restore_point_in_time(
        storage,
        meta.name,
        meta.name,
        to_timestamp=to_timestamp,
        ring=ring,
        tail_ring=ring,  # the cut copy is written as this cluster ships: encrypted with a ring
        source_meta=meta,
        chunk_bytes=settings.remote_chunk_bytes,
        replace_topic=True,
    )
    log.info(
        "topic %s restored to timestamp %d: new logs under id %s",
        meta.name,
        to_timestamp,
        new.topic_id,
    )
    return new, {
        "to_timestamp": to_timestamp,
        "end_offsets": [p.end_offset for p in report.partitions],
    }


__all__ = ["create_cluster_topic", "restore_cluster_topics", "start_node"]
