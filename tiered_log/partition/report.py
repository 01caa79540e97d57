"""What a partition log reports about itself: counters for ``/metrics`` (:func:`stats`),
the description behind ``tiered-log describe`` and topic describe (:func:`describe`), the
damaged remote ranges and the offsets found lost when it was rebuilt from the bucket.
Functions over the log's parts (its bounds, local log, remote tier and shipper), which
:class:`~tiered_log.partition.log.TieredLog` calls with its own.

Thread-safety: reads only (snapshots of the segment lists and the remote state); any
thread.
"""

from __future__ import annotations

from typing import Any

from ..bounds import PartitionBounds
from ..local.log import Log
from ..remote.tier import RemoteTier
from .scheduler import Shipper


def stats(local: Log, remote: RemoteTier | None) -> dict[str, float]:
    """Numeric counters and gauges, for /metrics: one pass over the local segments,
    no per-segment lists (a scrape touches every partition)."""
    r = remote
    end = r.remote_end if r is not None else 0
    local_bytes = lag_bytes = lag_segments = 0
    for s in local.segments():
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


def describe(
    log_id: str,
    bounds: PartitionBounds,
    local: Log,
    remote: RemoteTier | None,
    shipper: Shipper | None,
) -> dict[str, Any]:
    """Local and remote segments, copy lag, cache and fetch counters (JSON-able)."""
    b = bounds
    end = b.local_start_offset if b.remote_end_offset is None else b.remote_end_offset
    st = stats(local, remote)
    out: dict[str, Any] = {
        "log_id": log_id,
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
                "copied": remote is not None and s.next_offset <= end,
            }
            for s in local.segments()
        ],
        "local_bytes": int(st["local_bytes"]),
        "copy_lag_segments": int(st["copy_lag_segments"]),
        "copy_lag_bytes": int(st["copy_lag_bytes"]),
        "remote_enabled": remote is not None,
        "lost_offsets": lost_offsets(remote),
    }
    r = remote
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
                "remote_damage": remote_damage(remote),
                "shipper_error": shipper.last_error if shipper else None,
            }
        )
    return out


def remote_damage(remote: RemoteTier | None) -> list[dict[str, Any]]:
    """Remote ranges that cannot be read (their manifest and data object are damaged),
    each ``{"id", "base_offset", "next_offset", "problem"}``; reads there answer
    RemoteCorruptionError. Empty when all is well or without a remote tier."""
    r = remote
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


def lost_offsets(remote: RemoteTier | None) -> list[list[int]]:
    """``[first, end)`` ranges of offsets handed out before the local disk was lost
    that were not in the bucket when the log was rebuilt from it: lost, and never
    handed out again (see :attr:`~tiered_log.remote.metadata.RemoteMeta.lost`)."""
    r = remote
    return [list(x) for x in r.meta.lost] if r is not None else []


__all__ = ["describe", "lost_offsets", "remote_damage", "stats"]
