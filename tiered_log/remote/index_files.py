"""The local remote-index files of one log: remoteLogIndex, remoteOffsetIndex, remoteTimeIndex.

Entry layouts are in :mod:`tiered_log.format.remote_index`. The three files rotate
together (by size of the remoteLogIndex file, or age) and share a base name, the first
offset they cover (``<first>.remoteLogIndex`` ...). Lookups use the offset and time
index files, which are small and kept in memory as arrays; the remoteLogIndex entry a
lookup lands on is read with one ``pread``.

The files are derived data: what counts is the copy journal and the ``.rli`` objects in
the bucket. They are validated on open (:meth:`RemoteIndexFiles.problems`) and rebuilt
whole (:meth:`RemoteIndexFiles.rewrite`) when missing, damaged or out of step.

Thread-safety: appends, rewrites and file drops serialize on an internal lock; lookups
may run concurrently from any thread (they read immutable snapshots of the file list
and append-only arrays).
"""

from __future__ import annotations

import io
import os
import shutil
import threading
import time
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import CorruptIndexError
from ..format import naming
from ..format.remote_index import (
    OFFSET_ENTRY,
    OFFSET_ENTRY_SIZE,
    TIME_ENTRY,
    TIME_ENTRY_SIZE,
    RemoteLogIndexEntry,
    decode_entries,
)
from ..local.segment import fsync_dir

_ENTRY_READ = 1024
_BLOCK_READ = 64 << 10


@dataclass
class _IndexFile:
    """One set of the three files, as loaded: the offset and time entries in memory, and
    the remoteLogIndex file held open (``reader``) from the moment the set is known, so
    that a reader holding this set reads *its* file even after a rebuild renamed a new
    one over the path or a drop unlinked it (the descriptor closes when the last
    holder lets go of the set)."""

    base: int
    log_path: Path
    offset_path: Path
    time_path: Path
    first_offsets: array = field(default_factory=lambda: array("q"))  # type: ignore[type-arg]
    positions: array = field(default_factory=lambda: array("q"))  # type: ignore[type-arg]
    time_max: array = field(default_factory=lambda: array("q"))  # type: ignore[type-arg]
    time_pos: array = field(default_factory=lambda: array("q"))  # type: ignore[type-arg]
    size: int = 0
    created: float = field(default_factory=time.time)
    last_offset: int = -1
    reader: io.FileIO | None = None

    def open_reader(self) -> None:
        """Open the remoteLogIndex file for reading (its inode from now on)."""
        self.reader = io.FileIO(self.log_path, "r")

    def _fd(self) -> int:
        assert self.reader is not None, "opened when the set became known"
        return self.reader.fileno()

    def read_entry(self, position: int) -> tuple[RemoteLogIndexEntry, int]:
        fd = self._fd()
        try:
            buf = os.pread(fd, _ENTRY_READ, position)
            entry, end = RemoteLogIndexEntry.decode_from(buf, 0)
            return entry, position + end
        except CorruptIndexError:
            # An entry longer than one read (a very long object key): read it whole.
            buf = os.pread(fd, 1 << 16, position)
            entry, end = RemoteLogIndexEntry.decode_from(buf, 0)
            return entry, position + end

    def iter_entries(self, j: int) -> Iterator[RemoteLogIndexEntry]:
        """Entries ``j``, ``j+1``, ... of this file in order, read in blocks of
        ``_BLOCK_READ`` bytes (a sequential reader looks up many entries, and a read
        per entry cost more than the decoding)."""
        fd = self._fd()
        buf = b""
        buf_pos = 0  # file position of buf[0]
        while j < len(self.positions):
            pos = self.positions[j]
            rel = pos - buf_pos
            try:
                if rel < 0 or rel >= len(buf):
                    raise CorruptIndexError("outside the block")
                entry, _ = RemoteLogIndexEntry.decode_from(buf, rel)
            except CorruptIndexError:
                # Not (wholly) in the block read: read the next block from here. An
                # entry damaged on disk fails again here and is raised.
                buf = os.pread(fd, _BLOCK_READ, pos)
                buf_pos = pos
                entry, _ = RemoteLogIndexEntry.decode_from(buf, 0)
            yield entry
            j += 1


def _paths(directory: Path, base: int) -> tuple[Path, Path, Path]:
    name = naming.offset_name(base)
    return (
        directory / (name + naming.REMOTE_LOG_INDEX_SUFFIX),
        directory / (name + naming.REMOTE_OFFSET_INDEX_SUFFIX),
        directory / (name + naming.REMOTE_TIME_INDEX_SUFFIX),
    )


class RemoteIndexFiles:
    """Remote-index files of one log, in ``directory``; see the module docstring."""

    def __init__(
        self,
        directory: Path,
        *,
        rotate_bytes: int = 16 << 20,
        rotate_ms: int = 7 * 24 * 3600 * 1000,
    ) -> None:
        self.directory = directory
        self.rotate_bytes = rotate_bytes
        self.rotate_ms = rotate_ms
        self._lock = threading.Lock()
        directory.mkdir(parents=True, exist_ok=True)
        self._files: list[_IndexFile] = []
        self._damage: list[str] = []
        self._load()

    # ---- loading and validation -----------------------------------------------------------

    def _load(self) -> None:
        bases = sorted(
            b
            for p in self.directory.iterdir()
            if (b := naming.parse_offset_name(p.name, naming.REMOTE_LOG_INDEX_SUFFIX)) is not None
        )
        files: list[_IndexFile] = []
        for base in bases:
            lp, op, tp = _paths(self.directory, base)
            f = _IndexFile(base, lp, op, tp)
            try:
                f.open_reader()
                data = lp.read_bytes()
                f.size = len(data)
                entries = list(decode_entries(data))
                odata = op.read_bytes()
                tdata = tp.read_bytes()
                if len(odata) % OFFSET_ENTRY_SIZE or len(tdata) % TIME_ENTRY_SIZE:
                    raise CorruptIndexError("remote offset/time index of the wrong size")
                for o, p in OFFSET_ENTRY.iter_unpack(odata):
                    f.first_offsets.append(o)
                    f.positions.append(p)
                for t, p in TIME_ENTRY.iter_unpack(tdata):
                    f.time_max.append(t)
                    f.time_pos.append(p)
                if [(e.first_offset, p) for p, e in entries] != list(
                    zip(f.first_offsets, f.positions, strict=False)
                ) or len(entries) != len(f.first_offsets):
                    raise CorruptIndexError("remoteOffsetIndex does not match remoteLogIndex")
                running = -1
                expect_t: list[tuple[int, int]] = []
                prev_last = files[-1].last_offset if files else -1
                for p, e in entries:
                    if e.first_offset <= prev_last:
                        raise CorruptIndexError("remoteLogIndex offsets are not increasing")
                    prev_last = e.last_offset
                    if e.last_timestamp > running:
                        running = e.last_timestamp
                        expect_t.append((running, p))
                if expect_t != list(zip(f.time_max, f.time_pos, strict=False)):
                    raise CorruptIndexError("remoteTimeIndex does not match remoteLogIndex")
                f.last_offset = prev_last
                f.created = lp.stat().st_mtime
            except (OSError, CorruptIndexError) as exc:
                self._damage.append(f"{lp.name}: {exc}")
                continue
            files.append(f)
        self._files = files

    def problems(self) -> list[str]:
        """What was found damaged when the files were loaded (empty when all is well)."""
        return list(self._damage)

    # ---- writing (the shipper) -----------------------------------------------------------

    def append(self, entries: Sequence[RemoteLogIndexEntry]) -> None:
        """Append one segment's entries (in offset order) to the three files."""
        if not entries:
            return
        with self._lock:
            cur = self._files[-1] if self._files else None
            if (
                cur is None
                or cur.size >= self.rotate_bytes
                or ((time.time() - cur.created) * 1000 >= self.rotate_ms)
            ):
                cur = self._new_file(entries[0].first_offset)
            running = cur.time_max[-1] if len(cur.time_max) else -1
            blob = bytearray()
            oblob = bytearray()
            tblob = bytearray()
            pos = cur.size
            new_pos: list[int] = []
            for e in entries:
                enc = e.encode()
                blob += enc
                oblob += OFFSET_ENTRY.pack(e.first_offset, pos)
                if e.last_timestamp > running:
                    running = e.last_timestamp
                    tblob += TIME_ENTRY.pack(running, pos)
                new_pos.append(pos)
                pos += len(enc)
            # Written, not fsynced: the files are derived data (see the module docstring).
            # After a machine crash a lost or torn tail is found on open (entries out of
            # step with the journal, a bad crc, or the three files disagreeing) and the
            # files are rebuilt from the manifests; an fsync here would only make the
            # producer's own fsyncs wait on the shipper's.
            for path, data in (
                (cur.log_path, blob),
                (cur.offset_path, oblob),
                (cur.time_path, tblob),
            ):
                with open(path, "ab") as fh:
                    fh.write(data)
            # Publish to readers only after the bytes are in the files.
            running = cur.time_max[-1] if len(cur.time_max) else -1
            for e, p in zip(entries, new_pos, strict=True):
                cur.first_offsets.append(e.first_offset)
                cur.positions.append(p)
                if e.last_timestamp > running:
                    running = e.last_timestamp
                    cur.time_max.append(running)
                    cur.time_pos.append(p)
            cur.size = pos
            cur.last_offset = entries[-1].last_offset

    def _new_file(self, base: int) -> _IndexFile:
        lp, op, tp = _paths(self.directory, base)
        for p in (lp, op, tp):
            p.write_bytes(b"")
        fsync_dir(self.directory)
        f = _IndexFile(base, lp, op, tp)
        f.open_reader()
        self._files = [*self._files, f]
        return f

    def rewrite(self, entries: Sequence[RemoteLogIndexEntry]) -> None:
        """Replace every file with ones holding exactly ``entries`` (a rebuild), at once
        for readers: the new files are written beside the directory, renamed over the
        old names, and published in one step; a lookup under way keeps reading the old
        set it holds (never a file half written, never one missing)."""
        stage = self.directory.with_name(self.directory.name + ".rewrite")
        shutil.rmtree(stage, ignore_errors=True)
        staged = RemoteIndexFiles(stage, rotate_bytes=self.rotate_bytes, rotate_ms=self.rotate_ms)
        staged._fill(entries)
        with self._lock:
            files: list[_IndexFile] = []
            for f in staged._files:
                lp, op, tp = _paths(self.directory, f.base)
                for src, dst in ((f.log_path, lp), (f.offset_path, op), (f.time_path, tp)):
                    os.replace(src, dst)
                f.log_path, f.offset_path, f.time_path = lp, op, tp  # same inodes
                files.append(f)
            keep = {p.name for f in files for p in (f.log_path, f.offset_path, f.time_path)}
            for p in self.directory.iterdir():
                if p.suffix in naming.REMOTE_INDEX_SUFFIXES and p.name not in keep:
                    p.unlink(missing_ok=True)
            self._files = files
            self._damage = []
            fsync_dir(self.directory)
        shutil.rmtree(stage, ignore_errors=True)

    def _fill(self, entries: Sequence[RemoteLogIndexEntry]) -> None:
        """Append ``entries`` to empty files; rotation by size still applies: written in
        file-sized groups."""
        group: list[RemoteLogIndexEntry] = []
        size = 0
        for e in entries:
            group.append(e)
            size += 80
            if size >= self.rotate_bytes:
                self.append(group)  # the next append starts a new file
                group, size = [], 0
        self.append(group)

    def drop_files_below(self, offset: int) -> int:
        """Delete whole files whose every entry lies below ``offset`` (remote retention).

        Never the newest file. Returns how many file sets were removed.
        """
        with self._lock:
            doomed = [f for f in self._files[:-1] if f.last_offset < offset]
            if not doomed:
                return 0
            self._files = self._files[len(doomed) :]
            for f in doomed:
                for p in (f.log_path, f.offset_path, f.time_path):
                    p.unlink(missing_ok=True)
            fsync_dir(self.directory)
            return len(doomed)

    # ---- lookups (any thread) -------------------------------------------------------------

    @property
    def last_offset(self) -> int:
        """Last offset covered by any entry, or -1."""
        files = self._files
        return files[-1].last_offset if files else -1

    def _locate(self, offset: int) -> tuple[int, int] | None:
        files = self._files
        i = bisect_right([f.base for f in files], offset) - 1
        if i < 0:
            return None
        j = bisect_right(files[i].first_offsets, offset) - 1
        if j < 0:
            return None
        return i, j

    def floor_entry(self, offset: int) -> RemoteLogIndexEntry | None:
        """The entry whose chunk holds ``offset`` (the last with first_offset <= offset)."""
        loc = self._locate(offset)
        if loc is None:
            return None
        f = self._files[loc[0]]
        return f.read_entry(f.positions[loc[1]])[0]

    def entries_from(self, offset: int) -> Iterator[RemoteLogIndexEntry]:
        """Entries in order, starting with the one that holds ``offset`` (or the next)."""
        files = self._files
        loc = self._locate(offset)
        i, j = (0, 0) if loc is None else loc
        while i < len(files):
            f = files[i]
            if j < len(f.positions):
                yield from f.iter_entries(j)
            i += 1
            j = 0

    def first_entry_at_or_after_time(self, ts: int) -> RemoteLogIndexEntry | None:
        """The first chunk whose largest timestamp is >= ``ts`` (via remoteTimeIndex)."""
        for f in self._files:
            k = bisect_left(f.time_max, ts)
            if k < len(f.time_max):
                return f.read_entry(f.time_pos[k])[0]
        return None

    def all_entries(self) -> list[RemoteLogIndexEntry]:
        return list(self.entries_from(-1))

    def file_count(self) -> int:
        return len(self._files)
