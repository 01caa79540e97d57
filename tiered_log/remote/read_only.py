"""A store that can only be read: the bucket of a read-only mount (``read_only_remote``).

:class:`ReadOnlyStorage` wraps a :class:`~tiered_log.remote.storage.RemoteStorage` and
passes on the reads (``get``, ``size``, ``list``); every call that would create, replace
or delete an object (``put``, ``put_file``, ``delete``, ``discard_partial``) raises
:class:`~tiered_log.errors.ReadOnlyError` before it reaches the store. It is the last
guard of the mount's invariant, *the mounted bucket is never written to*: the mount's
own code takes no write path (no shipping, retention, reservation, snapshot, metadata
or repair), and a path it took by mistake fails loudly here instead of changing another
cluster's archive.

:func:`open_read_only_store` opens the store a URL names without creating anything: a
directory store is opened ``read_only`` (no ``mkdir``, no probe file), an S3 store
writes nothing when it is made.

Thread-safe as the store it wraps.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from ..errors import ReadOnlyError
from .objects import ObjectInfo
from .storage import RemoteStorage, open_storage


class ReadOnlyStorage:
    """``inner``'s reads; its writes refused (see the module docstring). Implements
    :class:`~tiered_log.remote.storage.RemoteStorage`."""

    def __init__(self, inner: RemoteStorage) -> None:
        self.inner = inner

    def __repr__(self) -> str:
        return f"ReadOnlyStorage({self.inner!r})"

    @property
    def url(self) -> str:
        return self.inner.url

    @property
    def endpoint_url(self) -> str | None:
        """The S3 endpoint of the store (None for a directory), as the location file
        records it."""
        return getattr(self.inner, "endpoint_url", None)

    @property
    def region(self) -> str | None:
        return getattr(self.inner, "region", None)

    def _refuse(self, what: str, keys: Sequence[str]) -> ReadOnlyError:
        shown = ", ".join(keys[:3]) + (" ..." if len(keys) > 3 else "")
        return ReadOnlyError(
            f"{what} {shown} refused: {self.url} is mounted read-only (read_only_remote)"
        )

    # ---- reads ----------------------------------------------------------------------------

    def get(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        return self.inner.get(key, start, end)

    def size(self, key: str) -> int:
        return self.inner.size(key)

    def list(self, prefix: str, start_after: str = "") -> Iterator[ObjectInfo]:
        return self.inner.list(prefix, start_after)

    # ---- writes: refused ------------------------------------------------------------------

    def put(self, key: str, data: bytes | memoryview) -> ObjectInfo:
        raise self._refuse("writing", [key])

    def put_file(
        self,
        key: str,
        path: str | os.PathLike[str],
        progress: Callable[[int], None] | None = None,
        *,
        storage_class: str | None = None,
    ) -> ObjectInfo:
        raise self._refuse("uploading", [key])

    def delete(self, keys: Sequence[str]) -> None:
        if keys:
            raise self._refuse("deleting", list(keys))

    def discard_partial(self, keys: Sequence[str]) -> None:
        if keys:
            raise self._refuse("discarding uploads of", list(keys))

    def close(self) -> None:
        self.inner.close()


def open_read_only_store(url: str, **s3_options: Any) -> ReadOnlyStorage:
    """The store ``url`` names, opened without creating or writing anything (a missing
    directory is a non-retriable RemoteStorageError), behind :class:`ReadOnlyStorage`.
    Errors as :func:`~tiered_log.remote.storage.open_storage`'s."""
    path: Path | None = None
    if url.startswith("/"):
        path = Path(url)
    elif url.startswith("file://"):
        parts = urlsplit(url)
        if parts.netloc in ("", "localhost"):
            path = Path(unquote(parts.path))
    if path is not None:
        from .fs import LocalDirStorage

        return ReadOnlyStorage(LocalDirStorage(path, read_only=True))
    return ReadOnlyStorage(open_storage(url, **s3_options))


__all__ = ["ReadOnlyStorage", "open_read_only_store"]
