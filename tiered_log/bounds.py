"""The offsets that bound one partition: what :meth:`TieredLog.bounds
<tiered_log.partition.log.TieredLog.bounds>` returns, what the HTTP API reports
(``GET .../bounds``; the OpenAPI schema of that body, ``service.wire.Bounds``, is
generated from this class) and what the client reads back. One type for all of them; the
local log below keeps its own :class:`~tiered_log.local.log.LogBounds` (it knows no
remote tier). Plain frozen values; any thread.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Annotated, Any

from pydantic import Field


@dataclass(frozen=True, slots=True)
class PartitionBounds:
    """Offsets bounding a partition's log (``log_start <= local_start <= remote_end``
    and ``local_start <= high_watermark <= next_offset``)::

        log_start          local_start                     remote_end         next_offset
           |---- remote only ----|==== local and remote ====|---- local only ----|

    ``remote_end_offset`` is known to the log (the local start when nothing is remote);
    the HTTP bounds body does not carry it (``GET .../remote-segments`` does), so a
    client's copy has None there.
    """

    log_start_offset: Annotated[int, Field(description="First offset in the log (either tier).")]
    local_start_offset: Annotated[int, Field(description="First offset on local disk.")]
    high_watermark: Annotated[int, Field(description="One past the last readable record.")]
    next_offset: Annotated[int, Field(description="Offset the next append gets.")]
    flushed_offset: Annotated[int, Field(description="Offsets below this are fsynced.")]
    remote_end_offset: int | None = None

    def as_dict(self) -> dict[str, int]:
        """The JSON body of ``GET .../bounds`` (:data:`WIRE_FIELDS`)."""
        d = asdict(self)
        return {k: d[k] for k in WIRE_FIELDS}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> PartitionBounds:
        """From that JSON body (extra fields ignored)."""
        return cls(*(int(d[k]) for k in WIRE_FIELDS))


WIRE_FIELDS = (
    "log_start_offset",
    "local_start_offset",
    "high_watermark",
    "next_offset",
    "flushed_offset",
)
"""The fields of :class:`PartitionBounds` the HTTP bounds body carries, in order."""
