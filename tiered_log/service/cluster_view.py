"""The JSON of ``GET /v1/cluster`` (:class:`ClusterView`): a node's view of the cluster
as it last read it from etcd, with its own replication state of the partitions it
leads (:meth:`~tiered_log.cluster.node.ClusterNode.describe` builds it).

The view is served also while etcd cannot be reached: then it is the last one the node
read, ``stale`` is true and ``metadata_age_ms`` says how old it is. Leaders keep serving
through an etcd outage, so a stale view still routes requests (clients use it as any
other; a leader that was replaced meanwhile answers 421 naming its successor).

Pure models: safe from any thread.
"""

from __future__ import annotations

from pydantic import BaseModel, Field


class ClusterNodeView(BaseModel):
    """One node: a registered one, or one that holds a replica or was seen since this
    node started."""

    node_id: int
    url: str | None = Field(description="Its advertised URL (the last one seen).")
    alive: bool = Field(description="Registered in etcd (its lease lives) at the last read.")


class ClusterPartitionView(BaseModel):
    """One partition's state as stored in etcd."""

    topic: str
    partition: int
    leader: int | None = Field(description="The leader's node id; null while it has none.")
    leader_epoch: int
    replicas: list[int]
    isr: list[int] = Field(description="The in-sync replicas.")


class ReplicaStatus(BaseModel):
    """One replica as the partition's leader sees it."""

    node_id: int
    state: str = Field(description="leader, in_sync, rebuilding, catching_up or offline.")
    log_end_offset: int
    lag_offsets: int
    rate_offsets_s: float
    eta_s: float | None = Field(description="The lag at the current rate; null when not moving.")
    lag_bytes: int | None = Field(
        description="What the leader's local log holds above the replica's end; null when unknown."
    )
    resets: int = Field(
        0,
        description="How often this leader sent it back to the remote "
        "end in this epoch (a rebuild: once; many: it cannot keep up with "
        "the leader's local retention).",
    )


class LedPartition(BaseModel):
    """A partition this node leads: its replication state."""

    topic: str
    partition: int
    leader_epoch: int
    high_watermark: int
    log_end_offset: int | None
    remote_end_offset: int | None
    lost_offsets: list[list[int]] = Field(
        description="[first, end) ranges lost before a restore from the bucket."
    )
    remote_view: str = Field(
        "ready",
        description="ready, or not_ready while this new "
        "leader reads the bucket (its archived reads wait).",
    )
    rebuild_requests: int = Field(
        0,
        description="Bucket requests its last rebuild of the "
        "remote view made (the partition snapshot, a listing of "
        "what came after it, those copies' manifests).",
    )
    replicas: list[ReplicaStatus]


class ClusterView(BaseModel):
    """``GET /v1/cluster``."""

    node_id: int = Field(description="The node that answered.")
    controller_id: int | None = Field(
        description="The controller as last read; null "
        "while there is none (an election is under way)."
    )
    nodes: list[ClusterNodeView]
    partitions: list[ClusterPartitionView]
    replication: list[LedPartition] = Field(description="The partitions this node leads.")
    stale: bool = Field(
        description="True when this node cannot read etcd now: the view is "
        "the last one it read (leaders keep serving meanwhile)."
    )
    metadata_age_ms: int = Field(
        description="Milliseconds since this node last read the metadata from etcd."
    )


__all__ = [
    "ClusterNodeView",
    "ClusterPartitionView",
    "ClusterView",
    "LedPartition",
    "ReplicaStatus",
]
