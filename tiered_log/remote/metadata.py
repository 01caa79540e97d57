"""Persisted remote-tier state of one log: the copy journal and the log's remote metadata.

**Copy journal** (``<log dir>/remote/segments.jsonl``): one JSON object per line, appended
and fsynced at every state change of a copy attempt; the last line for an attempt id
wins. Each attempt of copying a segment has its own unique id, which is also part of its
object keys, so retries never overwrite each other and cleanup knows exactly what to
delete. States (as in Kafka's RemoteLogSegmentState)::

    COPY_STARTED -> COPY_FINISHED -> DELETE_STARTED -> DELETE_FINISHED
          \\-> DELETE_STARTED (a failed or interrupted copy being cleaned up)

A torn last line (crash mid-append: no newline after it) is ignored: the state it would
have recorded is re-derived (a copy without COPY_FINISHED is cleaned up and retried).
The journal is compacted (rewritten atomically with one line per live attempt) on open,
so only the last line can ever be torn. Any other line that does not read is damage:
it is listed in :attr:`CopyJournal.damaged`, the file is left as it is, and the owner
recovers what the line described from the bucket (never silently forgets a copy).

**Remote metadata** (``meta.json`` locally, ``<log>/meta.json`` in the bucket): the log
start offset as moved by remote retention and truncation, per-segment clip offsets
(a segment truncated in the middle serves only offsets below its clip), the end offset
last recorded (offsets below it were handed out: a log rebuilt from the bucket resumes
above them) and the ranges found lost at such a rebuild.

Thread-safety: :class:`CopyJournal` serializes writers with a lock; reads of its
in-memory map take a snapshot.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from bisect import insort
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from pathlib import Path

from ..errors import CorruptIndexError
from ..local.segment import write_atomic


class CopyState(StrEnum):
    """Where a copy attempt stands (Kafka's RemoteLogSegmentState)."""

    COPY_STARTED = "COPY_STARTED"
    COPY_FINISHED = "COPY_FINISHED"
    DELETE_STARTED = "DELETE_STARTED"
    DELETE_FINISHED = "DELETE_FINISHED"

    def can_become(self, new: CopyState) -> bool:
        """Whether an attempt in this state may be journaled in ``new`` (as Kafka's
        ``RemoteLogSegmentState.isValidTransition``)."""
        return new in _NEXT[self]

    @staticmethod
    def can_start_in(state: CopyState) -> bool:
        """Whether an attempt the journal does not know yet may first be journaled in
        ``state``: COPY_STARTED (a new copy) or COPY_FINISHED (a copy recovered from the
        bucket, whose manifest was checked)."""
        return state in (CopyState.COPY_STARTED, CopyState.COPY_FINISHED)


_NEXT: dict[CopyState, frozenset[CopyState]] = {
    CopyState.COPY_STARTED: frozenset((CopyState.COPY_FINISHED, CopyState.DELETE_STARTED)),
    CopyState.COPY_FINISHED: frozenset((CopyState.DELETE_STARTED,)),
    CopyState.DELETE_STARTED: frozenset((CopyState.DELETE_FINISHED,)),
    CopyState.DELETE_FINISHED: frozenset(),
}


def new_segment_id() -> str:
    """A unique id for one copy attempt (URL- and key-safe)."""
    return uuid.uuid4().hex


@dataclass(frozen=True, slots=True)
class RemoteSegment:
    """One copy attempt of one segment, and where it stands."""

    id: str
    base_offset: int
    next_offset: int
    size: int
    first_timestamp: int
    max_timestamp: int
    state: CopyState
    updated_ms: int = 0
    chunks: int = 0
    unreadable: bool = False
    """Journaled for a copy whose manifest and data object were both found damaged when
    it was recovered from the bucket: it holds its offsets (reads there fail) so that the
    log neither shrinks nor hands them out again."""
    leader_epoch: int | None = None
    """The leader epoch of the node that copied it (a cluster's partition; None on a
    single node). Two copies of one range in the bucket (a deposed leader finished one
    late): the higher epoch's is kept, the other deleted."""

    @property
    def last_offset(self) -> int:
        return self.next_offset - 1

    def to_json(self) -> str:
        d = asdict(self)
        d["state"] = str(self.state)
        if not self.unreadable:
            del d["unreadable"]  # written only where it is set: other lines stay as they were
        if self.leader_epoch is None:
            del d["leader_epoch"]
        return json.dumps(d, separators=(",", ":"))

    @classmethod
    def from_dict(cls, d: dict[str, object]) -> RemoteSegment:
        try:
            return cls(
                id=str(d["id"]),
                base_offset=int(d["base_offset"]),  # type: ignore[call-overload]
                next_offset=int(d["next_offset"]),  # type: ignore[call-overload]
                size=int(d["size"]),  # type: ignore[call-overload]
                first_timestamp=int(d["first_timestamp"]),  # type: ignore[call-overload]
                max_timestamp=int(d["max_timestamp"]),  # type: ignore[call-overload]
                state=CopyState(str(d["state"])),
                updated_ms=int(d.get("updated_ms", 0)),  # type: ignore[call-overload]
                chunks=int(d.get("chunks", 0)),  # type: ignore[call-overload]
                unreadable=d.get("unreadable", False) is True,
                leader_epoch=(None if d.get("leader_epoch") is None else int(d["leader_epoch"])),  # type: ignore[call-overload]
            )
        except (KeyError, ValueError, TypeError) as exc:
            raise CorruptIndexError(f"bad remote segment record: {exc}") from exc


class CopyJournal:
    """The append-only copy-state journal; see the module docstring."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._segments: dict[str, RemoteSegment] = {}
        self._finished: list[RemoteSegment] | None = None
        """The finished copies in :meth:`finished`'s order, kept up to date as attempts
        are recorded (a copy finishing is one insertion, not a sort of the archive);
        None: to be computed from ``_segments``. With it (valid while it is not None):
        their total size and the unreadable ones among them."""
        self._finished_bytes = 0
        self._unreadable: list[RemoteSegment] = []
        self._open: dict[str, RemoteSegment] | None = None
        """The attempts started and not finished (:data:`_OPEN_STATES`), kept up to date
        as attempts are recorded; None: to be computed from ``_segments``."""
        self.damaged: list[str] = []
        """Lines that did not read, other than a torn last line: the journal is damaged
        and was not compacted (the owner recovers it, see RemoteTier)."""
        if path.exists():
            lines = path.read_bytes().split(b"\n")
            for n, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                try:
                    seg = RemoteSegment.from_dict(json.loads(line))
                except (ValueError, CorruptIndexError, AttributeError, TypeError) as exc:
                    if n < len(lines):  # a whole line (ends with a newline): damage
                        self.damaged.append(f"line {n} does not read ({exc})")
                    continue  # else a torn last line: a crash in the middle of an append
                self._segments[seg.id] = seg
        if not self.damaged:
            self.compact()

    def record(self, seg: RemoteSegment, state: CopyState) -> RemoteSegment:
        """Persist ``seg`` in ``state`` (fsynced before returning); returns the new record.
        ValueError if the journal has the attempt in a state that cannot become ``state``
        (or does not have it and ``state`` cannot start one): nothing is written."""
        return self.record_all([seg], state)[0]

    def record_all(self, segs: Sequence[RemoteSegment], state: CopyState) -> list[RemoteSegment]:
        """:meth:`record` for many attempts with one write and one fsync (a rebuild
        journals every copy it found); all or none are recorded (the checks come first)."""
        now = int(time.time() * 1000)
        news = [replace(seg, state=state, updated_ms=now) for seg in segs]
        with self._lock:
            for seg in segs:
                cur = self._segments.get(seg.id)
                ok = CopyState.can_start_in(state) if cur is None else cur.state.can_become(state)
                if not ok:
                    raise ValueError(
                        f"copy attempt {seg.id}: {cur.state if cur else 'unknown'} "
                        f"cannot become {state}"
                    )
            if news:
                with open(self.path, "ab") as f:
                    f.write(b"".join(n.to_json().encode() + b"\n" for n in news))
                    f.flush()
                    os.fsync(f.fileno())
            for n in news:
                self._segments[n.id] = n
            self._track_finished(news)
        return news

    def _track_finished(self, news: list[RemoteSegment]) -> None:
        """Keep ``_finished`` (with its size and unreadable copies) and ``_open`` in step
        with ``news`` (just recorded; a copy is journaled finished once, see
        :data:`_NEXT`). Under the lock."""
        opened = self._open
        if opened is not None:
            for n in news:
                if n.state in _OPEN_STATES:
                    opened[n.id] = n
                else:
                    opened.pop(n.id, None)
        fin = self._finished
        if fin is None:
            return
        gone = {
            n.id for n in news if n.state not in (CopyState.COPY_STARTED, CopyState.COPY_FINISHED)
        }
        if gone:
            fin = self._finished = [s for s in fin if s.id not in gone]
            self._finished_bytes = sum(s.size for s in fin)
            self._unreadable = [s for s in fin if s.unreadable]
        for n in news:
            if n.state == CopyState.COPY_FINISHED:
                insort(fin, n, key=_journal_order)
                self._finished_bytes += n.size
                if n.unreadable:
                    self._unreadable.append(n)

    def forget(self, ids: list[str]) -> None:
        """Drop finished deletions from memory (and from the file at the next compaction)."""
        with self._lock:
            for i in ids:
                self._segments.pop(i, None)
            self._finished = None
            self._open = None

    def compact(self) -> None:
        """Rewrite the journal with one line per attempt that still matters."""
        with self._lock:
            live = {k: v for k, v in self._segments.items() if v.state != CopyState.DELETE_FINISHED}
            self._segments = live
            data = "".join(
                s.to_json() + "\n" for s in sorted(live.values(), key=lambda s: s.base_offset)
            )
            write_atomic(self.path, data.encode())

    def clear(self) -> None:
        """Forget every attempt (the file is rewritten empty): the owner is about to
        rebuild the journal from the bucket (a cluster's new leader)."""
        with self._lock:
            self._segments = {}
            self._finished = None
            self._open = None
            self.damaged = []
            write_atomic(self.path, b"")

    def segments(self) -> list[RemoteSegment]:
        """Every attempt not yet fully deleted, by base offset. Any thread (a copy may be
        recording meanwhile)."""
        with self._lock:
            current = list(self._segments.values())
        return sorted(current, key=_journal_order)

    def open_attempts(self) -> list[RemoteSegment]:
        """Attempts started and not finished (a copy or a deletion an interruption left:
        :data:`_OPEN_STATES`), by base offset: what a cleanup finishes, found without a
        walk over the archive. Any thread."""
        with self._lock:
            if self._open is None:
                self._open = {k: v for k, v in self._segments.items() if v.state in _OPEN_STATES}
            current = list(self._open.values())
        return sorted(current, key=_journal_order)

    def finished(self) -> list[RemoteSegment]:
        """Copies that finished and are not being deleted, by base offset (a new list:
        the caller may keep it). Any thread."""
        return self.finished_summary()[0]

    def finished_summary(self) -> tuple[list[RemoteSegment], int, list[RemoteSegment]]:
        """:meth:`finished`, their total size in bytes and the unreadable ones among them
        (found damaged by a rebuild), at one moment, without a walk over the archive once
        known. Any thread."""
        with self._lock:
            if self._finished is None:
                fin = self._finished = sorted(
                    (s for s in self._segments.values() if s.state == CopyState.COPY_FINISHED),
                    key=_journal_order,
                )
                self._finished_bytes = sum(s.size for s in fin)
                self._unreadable = [s for s in fin if s.unreadable]
            return list(self._finished), self._finished_bytes, list(self._unreadable)


_OPEN_STATES = (CopyState.COPY_STARTED, CopyState.DELETE_STARTED)
"""An attempt in these states was interrupted unless it is in hand right now."""


def _journal_order(s: RemoteSegment) -> tuple[int, int]:
    return s.base_offset, s.updated_ms


@dataclass
class RemoteMeta:
    """The log's remote metadata: start offset and truncation clips (see module doc)."""

    log_start_offset: int = 0
    clips: dict[str, int] = field(default_factory=dict)
    version: int = 1
    end_offset: int = 0
    """The log's next offset as last recorded (a single node) or its high watermark (a
    cluster's leader): offsets below it were handed out to acknowledged records. A log
    rebuilt from the bucket resumes at or above it, never hands them out again."""
    lost: list[list[int]] = field(default_factory=list)
    """``[first, end)`` ranges handed out (below ``end_offset``) that were not in the
    bucket when the log was rebuilt from it: reported as lost, never reused."""

    def to_bytes(self) -> bytes:
        d = asdict(self)
        for name in ("end_offset", "lost"):  # written only when set: old files unchanged
            if not d[name]:
                del d[name]
        return json.dumps(d, sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> RemoteMeta:
        try:
            d = json.loads(data)
            return cls(
                int(d.get("log_start_offset", 0)),
                {str(k): int(v) for k, v in d.get("clips", {}).items()},
                int(d.get("version", 1)),
                int(d.get("end_offset", 0)),
                [[int(a), int(b)] for a, b in d.get("lost", [])],
            )
        except (ValueError, TypeError, AttributeError) as exc:
            raise CorruptIndexError(f"bad remote metadata: {exc}") from exc

    def save(self, path: Path) -> None:
        write_atomic(path, self.to_bytes())

    @classmethod
    def load(cls, path: Path) -> RemoteMeta:
        if not path.exists():
            return cls()
        return cls.from_bytes(path.read_bytes())
