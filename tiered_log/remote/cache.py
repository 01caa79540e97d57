"""A bounded on-disk cache of fetched remote chunks, LRU by bytes.

Each cached chunk is one file named by a hash of ``(object key, position, length)``
(the chunk's place and *stored* length in the bucket), written atomically (tmp,
rename). A file holds the chunk *decoded*: its batches, decompressed and decrypted
(:mod:`~tiered_log.remote.chunk_codec`), so it may be longer or shorter than the stored
length; the cache checks a file against the size it had when it entered. The LRU order lives in memory and is rebuilt from the
files' access times on open; the total size never exceeds ``max_bytes`` (a chunk larger
than the whole cache is not cached).

A fetched chunk enters in two steps. :meth:`ChunkCache.hold` keeps it in memory (up to
``memory_bytes`` of held chunks, the oldest already written dropped first; chunks not yet
written are kept even past the bound): readers get it from there at once.
:meth:`ChunkCache.persist`, later and in another thread, writes its file, unless it was
discarded meanwhile (a damaged chunk never stays on disk). A catch-up reader therefore
never waits for the cache's disk writes, nor reads back a chunk just written.

A chunk may also be fetched, verified and written by a worker process
(:mod:`~tiered_log.remote.worker`, off the producers' interpreter): :meth:`ChunkCache.expect`
before, :meth:`ChunkCache.adopt` once its file is there (:func:`write_chunk_file` is the
one way both write a chunk file); readers then read the file.

A reader that sends a chunk from its file (:meth:`ChunkCache.open_file`) holds it open:
an eviction (an unlink) or a rewrite (a rename over it) leaves the bytes it holds as
they were; files are never shrunk in place.

Thread-safety: all methods are safe from any thread (a lock guards the LRU map; file
writes go to unique temp names first).
"""

from __future__ import annotations

import os
import threading
import uuid
from collections import OrderedDict
from pathlib import Path

import xxhash

from ..format import naming
from ..local.files import ReadFd


def chunk_file_name(key: str, position: int, length: int) -> str:
    """The cache file name of the chunk ``[position, position + length)`` of object ``key``."""
    return xxhash.xxh3_128_hexdigest(f"{key}\0{position}\0{length}".encode())


def write_chunk_file(directory: Path, name: str, data: bytes | memoryview) -> bool:
    """Write a chunk's cache file atomically (a unique temp name, then a rename over
    ``name``); whether it was written. Any process may call it: the cache's own threads
    and the tier's worker processes (:mod:`~tiered_log.remote.worker`)."""
    tmp = directory / f"{name}.{uuid.uuid4().hex}{naming.TMP_SUFFIX}"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, directory / name)
    except OSError:
        tmp.unlink(missing_ok=True)
        return False
    return True


class ChunkCache:
    """See the module docstring."""

    def __init__(self, directory: Path, max_bytes: int, memory_bytes: int = 0) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self.memory_bytes = memory_bytes
        self._lock = threading.Lock()
        self._lru: OrderedDict[str, int] = OrderedDict()
        self._bytes = 0
        self._fresh: OrderedDict[str, bytes] = OrderedDict()  # held, not read yet
        self._fresh_bytes = 0
        # Held and not written yet (not discarded): how many writes of each are due
        # (two fetches of one chunk may both hold it; the file is good after either).
        self._pending: dict[str, int] = {}
        self.hits = 0
        self.misses = 0
        directory.mkdir(parents=True, exist_ok=True)
        found = []
        for p in directory.iterdir():
            if p.name.endswith(naming.TMP_SUFFIX):
                p.unlink(missing_ok=True)
                continue
            try:
                st = p.stat()
            except OSError:
                continue
            found.append((st.st_atime, p.name, st.st_size))
        for _, name, size in sorted(found):
            self._lru[name] = size
            self._bytes += size
        self._evict()

    _name = staticmethod(chunk_file_name)

    def get(self, key: str, position: int, length: int) -> bytes | None:
        name = self._name(key, position, length)
        with self._lock:
            fresh = self._fresh.get(name)
            if fresh is not None:
                self.hits += 1
                if name in self._lru:
                    self._lru.move_to_end(name)
                return fresh
            if name not in self._lru:
                self.misses += 1
                return None
            self._lru.move_to_end(name)
        try:
            data = (self.directory / name).read_bytes()
        except OSError:
            data = b""
        with self._lock:
            size = self._lru.get(name)
        if len(data) != size:
            self.discard(key, position, length)
            with self._lock:
                self.misses += 1
            return None
        with self._lock:
            self.hits += 1
        return data

    def open_file(self, key: str, position: int, length: int) -> ReadFd | None:
        """The chunk's file, opened (held, it stays readable after an eviction), when it
        is on disk with the size it entered with (the decoded chunk's: read it whole); None when it is not (only in memory, being
        written, or not cached: read it with :meth:`get`). Counts a hit when found."""
        name = self._name(key, position, length)
        with self._lock:
            if name not in self._lru or name in self._pending:
                return None
            self._lru.move_to_end(name)
            size = self._lru[name]
        try:
            fd = ReadFd(self.directory / name)
        except OSError:
            return None
        if os.fstat(fd.fd).st_size != size:
            self.discard(key, position, length)
            return None
        with self._lock:
            self.hits += 1
        return fd

    def contains(self, key: str, position: int, length: int) -> bool:
        name = self._name(key, position, length)
        return name in self._lru or name in self._fresh

    def hold(self, key: str, position: int, data: bytes, length: int | None = None) -> None:
        """Keep a fetched chunk (stored ``length`` bytes at ``position``, by default
        ``len(data)``: a plain chunk; ``data`` decoded) in memory for :meth:`get`;
        :meth:`persist` it next (without that, it stays in memory only, and past the
        bound, for ever)."""
        name = self._name(key, position, len(data) if length is None else length)
        with self._lock:
            self._take_fresh(name)
            self._pending[name] = self._pending.get(name, 0) + 1
            if len(data) <= self.memory_bytes:
                self._fresh[name] = data
                self._fresh_bytes += len(data)
                self._trim_fresh()

    def _trim_fresh(self) -> None:
        """Drop the oldest held chunks past ``memory_bytes``, but only those whose file is
        written: one not yet persisted stays (briefly over the bound) so that a reader
        never has to fetch it again (caller holds the lock)."""
        if self._fresh_bytes <= self.memory_bytes:
            return
        for name in [n for n in self._fresh if n not in self._pending]:
            self._fresh_bytes -= len(self._fresh.pop(name))
            if self._fresh_bytes <= self.memory_bytes:
                return

    def persist(self, key: str, position: int, data: bytes, length: int | None = None) -> None:
        """Write a held chunk's file (atomically), unless it was discarded since
        (``length`` as for :meth:`hold`)."""
        self._write(
            self._name(key, position, len(data) if length is None else length), data, held=True
        )

    def put(self, key: str, position: int, data: bytes, length: int | None = None) -> None:
        """Write the file of the chunk ``data`` (stored ``length`` bytes, by default
        ``len(data)``: a plain chunk) (tmp, rename) and enter it in the LRU."""
        n = len(data) if length is None else length
        self._write(self._name(key, position, n), data, held=False)

    def expect(self, key: str, position: int, length: int) -> None:
        """A chunk's file is about to be written by someone else (a worker process,
        :func:`write_chunk_file`): :meth:`adopt` enters it once written, unless it is
        discarded meanwhile."""
        name = self._name(key, position, length)
        with self._lock:
            self._pending[name] = self._pending.get(name, 0) + 1

    def adopt(
        self, key: str, position: int, length: int, written: bool, size: int | None = None
    ) -> None:
        """After :meth:`expect`: the file was ``written`` with ``size`` bytes (the decoded
        chunk's; default ``length``) (enter it in the LRU, unless discarded meanwhile,
        then it is removed) or not (forget the expectation)."""
        name = self._name(key, position, length)
        path = self.directory / name
        n = length if size is None else size
        if written and n > self.max_bytes:  # never cached: larger than the whole cache
            path.unlink(missing_ok=True)
            written = False
        self._enter(name, path, n, written, held=True)

    def _write(self, name: str, data: bytes, *, held: bool) -> None:
        if held:
            with self._lock:
                if name not in self._pending:
                    return
        ok = len(data) <= self.max_bytes and write_chunk_file(self.directory, name, data)
        self._enter(name, self.directory / name, len(data), ok, held=held)

    def _enter(self, name: str, path: Path, length: int, ok: bool, *, held: bool) -> None:
        """A chunk file written (``ok``) or not: in the LRU, unless it was held and
        discarded meanwhile (then its file goes)."""
        with self._lock:
            if held and name not in self._pending:
                ok = False  # discarded while being written: it must not stay
                path.unlink(missing_ok=True)
            elif held:
                left = self._pending[name] - 1
                if left:
                    self._pending[name] = left
                else:
                    del self._pending[name]
            if ok:
                old = self._lru.pop(name, None)
                if old is not None:
                    self._bytes -= old
                self._lru[name] = length
                self._bytes += length
                self._evict()
            self._trim_fresh()

    def _take_fresh(self, name: str) -> bytes | None:
        """Remove and return the in-memory copy of ``name`` (caller holds the lock)."""
        data = self._fresh.pop(name, None)
        if data is not None:
            self._fresh_bytes -= len(data)
        return data

    def discard(self, key: str, position: int, length: int) -> None:
        name = self._name(key, position, length)
        with self._lock:
            size = self._lru.pop(name, None)
            if size is not None:
                self._bytes -= size
            self._take_fresh(name)
            self._pending.pop(name, None)
        (self.directory / name).unlink(missing_ok=True)

    def _evict(self) -> None:
        while self._bytes > self.max_bytes and self._lru:
            name, size = self._lru.popitem(last=False)
            self._bytes -= size
            (self.directory / name).unlink(missing_ok=True)

    @property
    def size_bytes(self) -> int:
        return self._bytes

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0
