"""The two result forms of a batch read, and how the second one checks what it does not copy.

A batch read (:meth:`TieredLog.read_batches <tiered_log.partition.log.TieredLog.read_batches>`)
walks stored batches, checks each one (framing, CRC-32C) and stops at the limits. It hands each
verified piece to a *page*, which decides the result's form:

- :class:`BytesPage`: the bytes themselves (read with ``pread``), joined into a
  :class:`~tiered_log.format.batch.FetchData`: what the bytes form has always returned;
- :class:`RangesPage`: *where* they are, a :class:`FetchRanges` of :class:`FileRange`
  parts (an open descriptor, a position, a length) for a sender that moves them from
  the file to a socket with ``sendfile``, never through the program. A piece that only
  exists in memory (a remote chunk not yet written to the chunk cache, a batch cut by
  a truncation and batched again) is a ``bytes`` part.

To check the batches it does not copy, a :class:`RangesPage` reads through a
:class:`MappedReader`: the file's pages are mapped read-only and checked where they lie
in the page cache. A page not resident (``mincore``) would be read from disk by the
fault, and a read error there is a ``SIGBUS`` that kills the process; so a range that
is not entirely resident is read with ``pread`` instead (an I/O error is then an
``OSError``, as on the bytes form, and the read brings the pages in for the send). A
file that shrinks while mapped would also fault: a local segment's one shrinking writer
(a truncation) and its mapped readers exclude each other on the segment's
:class:`CutGuard`, which a reader holds from before it looks at the segment's size and
index until its walk ends (so it also sees the segment whole, before or after a cut,
never half cut). Chunk cache files are replaced by renames, never shrunk.

The descriptors of a :class:`FetchRanges` are :class:`~tiered_log.local.files.ReadFd`
objects: held, they keep the bytes readable after retention deletes the segment or the
cache evicts the chunk; :meth:`FetchRanges.close` lets go of them. A truncation that
rewrites a segment's tail after the walk checked it changes what a later ``sendfile``
of that tail sends (or makes it end early): the sender must end the connection on a
short send, and the client's own CRC check refuses a changed batch.

Thread-safety: a page and its readers belong to the one thread that walks; a
:class:`FetchRanges` is handed over whole (to the event loop that sends it); a
:class:`CutGuard` is shared by the threads that read a segment and the one that cuts it.
Linux only for the mapped checks (``mincore`` through ``ctypes``); elsewhere every check
reads with ``pread``.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import mmap
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol, TypeVar

from ..format.batch import FetchData
from .files import ReadFd

R_co = TypeVar("R_co", covariant=True)
Reader = Callable[[int, int], "bytes | memoryview"]
"""``read(position, length)``: a file's bytes (fewer at its end)."""


@dataclass(frozen=True, slots=True)
class FileRange:
    """``length`` bytes of an open file from ``position`` on (verified batches)."""

    fd: ReadFd
    position: int
    length: int


class FetchRanges:
    """A batch read's result as places (see the module docstring): the same batches a
    :class:`~tiered_log.format.batch.FetchData` would hold, in order, as file ranges and
    (rarely) bytes in memory. Holds its files open until :meth:`close` (or until it is
    collected). Handed from the reading thread to one sender; not shared."""

    __slots__ = ("first_offset", "next_offset", "parts")

    def __init__(
        self, parts: list[FileRange | bytes | memoryview], first_offset: int, next_offset: int
    ) -> None:
        self.parts = parts
        self.first_offset = first_offset
        self.next_offset = next_offset

    @property
    def count(self) -> int:
        """Records from ``first_offset`` the batches hold."""
        return self.next_offset - self.first_offset

    @property
    def size(self) -> int:
        """Bytes of the batches."""
        return sum(p.length if isinstance(p, FileRange) else len(p) for p in self.parts)

    @property
    def file_bytes(self) -> int:
        """Bytes of the batches that lie in files (sent without a copy)."""
        return sum(p.length for p in self.parts if isinstance(p, FileRange))

    def read(self) -> bytes:
        """The batches' bytes (for tests and tools: a copy, which senders avoid)."""
        return b"".join(
            p.fd.pread(p.length, p.position) if isinstance(p, FileRange) else bytes(p)
            for p in self.parts
        )

    def close(self) -> None:
        """Let go of the files (a descriptor closes when its last holder lets go)."""
        self.parts = []


class CutGuard:
    """Mapped readers of a file and the one writer that shrinks it, apart: a reader
    :meth:`enter`\\ s before it looks at the file (waiting out a cut under way) and
    :meth:`exit`\\ s once its mappings are gone; :meth:`cutting` waits for the readers
    inside and keeps new ones waiting until the cut is done. Readers hold it for
    milliseconds (a page's checks) and take no other lock meanwhile, so a cut (under
    its log's lock) never waits long. Thread-safe."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._cutting = False

    def enter(self) -> None:
        with self._cond:
            self._cond.wait_for(lambda: not self._cutting)
            self._readers += 1

    def exit(self) -> None:
        with self._cond:
            self._readers -= 1
            if not self._readers:
                self._cond.notify_all()

    @contextlib.contextmanager
    def cutting(self) -> Iterator[None]:
        with self._cond:
            self._cutting = True
            self._cond.wait_for(lambda: not self._readers)
        try:
            yield
        finally:
            with self._cond:
                self._cutting = False
                self._cond.notify_all()


def _load_mincore() -> Callable[[int, int, ctypes.Array[ctypes.c_char]], int] | None:
    name = ctypes.util.find_library("c")
    try:
        fn = ctypes.CDLL(name, use_errno=True).mincore if name else None
    except (OSError, AttributeError):
        return None
    if fn is None:
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    fn.restype = ctypes.c_int
    return fn  # type: ignore[no-any-return]


_mincore = _load_mincore()
_RESIDENT_BIT = bytes(b & 1 for b in range(256))


def _resident(m: mmap.mmap, length: int) -> bool:
    """Whether every page of the mapping ``m`` is in the page cache (``mincore``)."""
    if _mincore is None:
        return False
    addr = ctypes.addressof(ctypes.c_char.from_buffer(m))  # the export ends with the statement
    pages = -(-length // mmap.PAGESIZE)
    vec = ctypes.create_string_buffer(pages)
    if _mincore(addr, length, vec) != 0:
        return False
    return vec.raw[:pages].translate(_RESIDENT_BIT).count(0) == 0


class MappedReader:
    """Views of one file for checking batches without copying them (see the module
    docstring): the range mapped when all its pages are resident, else ``pread``
    bytes. With a ``guard`` it enters it at once and exits at :meth:`release`, which
    also unmaps (views still held elsewhere keep their mapping alive until they go;
    nothing reads through them after the walk). One thread."""

    def __init__(self, fd: ReadFd, guard: CutGuard | None = None) -> None:
        self._fd = fd
        self._guard = guard
        self._maps: list[mmap.mmap] = []
        if guard is not None:
            guard.enter()

    def __call__(self, position: int, length: int) -> bytes | memoryview:
        if length > 0 and _mincore is not None:
            start = position - position % mmap.ALLOCATIONGRANULARITY
            try:
                m = mmap.mmap(
                    self._fd.fd, position - start + length, offset=start, access=mmap.ACCESS_COPY
                )
            except (OSError, ValueError):  # past the file's end (cut meanwhile): pread
                m = None
            if m is not None:
                if _resident(m, position - start + length):
                    self._maps.append(m)
                    return memoryview(m)[position - start :]
                m.close()
        return self._fd.pread(length, position)

    def inside(self, guard: CutGuard) -> bool:
        """Whether this reader has entered ``guard`` and not released it yet."""
        return self._guard is guard

    def release(self) -> None:
        maps, self._maps = self._maps, []
        for m in maps:
            with contextlib.suppress(BufferError):  # a view still held: unmapped when it goes
                m.close()
        guard, self._guard = self._guard, None
        if guard is not None:
            guard.exit()


class Page(Protocol[R_co]):
    """What a batch walk hands its verified pieces to (see the module docstring)."""

    wants_files: bool
    """Whether pieces should come from files where they can (the remote walk then takes
    a chunk from its cache file rather than from memory)."""
    size: int
    """Bytes added so far."""

    def reader(self, fd: ReadFd, guard: CutGuard | None = None) -> Reader:
        """How to read ``fd``'s bytes for checking them (for a segment, made before its
        size and index are looked at: a mapping reader holds ``guard`` from here)."""

    def add(
        self, fd: ReadFd | None, position: int, buf: bytes | memoryview, start: int, length: int
    ) -> None:
        """A verified piece: ``buf[start:start + length]``, which is ``fd``'s bytes at
        ``position`` (``fd`` None: the piece is only in memory)."""

    def result(self, next_offset: int) -> R_co:
        """The page, ending before ``next_offset``; the page's readers are released."""

    def close(self) -> None:
        """Give up (on an error): release everything."""


class BytesPage:
    """The bytes form: pieces read with ``pread`` and joined (one piece: as it is)."""

    wants_files = False

    def __init__(self, first_offset: int) -> None:
        self.first_offset = first_offset
        self.parts: list[bytes | memoryview] = []
        self.size = 0

    def reader(self, fd: ReadFd, guard: CutGuard | None = None) -> Reader:
        return lambda position, length: fd.pread(length, position)

    def add(
        self, fd: ReadFd | None, position: int, buf: bytes | memoryview, start: int, length: int
    ) -> None:
        whole = start == 0 and length == len(buf)
        self.parts.append(buf if whole else memoryview(buf)[start : start + length])  # no copy
        self.size += length

    def result(self, next_offset: int) -> FetchData:
        parts = self.parts
        data: bytes | memoryview = parts[0] if len(parts) == 1 else b"".join(parts)
        return FetchData(data, self.first_offset, next_offset)

    def close(self) -> None:
        self.parts = []


class RangesPage:
    """The places form: pieces of files as :class:`FileRange`\\ s (consecutive pieces of
    one file merged), checked through :class:`MappedReader`\\ s."""

    wants_files = True

    def __init__(self, first_offset: int) -> None:
        self.first_offset = first_offset
        self.parts: list[FileRange | bytes | memoryview] = []
        self.size = 0
        self._readers: list[MappedReader] = []

    def reader(self, fd: ReadFd, guard: CutGuard | None = None) -> Reader:
        # A walk may come back to a segment it has read (it grew meanwhile): the page is
        # inside that segment's guard already and stays there. Entering a second time
        # would wait for a cut under way, which waits for the first entry: a deadlock.
        if guard is not None and any(r.inside(guard) for r in self._readers):
            guard = None  # this page is inside it already (the file may be another fd)
        r = MappedReader(fd, guard)
        self._readers.append(r)
        return r

    def add(
        self, fd: ReadFd | None, position: int, buf: bytes | memoryview, start: int, length: int
    ) -> None:
        self.size += length
        last = self.parts[-1] if self.parts else None
        if fd is None:
            self.parts.append(memoryview(buf)[start : start + length])
        elif (
            isinstance(last, FileRange)
            and last.fd is fd
            and last.position + last.length == position
        ):
            self.parts[-1] = FileRange(fd, last.position, last.length + length)
        else:
            self.parts.append(FileRange(fd, position, length))

    def _release(self) -> None:
        readers, self._readers = self._readers, []
        for r in readers:
            r.release()

    def result(self, next_offset: int) -> FetchRanges:
        self._release()
        return FetchRanges(self.parts, self.first_offset, next_offset)

    def close(self) -> None:
        self._release()
        self.parts = []


__all__ = [
    "BytesPage",
    "CutGuard",
    "FetchRanges",
    "FileRange",
    "MappedReader",
    "Page",
    "RangesPage",
    "Reader",
]
