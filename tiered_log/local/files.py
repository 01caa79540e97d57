"""Local file helpers: durable directory changes, atomic whole-file writes, shared read fds.

- :func:`fsync_dir`: make a create, rename or unlink in a directory durable;
- :func:`write_atomic`: ``path.tmp``, write, fsync, rename over ``path``, fsync the
  directory, so a crash leaves the old file or the new one, never a torn one (a leftover
  ``.tmp`` is ignored by whoever reads ``path``);
- :class:`ReadFd`: a read-only descriptor closed when its last holder lets go, so a reader
  is never left with a closed (or reused) descriptor by an eviction or a deletion.

Thread-safety: the functions are safe from any thread (two writers of one ``path`` at a
time are not: they share its ``.tmp``); a :class:`ReadFd` is safe to share, ``pread``
having no file position.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from ..format import naming


class ReadFd:
    """An owned read-only file descriptor, closed when the last reference goes away.

    Readers hold a reference while they read, so evicting a segment from the cache (or
    deleting its files) never closes a descriptor under a reader's feet.
    """

    __slots__ = ("fd",)

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_RDONLY)

    def pread(self, n: int, pos: int) -> bytes:
        return os.pread(self.fd, n, pos)

    def fileno(self) -> int:
        """The descriptor (valid while this object lives)."""
        return self.fd

    def __del__(self) -> None:
        fd = getattr(self, "fd", None)  # unset if os.open failed
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)


def fsync_dir(directory: Path) -> None:
    """fsync a directory so that a create, rename or unlink in it is durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: ``path.tmp``, fsync, rename, fsync the dir."""
    tmp = path.with_name(path.name + naming.TMP_SUFFIX)
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)
