"""What a tiered log reports about itself: counters for ``/metrics`` (:meth:`stats`), the
description behind ``tiered-log describe`` and topic describe (:meth:`describe`), the
damaged remote ranges and the offsets found lost when it was rebuilt from the bucket.
Mixed into :class:`~tiered_log.tiered.TieredLog`.

Thread-safety: reads only (snapshots of the segment lists and the remote state); any
thread.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .bounds import PartitionBounds
    from .local.log import Log
    from .remote.tier import RemoteTier
    from .shipper import Shipper


class LogReportMixin:
    """:class:`~tiered_log.tiered.TieredLog`'s reports (see the module docstring)."""

    if TYPE_CHECKING:
        log_id: str
        _local: Log
        _remote: RemoteTier | None
        _shipper: Shipper | None

        def bounds(self) -> PartitionBounds: ...

    def stats(self) -> dict[str, float]:
        """Numeric counters and gauges, for /metrics: one pass over the local segments,
        no per-segment lists (a scrape touches every partition)."""
        r = self._remote
        end = r.remote_end if r is not None else 0
        local_bytes = lag_bytes = lag_segments = 0
        for s in self._local.segments():
            local_bytes += s.size
            if r is not None and s.sealed and s.base_offset >= end:
                lag_bytes += s.size
                lag_segments += 1
        out = {
            "local_bytes": float(local_bytes),
            "copy_lag_bytes": float(lag_bytes),
            "copy_lag_segments": float(lag_segments),
            "remote_bytes": 0.0,
            "cache_hits": 0.0,
            "cache_misses": 0.0,
            "uploaded_bytes": 0.0,
            "uploaded_segments": 0.0,
            "copy_failures": 0.0,
            "remote_fetch_bytes": 0.0,
            "remote_fetch_requests": 0.0,
            "remote_fetch_errors": 0.0,
            "remote_fetch_throttled_ms": 0.0,
            "lost_offsets": float(sum(b - a for a, b in r.meta.lost)) if r is not None else 0.0,
        }
        if r is not None:
            st = r.stats
            out.update(
                {
                    "remote_bytes": float(r.size_bytes),
                    "cache_hits": float(r.cache.hits),
                    "cache_misses": float(r.cache.misses),
                    "uploaded_bytes": float(st.uploaded_bytes),
                    "uploaded_segments": float(st.uploaded_segments),
                    "copy_failures": float(st.copy_failures),
                    "remote_fetch_bytes": float(st.remote_fetch_bytes),
                    "remote_fetch_requests": float(st.remote_fetch_requests),
                    "remote_fetch_errors": float(st.remote_fetch_errors),
                    "remote_fetch_throttled_ms": float(st.remote_fetch_throttled_ms),
                }
            )
        return out

    def describe(self) -> dict[str, Any]:
        """Local and remote segments, copy lag, cache and fetch counters (JSON-able)."""
        b = self.bounds()
        end = b.local_start_offset if b.remote_end_offset is None else b.remote_end_offset
        st = self.stats()
        out: dict[str, Any] = {
            "log_id": self.log_id,
            "bounds": {
                "log_start_offset": b.log_start_offset,
                "local_start_offset": b.local_start_offset,
                "remote_end_offset": b.remote_end_offset,
                "high_watermark": b.high_watermark,
                "next_offset": b.next_offset,
                "flushed_offset": b.flushed_offset,
            },
            "local_segments": [
                {
                    "base_offset": s.base_offset,
                    "next_offset": s.next_offset,
                    "size": s.size,
                    "sealed": s.sealed,
                    "copied": self._remote is not None and s.next_offset <= end,
                }
                for s in self._local.segments()
            ],
            "local_bytes": int(st["local_bytes"]),
            "copy_lag_segments": int(st["copy_lag_segments"]),
            "copy_lag_bytes": int(st["copy_lag_bytes"]),
            "remote_enabled": self._remote is not None,
            "lost_offsets": self.lost_offsets(),
        }
        r = self._remote
        if r is not None:
            out.update(
                {
                    k: int(st[k])
                    for k in (
                        "remote_bytes",
                        "cache_hits",
                        "cache_misses",
                        "uploaded_bytes",
                        "uploaded_segments",
                        "copy_failures",
                        "remote_fetch_bytes",
                        "remote_fetch_requests",
                        "remote_fetch_errors",
                        "remote_fetch_throttled_ms",
                    )
                }
            )
            out.update(
                {
                    "remote_url": r.storage.url,
                    "remote_segments": [
                        {
                            "id": s.id,
                            "base_offset": s.base_offset,
                            "next_offset": r.served_end(s),
                            "size": s.size,
                            "state": str(s.state),
                        }
                        for s in r.journal.segments()
                    ],
                    "cache_hit_rate": round(r.cache.hit_rate, 4),
                    "cache_bytes": r.cache.size_bytes,
                    "remote_deleted_segments": r.stats.deleted_segments,
                    "remote_damage": self.remote_damage(),
                    "shipper_error": self._shipper.last_error if self._shipper else None,
                }
            )
        return out

    def remote_damage(self) -> list[dict[str, Any]]:
        """Remote ranges that cannot be read (their manifest and data object are damaged),
        each ``{"id", "base_offset", "next_offset", "problem"}``; reads there answer
        RemoteCorruptionError. Empty when all is well or without a remote tier."""
        r = self._remote
        if r is None:
            return []
        return [
            {
                "id": s.id,
                "base_offset": s.base_offset,
                "next_offset": r.served_end(s),
                "problem": r.damage[s.id],
            }
            for s in r.finished_segments
            if s.id in r.damage
        ]

    def lost_offsets(self) -> list[list[int]]:
        """``[first, end)`` ranges of offsets handed out before the local disk was lost
        that were not in the bucket when the log was rebuilt from it: lost, and never
        handed out again (see :attr:`~tiered_log.remote.metadata.RemoteMeta.lost`)."""
        r = self._remote
        return [list(x) for x in r.meta.lost] if r is not None else []
