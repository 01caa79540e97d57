"""The offsets that bound one partition, as the HTTP API reports them (``GET .../bounds``).

One type for both ends of the wire: the service builds it from a log's
:class:`~tiered_log.tiered.TieredBounds` and sends :meth:`PartitionBounds.as_dict`; the
client reads it back with :meth:`PartitionBounds.from_json`. (The layers below keep their
own: :class:`~tiered_log.local.log.LogBounds` for the local log, ``TieredBounds`` for a
tiered log, which also knows the remote end; ``service.wire.Bounds`` is the OpenAPI model
of the same JSON.) Plain frozen values; any thread.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class PartitionBounds:
    """Log start, local start, high watermark, next and flushed offsets of a partition."""

    log_start_offset: int
    local_start_offset: int
    high_watermark: int
    next_offset: int
    flushed_offset: int

    def as_dict(self) -> dict[str, int]:
        """The JSON body of ``GET .../bounds``."""
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> PartitionBounds:
        """From that JSON body (extra fields ignored)."""
        return cls(int(d["log_start_offset"]), int(d["local_start_offset"]),
                   int(d["high_watermark"]), int(d["next_offset"]), int(d["flushed_offset"]))
