"""The service's side of a point-in-time restore (``POST /v1/archive/restore``): make the
new topic in the bucket from the source's copies and this node's unshipped tail
(:func:`~tiered_log.broker.point_in_time.restore_point_in_time`), then serve it.

A single node reads the tail of each source partition from its own log (up to its high
watermark) and opens the new topic as one restored from the bucket. A cluster's node
reads the tail of the partitions it holds a replica of (up to that replica's high
watermark: committed records only) and creates the new topic in the cluster with the id
the restore gave it; each partition's first leader rebuilds it from the bucket, as a
whole-cluster restore does. The source's objects are only read. A read-only mount
(``read_only_remote``) refuses: it never writes to the bucket.

Concurrency: blocking (bucket, disk, etcd): call it from a worker thread.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..broker.point_in_time import restore_point_in_time
from ..broker.topics import TopicManager, TopicMeta, tier_config_of
from ..config import Settings
from ..errors import InvalidArgumentError, TopicExistsError, TopicNotFoundError

if TYPE_CHECKING:
    from ..cluster.node import ClusterNode

TAIL_READ_BYTES = 8 << 20
"""Bytes of stored batches read from a source log per step of its tail."""


def restore_topic(
    settings: Settings,
    topics: TopicManager,
    node: ClusterNode | None,
    topic: str,
    as_topic: str,
    to_timestamp: int | None,
    to_offset: int | None,
) -> dict[str, Any]:
    """Restore ``topic`` up to the bounds as the new topic ``as_topic`` and serve it;
    the report (:meth:`~tiered_log.broker.point_in_time.RestoreReport.to_json`).
    InvalidArgumentError without a remote store; the restore's own errors otherwise."""
    storage = topics.storage
    if storage is None:
        raise InvalidArgumentError("this service has no remote store to restore from")
    if getattr(settings, "read_only_remote", False):  # a mount never writes to the bucket
        raise InvalidArgumentError(
            "this service mounts another cluster's bucket read-only: restore with "
            "tiered-log archive restore --remote into a bucket you own"
        )
    if topics.exists(as_topic) or (node is not None and as_topic in node.metadata.topics()):
        raise TopicExistsError(f"topic {as_topic!r} exists already")
    source: TopicMeta | None = None
    try:
        source = topics.get(topic).meta
    except TopicNotFoundError:
        source = None  # not held here: the bucket's metadata names it (or nothing does)
    tier = tier_config_of(source.config, settings) if source is not None else None

    def tail(partition: int, offset: int) -> Iterator[bytes | memoryview]:
        plog = topics.partition_log(topic, partition)
        if plog is None:
            return
        end = plog.high_watermark
        off = max(offset, plog.log_start_offset)
        while off < end:
            got = plog.read_batches(off, 100_000, TAIL_READ_BYTES, upto=end)
            if not got.data or got.next_offset <= off:
                return
            yield got.data
            off = got.next_offset

    ring = (
        tier.key_ring
        if tier is not None
        else tier_config_of(settings.topic_defaults, settings).key_ring
    )
    report, meta = restore_point_in_time(
        storage,
        topic,
        as_topic,
        to_timestamp=to_timestamp,
        to_offset=to_offset,
        ring=ring,
        source_meta=source,
        tail=tail if source is not None else None,
        tail_codec=tier.compression if tier is not None else "none",
        tail_ring=ring,
        chunk_bytes=settings.remote_chunk_bytes,
    )
    if node is None:
        topics.open_from_store(meta)
    else:
        from .clustering import create_cluster_topic

        held = node.metadata.topics().get(topic)  # the source's replication, if listed
        create_cluster_topic(
            node,
            settings,
            meta.name,
            meta.partitions,
            {},
            None if held is None else held.replication_factor,
            None if held is None else held.min_insync_replicas,
            config=meta.config,
            topic_id=meta.topic_id,
        )
    return report.to_json()


__all__ = ["TAIL_READ_BYTES", "restore_topic"]
