"""The settings of a log's remote tier (:class:`TierConfig`) and its counters
(:class:`TierStats`). Plain values; a TierConfig is frozen and checked when made.

A TierConfig's topic-level settings (``remote_enabled`` and the two retentions) and their
defaults are :class:`~tiered_log.topic_config.TopicConfig`'s (:meth:`TierConfig.of`
derives a TierConfig from one); the rest are the node's, whose defaults are stated here
once (:data:`TIER_DEFAULTS`; the service's settings take theirs from it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import InvalidArgumentError
from ..topic_config import TOPIC_DEFAULTS, TopicConfig, check_storage_class, no_limit

if TYPE_CHECKING:
    from .crypto import KeyRing

_OPTIONAL = (
    "local_retention_bytes",
    "local_retention_ms",
    "retention_bytes",
    "retention_ms",
    "upload_bytes_per_sec",
    "fetch_bytes_per_sec",
)
_POSITIVE = (
    "chunk_bytes",
    "fetch_bytes",
    "prefetch_bytes",
    "cache_bytes",
    "copies_in_flight",
    "ship_interval_ms",
    "index_rotate_bytes",
    "index_rotate_ms",
    "fetch_max_wait_ms",
    "snapshot_interval_segments",
    "snapshot_spill_segments",
)


@dataclass(frozen=True, slots=True)
class TierConfig:
    """Settings of a log's remote tier. ``None`` (or -1) retention means forever."""

    remote_enabled: bool = TOPIC_DEFAULTS.remote_enabled
    local_retention_bytes: int | None = TOPIC_DEFAULTS.local_retention_bytes
    local_retention_ms: int | None = TOPIC_DEFAULTS.local_retention_ms
    retention_bytes: int | None = TOPIC_DEFAULTS.retention_bytes
    retention_ms: int | None = TOPIC_DEFAULTS.retention_ms
    compression: str = TOPIC_DEFAULTS.remote_compression
    """The codec each shipped chunk is compressed with (:mod:`~tiered_log.remote.chunk_codec`)."""
    storage_class: str = TOPIC_DEFAULTS.remote_storage_class
    """The S3 storage class of the data objects shipped (``put_file``'s; manifests and
    the other small objects stay STANDARD); a store without classes ignores it."""
    key_ring: KeyRing | None = None
    """The node's key ring (:mod:`~tiered_log.remote.crypto`): set, every segment shipped
    is encrypted with a data key of its own, wrapped with the ring's active key; reads of
    encrypted segments need it. None: segments are shipped unencrypted."""
    chunk_bytes: int = 1 << 20
    fetch_bytes: int = 8 << 20
    prefetch_bytes: int = 32 << 20
    cache_bytes: int = 256 << 20
    upload_bytes_per_sec: int | None = None
    fetch_bytes_per_sec: int | None = None
    fetch_max_wait_ms: int = 5000  # a reader's wait for the bucket (remote/fetch_wait.py)
    copies_in_flight: int = 2
    worker_processes: int = 1
    """Worker processes that upload, scan and fetch off this process's interpreter
    (:mod:`~tiered_log.remote.worker`, shared by every log of the process); 0: on this
    process's threads."""
    worker_nice: int = 10
    """How much lower the workers' CPU priority is (``nice``, 0-19; 0: the same)."""
    ship_interval_ms: int = 500
    index_rotate_bytes: int = 16 << 20
    index_rotate_ms: int = 7 * 24 * 3600 * 1000
    snapshot_interval_segments: int = 100
    """A leader writes the partition snapshot (its remote view, for a successor to read
    in a few requests) after this many copies finished since the last one."""
    snapshot_spill_segments: int = 1000
    """The snapshot itself lists between this many and twice this many copies; older
    ones go to its spill objects (:mod:`~tiered_log.remote.snapshot`), so writing it
    costs the same however long the archive is."""
    catchup_retention_bytes: int = 256 << 20
    """How many bytes of shipped segments past local retention a leader keeps on disk for
    followers still copying them (:meth:`TieredLog.hold_local_from`); 0: none."""
    offset_reserve: int = 100_000
    """How many offsets ahead of the log end a leader records in the bucket before it
    hands them out (``RemoteMeta.end_offset``: a log rebuilt after its disk was lost
    continues above it). One bucket write per this many offsets; a larger reserve means
    fewer writes and a larger gap of unused offsets after a disk loss."""

    @classmethod
    def of(cls, topic: TopicConfig, **node: Any) -> TierConfig:
        """The TierConfig of a partition of a topic with settings ``topic``; ``node``: the
        node-level settings (``chunk_bytes``, ``cache_bytes``, ...; default: theirs)."""
        return cls(
            remote_enabled=topic.remote_enabled,
            local_retention_bytes=topic.local_retention_bytes,
            local_retention_ms=topic.local_retention_ms,
            retention_bytes=topic.retention_bytes,
            retention_ms=topic.retention_ms,
            compression=topic.remote_compression,
            storage_class=topic.remote_storage_class,
            **node,
        )

    def __post_init__(self) -> None:
        for name in _OPTIONAL:
            v = no_limit(getattr(self, name))
            object.__setattr__(self, name, v)
            if v is not None and (not isinstance(v, int) or v < 0):
                raise InvalidArgumentError(
                    f"{name} must be -1 or a non-negative integer, got {v!r}"
                )
        for name in _POSITIVE:
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise InvalidArgumentError(f"{name} must be a positive integer, got {v!r}")
        if self.compression not in ("none", "zstd", "lz4", "gzip"):
            raise InvalidArgumentError(
                f"compression must be none, zstd, lz4 or gzip, got {self.compression!r}"
            )
        try:
            object.__setattr__(self, "storage_class", check_storage_class(self.storage_class))
        except ValueError as exc:
            raise InvalidArgumentError(f"storage_class: {exc}") from None
        v = self.worker_processes
        if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= 16:
            raise InvalidArgumentError(f"worker_processes must be an integer 0-16, got {v!r}")
        v = self.worker_nice
        if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= 19:
            raise InvalidArgumentError(f"worker_nice must be an integer 0-19, got {v!r}")
        v = self.catchup_retention_bytes
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise InvalidArgumentError(
                f"catchup_retention_bytes must be an integer >= 0, got {v!r}"
            )
        v = self.offset_reserve
        if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= 1 << 40:
            raise InvalidArgumentError(f"offset_reserve must be an integer 1 - 2**40, got {v!r}")


TIER_DEFAULTS = TierConfig()
"""The node-level tier settings' defaults (``chunk_bytes``, ``cache_bytes``, ...)."""


@dataclass
class TierStats:
    """Counters of one remote tier (read by describe and /metrics)."""

    uploaded_bytes: int = 0
    uploaded_segments: int = 0
    copy_failures: int = 0
    remote_fetch_bytes: int = 0
    remote_fetch_requests: int = 0
    remote_fetch_errors: int = 0
    remote_fetch_throttled_ms: int = 0
    """Time fetches waited for the fetch quota (``fetch_bytes_per_sec``)."""
    deleted_segments: int = 0
