"""Local-directory object store: the embedded default remote tier, and the test double.

An object is the file ``root/<key>`` (``/`` in keys become directories). Its xxh3-128 digest
is kept in the extended attribute ``user.tiered_log.xxh3`` of that file, set on the temp file
before it is renamed into place, so data and digest are published together. Where the file
system has no user xattrs, the digest goes to a small file ``.<name>.xxh3`` next to the object
instead (itself written atomically; hidden from :meth:`LocalDirStorage.list`).

Writes are atomic and durable: ``<name>.tmp-<uuid>``, flush, fsync, rename, fsync the
directory. Ranged reads use ``pread`` on one descriptor.

Differences from S3, inherent to a file tree: a key cannot also be a "directory" of other
keys (``a`` and ``a/b`` cannot both exist: the second put raises a non-retriable
RemoteStorageError), and a key's last segment may not look like one of our temp or digest
files (``*.tmp-<32 hex digits>``, ``.*.xxh3``: InvalidArgumentError). Empty directories left
by deletes are not removed.

Thread-safety: safe from any number of threads and processes. There is no shared mutable
state besides the file system; each write goes to its own temp file and is published by an
atomic rename, so a reader sees either the old or the new object, never a mix.
"""

from __future__ import annotations

import builtins
import contextlib
import os
import re
import stat
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

import xxhash

from ..errors import (
    InvalidArgumentError,
    RemoteCorruptionError,
    RemoteObjectNotFoundError,
    RemoteStorageError,
)
from .objects import ObjectInfo, check_keys, check_range, validate_key, validate_prefix

XATTR_NAME = "user.tiered_log.xxh3"
"""Extended attribute holding an object's xxh3-128 hex digest."""

_CHUNK = 1 << 20
_TMP_RE = re.compile(r"\.tmp-[0-9a-f]{32}$")
_SIDECAR_RE = re.compile(r"^\..+\.xxh3$")


def _is_reserved(name: str) -> bool:
    return bool(_TMP_RE.search(name) or _SIDECAR_RE.match(name))


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LocalDirStorage:
    """Objects as files under ``root`` (created if missing); see the module docstring.

    ``read_only=True`` (for readers such as the Spark source): nothing is created or
    written, not even the root or the xattr probe; a missing root raises a non-retriable
    RemoteStorageError, and so do put, put_file, delete and discard_partial.

    Implements :class:`~tiered_log.remote.storage.RemoteStorage`. Thread-safe.
    """

    def __init__(self, root: str | os.PathLike[str], *, read_only: bool = False) -> None:
        self.root = Path(root).expanduser().absolute()
        self._closed = False
        self.read_only = read_only
        if read_only:  # create nothing, probe nothing: the root must already be there
            if not self.root.is_dir():
                what = "is not a directory" if self.root.exists() else "does not exist"
                raise RemoteStorageError(f"storage directory {self.root} {what}", retriable=False)
            self.use_xattr = hasattr(os, "getxattr")
            return
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise RemoteStorageError(
                f"cannot create storage directory {self.root}: {exc}", retriable=False
            ) from exc
        if not self.root.is_dir():
            raise RemoteStorageError(
                f"storage root {self.root} is not a directory", retriable=False
            )
        self.use_xattr = self._probe_xattr()

    def _probe_xattr(self) -> bool:
        """Whether the root's file system takes user xattrs (else digests go to sidecars)."""
        if not hasattr(os, "setxattr"):
            return False
        probe = self.root / f".xattr-probe.tmp-{uuid.uuid4().hex}"
        try:
            fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError as exc:
            raise RemoteStorageError(
                f"storage directory {self.root} is not writable: {exc}", retriable=False
            ) from exc
        try:
            os.setxattr(fd, XATTR_NAME, b"0")
            return True
        except OSError:
            return False
        finally:
            os.close(fd)
            probe.unlink(missing_ok=True)

    def __repr__(self) -> str:
        return f"LocalDirStorage({str(self.root)!r})"

    @property
    def url(self) -> str:
        """``file:///abs/root``."""
        return self.root.as_uri()

    # ---- helpers ------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise RemoteStorageError(f"storage {self.url} is closed", retriable=False)

    def _check_writable(self) -> None:
        """Raise unless the store is open and not read-only (called by every write)."""
        self._check_open()
        if self.read_only:
            raise RemoteStorageError(f"storage {self.url} is read-only", retriable=False)

    def _path(self, key: str) -> Path:
        validate_key(key)
        if _is_reserved(key.rsplit("/", 1)[-1]):
            raise InvalidArgumentError(
                f"invalid object key {key!r}: the local-directory store reserves names "
                "ending in '.tmp-<hex>' and names like '.<name>.xxh3'"
            )
        return self.root.joinpath(*key.split("/"))

    @staticmethod
    def _sidecar(path: Path) -> Path:
        return path.with_name(f".{path.name}.xxh3")

    def _stored_checksum(self, path: Path, fd: int | None = None) -> str | None:
        """The digest stored with the object at ``path`` (xattr, else sidecar), or None."""
        if hasattr(os, "getxattr"):
            try:
                return os.getxattr(fd if fd is not None else path, XATTR_NAME).decode("ascii")
            except (OSError, UnicodeDecodeError):
                pass
        try:
            return self._sidecar(path).read_text("ascii").strip() or None
        except (OSError, UnicodeDecodeError):
            return None

    def _conflict(self, key: str, exc: OSError) -> RemoteStorageError:
        return RemoteStorageError(
            f"cannot store {key!r} in {self.url}: it conflicts with an existing object or "
            f"with a directory of other keys ({exc})",
            retriable=False,
        )

    def _write(
        self, key: str, chunks: Iterable[bytes | memoryview], progress: Callable[[int], None] | None
    ) -> ObjectInfo:
        """Write ``chunks`` to ``key`` atomically and durably; the new object's info."""
        path = self._path(key)
        parent = path.parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError) as exc:
            raise self._conflict(key, exc) from exc
        except OSError as exc:
            raise RemoteStorageError(f"cannot create {parent}: {exc}") from exc
        tmp = parent / f"{path.name}.tmp-{uuid.uuid4().hex}"
        h = xxhash.xxh3_128()
        size = 0
        try:
            try:
                f = open(tmp, "xb")  # noqa: SIM115 - closed in the finally below
            except NotADirectoryError as exc:
                raise self._conflict(key, exc) from exc
            try:
                for chunk in chunks:
                    f.write(chunk)
                    h.update(chunk)
                    size += len(chunk)
                    if progress is not None:
                        progress(size)
                f.flush()
                digest = str(h.hexdigest())
                if self.use_xattr:
                    os.setxattr(f.fileno(), XATTR_NAME, digest.encode("ascii"))
                os.fsync(f.fileno())
            finally:
                f.close()
            if not self.use_xattr:
                # No digest is better than a stale one: drop the old, publish, then add.
                self._sidecar(path).unlink(missing_ok=True)
            try:
                os.replace(tmp, path)
            except (IsADirectoryError, NotADirectoryError) as exc:
                raise self._conflict(key, exc) from exc
            if not self.use_xattr:
                side = self._sidecar(path)
                side_tmp = parent / f"{side.name}.tmp-{uuid.uuid4().hex}"
                try:
                    with open(side_tmp, "x", encoding="ascii") as sf:
                        sf.write(digest)
                        sf.flush()
                        os.fsync(sf.fileno())
                    os.replace(side_tmp, side)
                finally:
                    side_tmp.unlink(missing_ok=True)
            _fsync_dir(parent)
        except OSError as exc:
            raise RemoteStorageError(f"write of {key!r} to {self.url} failed: {exc}") from exc
        finally:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
        return ObjectInfo(key, size, digest)

    # ---- RemoteStorage ------------------------------------------------------------------

    def put(self, key: str, data: bytes | memoryview) -> ObjectInfo:
        """Store ``data`` under ``key`` atomically (temp file, fsync, rename). Thread-safe."""
        self._check_writable()
        return self._write(key, [data], None)

    def put_file(
        self,
        key: str,
        path: str | os.PathLike[str],
        progress: Callable[[int], None] | None = None,
        *,
        storage_class: str | None = None,
    ) -> ObjectInfo:
        """Copy the local file ``path`` to ``key`` in 1 MiB chunks, atomically.

        ``progress(n)`` is called in this thread after each chunk with the bytes copied so
        far. A missing or unreadable source raises a non-retriable RemoteStorageError.
        ``storage_class`` is ignored: a directory has one class. Thread-safe.
        """
        self._check_writable()
        self._path(key)
        try:
            src = open(path, "rb")  # noqa: SIM115 - closed in the finally below
        except OSError as exc:
            raise RemoteStorageError(
                f"cannot read local file {os.fspath(path)!r} to upload: {exc}", retriable=False
            ) from exc
        try:
            return self._write(key, iter(lambda: src.read(_CHUNK), b""), progress)
        finally:
            src.close()

    def get(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        """Bytes ``[start, end)`` of ``key`` via ``pread``; see :meth:`RemoteStorage.get`.

        A read that returns the whole object is checked against its stored digest.
        Thread-safe; a concurrent replacement of the object is seen whole or not at all.
        """
        self._check_open()
        path = self._path(key)
        check_range(start, end)
        for attempt in range(2):
            try:
                fd = os.open(path, os.O_RDONLY)
            except (FileNotFoundError, NotADirectoryError, IsADirectoryError) as exc:
                raise RemoteObjectNotFoundError(f"no object {key!r} in {self.url}") from exc
            except OSError as exc:
                raise RemoteStorageError(f"read of {key!r} from {self.url} failed: {exc}") from exc
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode):
                    raise RemoteObjectNotFoundError(f"no object {key!r} in {self.url}")
                size = st.st_size
                if end == start:
                    if start > size:
                        raise RemoteObjectNotFoundError(
                            f"range [{start}, {end}) is past the end of {key!r} ({size} bytes)"
                        )
                    return b""
                if start >= size and not (start == 0 and end is None):
                    raise RemoteObjectNotFoundError(
                        f"range [{start}, {end}) is past the end of {key!r} ({size} bytes)"
                    )
                stop = size if end is None else min(end, size)
                parts: builtins.list[bytes] = []
                pos = start
                while pos < stop:
                    chunk = os.pread(fd, min(stop - pos, 8 << 20), pos)
                    if not chunk:
                        break
                    parts.append(chunk)
                    pos += len(chunk)
                data = b"".join(parts)
                if len(data) != stop - start:
                    raise RemoteStorageError(
                        f"short read of {key!r}: {len(data)} of {stop - start} bytes at {start}"
                    )
                if start == 0 and stop == size:
                    want = self._stored_checksum(path, fd)
                    if want is not None and xxhash.xxh3_128_hexdigest(data) != want:
                        if attempt == 0 and self._replaced(path, st):
                            continue  # sidecar mode: raced with an overwrite; read again
                        raise RemoteCorruptionError(
                            f"object {key!r} in {self.url} fails its xxh3 checksum"
                        )
                return data
            except OSError as exc:
                raise RemoteStorageError(f"read of {key!r} from {self.url} failed: {exc}") from exc
            finally:
                os.close(fd)
        raise RemoteCorruptionError(f"object {key!r} in {self.url} fails its xxh3 checksum")

    @staticmethod
    def _replaced(path: Path, st: os.stat_result) -> bool:
        try:
            now = os.stat(path)
        except OSError:
            return True
        return (now.st_ino, now.st_dev) != (st.st_ino, st.st_dev)

    def size(self, key: str) -> int:
        """The object's size (``stat``); RemoteObjectNotFoundError if missing. Thread-safe."""
        self._check_open()
        path = self._path(key)
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError) as exc:
            raise RemoteObjectNotFoundError(f"no object {key!r} in {self.url}") from exc
        except OSError as exc:
            raise RemoteStorageError(f"stat of {key!r} in {self.url} failed: {exc}") from exc
        if not stat.S_ISREG(st.st_mode):
            raise RemoteObjectNotFoundError(f"no object {key!r} in {self.url}")
        return st.st_size

    def list(self, prefix: str, start_after: str = "") -> Iterator[ObjectInfo]:
        """Every object whose key starts with ``prefix``, sorted by key.

        Walks only the directory the prefix points into; skips temp and digest files.
        The listing is taken when iteration starts. Thread-safe.
        """
        self._check_open()
        validate_prefix(prefix)
        return (o for o in self._list(prefix) if o.key > start_after)

    def _list(self, prefix: str) -> Iterator[ObjectInfo]:
        dir_part, _, name_part = prefix.rpartition("/")
        base = self.root.joinpath(*dir_part.split("/")) if dir_part else self.root
        key_base = f"{dir_part}/" if dir_part else ""
        found: builtins.list[ObjectInfo] = []

        def on_error(exc: OSError) -> None:
            if not isinstance(exc, (FileNotFoundError, NotADirectoryError)):
                raise RemoteStorageError(f"listing {self.url} failed: {exc}") from exc

        for dirpath, dirnames, filenames in os.walk(base, onerror=on_error):
            rel = os.path.relpath(dirpath, base)
            top = rel == "."
            key_dir = key_base if top else f"{key_base}{Path(rel).as_posix()}/"
            if top:
                dirnames[:] = [d for d in dirnames if d.startswith(name_part)]
            for name in filenames:
                if (top and not name.startswith(name_part)) or _is_reserved(name):
                    continue
                full = os.path.join(dirpath, name)
                try:
                    st = os.stat(full)
                except FileNotFoundError:
                    continue  # deleted while we walked
                except OSError as exc:
                    raise RemoteStorageError(f"listing {self.url} failed: {exc}") from exc
                if stat.S_ISREG(st.st_mode):
                    found.append(
                        ObjectInfo(
                            key_dir + name,
                            st.st_size,
                            self._stored_checksum(Path(full)),
                            st.st_mtime_ns // 1_000_000,
                        )
                    )
        found.sort(key=lambda o: o.key)
        yield from found

    def delete(self, keys: Sequence[str]) -> None:
        """Delete the objects (and their digests); missing keys are fine. Thread-safe.

        All keys are validated before anything is deleted; the directories touched are
        fsynced.
        """
        self._check_writable()
        paths = [self._path(k) for k in check_keys(keys)]
        dirs: set[Path] = set()
        for path in paths:
            try:
                try:
                    path.unlink()
                    dirs.add(path.parent)
                except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
                    pass
                try:
                    self._sidecar(path).unlink()
                    dirs.add(path.parent)
                except (FileNotFoundError, NotADirectoryError):
                    pass
            except OSError as exc:
                raise RemoteStorageError(f"delete of {path} failed: {exc}") from exc
        for d in dirs:
            try:
                _fsync_dir(d)
            except OSError as exc:
                raise RemoteStorageError(f"fsync of {d} failed: {exc}") from exc

    def discard_partial(self, keys: Sequence[str]) -> None:
        """Delete the temp files that interrupted puts of ``keys`` left (``<name>.tmp-<hex>``
        and the digest sidecar's); each directory involved is scanned once. Call only when
        no put of these keys is running. Thread-safe."""
        self._check_writable()
        by_dir: dict[Path, set[str]] = {}
        for key in check_keys(keys):
            path = self._path(key)
            by_dir.setdefault(path.parent, set()).update((path.name, self._sidecar(path).name))
        for directory, names in by_dir.items():
            try:
                entries = builtins.list(os.scandir(directory))
            except (FileNotFoundError, NotADirectoryError):
                continue
            except OSError as exc:
                raise RemoteStorageError(f"listing {directory} failed: {exc}") from exc
            removed = False
            for entry in entries:
                m = _TMP_RE.search(entry.name)
                if m is not None and entry.name[: m.start()] in names:
                    try:
                        os.unlink(entry.path)
                        removed = True
                    except FileNotFoundError:
                        pass
                    except OSError as exc:
                        raise RemoteStorageError(f"delete of {entry.path} failed: {exc}") from exc
            if removed:
                try:
                    _fsync_dir(directory)
                except OSError as exc:
                    raise RemoteStorageError(f"fsync of {directory} failed: {exc}") from exc

    def close(self) -> None:
        """Mark the store closed (it holds no resources); later calls raise. Idempotent."""
        self._closed = True


__all__ = ["XATTR_NAME", "LocalDirStorage"]
