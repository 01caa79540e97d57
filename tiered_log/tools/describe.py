"""A partition log described from its files alone: what ``tiered-log describe`` prints.

:func:`describe_log` reads a log directory the way the other tools here do: the local
segments through a read-only :class:`~tiered_log.local.log.Log` snapshot
(:meth:`Log.open_read_only <tiered_log.local.log.Log.open_read_only>`: no lock, no
recovery), and the remote tier's state from its files (the copy journal
``remote/segments.jsonl``, the metadata ``remote/meta.json``, the chunk cache's files,
the high-watermark checkpoint). It never writes, renames or deletes a file, never takes
the log's lock and never asks the bucket anything, so the directory of a running server
can be described while it runs; the result is then a snapshot of a live directory
(``live`` names the process holding it).

The dict has the shape of :func:`tiered_log.partition.report.describe` for the fields a
directory can tell (bounds, local and remote segments, copy lag, lost and unreadable
ranges, cache size); the counters of a running process (uploads, fetches, cache hits)
live in that process and are in its ``/metrics``, not here. ``high_watermark`` is the
last checkpointed one for a cluster's replica (the next offset otherwise).

Pure functions over files; safe from any thread (each call reads its own files).
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import CorruptIndexError
from ..format import naming
from ..local.log import Log, held_by
from ..partition.replication import read_high_watermark
from ..remote.metadata import CopyState, RemoteMeta, RemoteSegment


@dataclass(slots=True)
class RemoteFiles:
    """What a log directory's ``remote/`` files say, read as they are. ``notes``: what
    could not be read (a damaged journal line, damaged metadata), one line each."""

    segments: list[RemoteSegment] = field(default_factory=list)
    meta: RemoteMeta = field(default_factory=RemoteMeta)
    cache_bytes: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def finished(self) -> list[RemoteSegment]:
        return [s for s in self.segments if s.state == CopyState.COPY_FINISHED]

    def served_end(self, seg: RemoteSegment) -> int:
        """One past the last offset ``seg`` serves (its clip when truncated)."""
        return min(seg.next_offset, self.meta.clips.get(seg.id, seg.next_offset))

    @property
    def start_offset(self) -> int:
        fin = self.finished
        return (
            max(self.meta.log_start_offset, fin[0].base_offset)
            if fin
            else (self.meta.log_start_offset)
        )

    @property
    def remote_end(self) -> int:
        fin = self.finished
        return self.served_end(fin[-1]) if fin else self.meta.log_start_offset


def read_remote_files(log_dir: Path) -> RemoteFiles:
    """The copy journal (last line per attempt wins; a torn last line, an append under
    way, is skipped), the metadata and the cache's size, as the files are now."""
    rdir = log_dir / naming.REMOTE_DIR
    out = RemoteFiles()
    try:
        lines = (rdir / naming.COPY_JOURNAL_FILE).read_bytes().split(b"\n")
    except FileNotFoundError:
        lines = []
    by_id: dict[str, RemoteSegment] = {}
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            seg = RemoteSegment.from_dict(json.loads(line))
        except (ValueError, CorruptIndexError, AttributeError, TypeError) as exc:
            if n < len(lines):
                out.notes.append(f"copy journal line {n} does not read ({exc})")
            continue
        by_id[seg.id] = seg
    out.segments = sorted(
        (s for s in by_id.values() if s.state != CopyState.DELETE_FINISHED),
        key=lambda s: (s.base_offset, s.updated_ms),
    )
    try:
        out.meta = RemoteMeta.load(rdir / naming.REMOTE_META_FILE)
    except CorruptIndexError as exc:
        out.notes.append(f"{naming.REMOTE_META_FILE} does not read ({exc.message})")
    with contextlib.suppress(OSError), os.scandir(rdir / naming.CHUNK_CACHE_DIR) as it:
        for e in it:
            if not e.name.endswith(naming.TMP_SUFFIX):
                with contextlib.suppress(OSError):  # evicted meanwhile
                    out.cache_bytes += e.stat().st_size
    return out


def describe_log(
    directory: Path, log_id: str, remote_url: str | None, *, remote: bool
) -> dict[str, Any]:
    """The description of the log in ``directory`` (see the module docstring).
    ``remote``: the log has a remote tier (at ``remote_url``, None if not recorded).
    InvalidArgumentError when the directory holds no segment and no remote state."""
    rf = read_remote_files(directory) if remote else None
    holder = held_by(directory)
    has_segments = bool(naming.list_segment_bases(directory))
    local = Log.open_read_only(directory) if has_segments or rf is None else None
    try:
        segs = local.segments() if local is not None else []
        past_tail = local.recovery.truncated_bytes if local is not None else 0
    finally:
        if local is not None:
            local.close()
    remote_end = rf.remote_end if rf is not None else None
    local_start = segs[0].base_offset if segs else (remote_end or 0)
    nxt = segs[-1].next_offset if segs else local_start
    log_start = local_start
    if rf is not None and rf.remote_end > rf.start_offset and rf.start_offset < local_start:
        log_start = rf.start_offset
    hw = read_high_watermark(directory / naming.HIGH_WATERMARK_FILE)
    end = local_start if remote_end is None else remote_end
    lag = [s for s in segs if rf is not None and s.sealed and s.base_offset >= end]
    out: dict[str, Any] = {
        "log_id": log_id,
        "live": holder,
        "bounds": {
            "log_start_offset": log_start,
            "local_start_offset": local_start,
            "remote_end_offset": local_start if remote_end is None else remote_end,
            "high_watermark": nxt if hw is None else min(hw, nxt),
            "next_offset": nxt,
            "flushed_offset": nxt,
        },
        "local_segments": [
            {
                "base_offset": s.base_offset,
                "next_offset": s.next_offset,
                "size": s.size,
                "sealed": s.sealed,
                "copied": rf is not None and s.next_offset <= end,
            }
            for s in segs
        ],
        "local_bytes": sum(s.size for s in segs),
        "unverified_tail_bytes": past_tail,
        "copy_lag_segments": len(lag),
        "copy_lag_bytes": sum(s.size for s in lag),
        "remote_enabled": rf is not None,
        "lost_offsets": [list(x) for x in rf.meta.lost] if rf is not None else [],
    }
    if rf is not None:
        damaged = [s for s in rf.finished if s.unreadable]
        out.update(
            {
                "remote_url": remote_url,
                "remote_bytes": sum(s.size for s in rf.finished),
                "remote_segments": [
                    {
                        "id": s.id,
                        "base_offset": s.base_offset,
                        "next_offset": rf.served_end(s),
                        "size": s.size,
                        "state": str(s.state),
                    }
                    for s in rf.segments
                ],
                "cache_bytes": rf.cache_bytes,
                "cache_hit_rate": None,
                "remote_damage": [
                    {
                        "id": s.id,
                        "base_offset": s.base_offset,
                        "next_offset": rf.served_end(s),
                        "problem": "its manifest and data object were found damaged",
                    }
                    for s in damaged
                ],
                "notes": rf.notes,
            }
        )
    return out


__all__ = ["RemoteFiles", "describe_log", "read_remote_files"]
