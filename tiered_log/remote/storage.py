"""The one narrow interface to object storage, and the URL factory that opens a backend.

Backends (one file each, chosen by URL scheme in :func:`open_storage`, imported only
when a URL names them):

- ``file:///dir`` or a plain absolute path -> :class:`tiered_log.remote.fs.LocalDirStorage`
- ``s3://bucket/prefix`` -> :class:`tiered_log.remote.s3.S3Storage`

(The tests add a third, in memory and with injected faults: ``tests/remote/fake_store.py``;
``tests/remote/test_storage_contract.py`` runs the contract below against all three.)

Key rules, byte ranges, checksums and :class:`ObjectInfo` live in
:mod:`tiered_log.remote.objects` (re-exported here), which the backends import instead
of this module, so the dependencies run one way: ``storage -> fs/s3 -> objects``.

Every implementation is safe to call from several threads at once; the functions of this
module are thread-safe too.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable
from urllib.parse import unquote, urlsplit

from ..errors import InvalidArgumentError
from .objects import (
    CHECKSUM_METADATA_NAME,
    MAX_KEY_BYTES,
    ObjectInfo,
    check_keys,
    check_range,
    validate_key,
    validate_prefix,
    xxh3_hex,
)

S3_OPTIONS = frozenset(
    {
        "endpoint_url",
        "region",
        "access_key",
        "secret_key",
        "path_style",
        "multipart_threshold",
        "part_size",
        "part_concurrency",
        "max_pool_connections",
        "connect_timeout",
        "read_timeout",
        "retries",
        "get_timeout",
        "get_retries",
    }
)
"""Keyword options :func:`open_storage` passes on to :class:`~tiered_log.remote.s3.S3Storage`."""


@runtime_checkable
class RemoteStorage(Protocol):
    """The narrow object-store interface the remote tier is written against.

    Implementations must be safe to call concurrently from several threads. Errors are
    always from :mod:`tiered_log.errors`, never a backend's own (``OSError``, botocore):

    - :class:`~tiered_log.errors.InvalidArgumentError`: a bad key, prefix or byte range;
    - :class:`~tiered_log.errors.RemoteObjectNotFoundError`: no such object, or a non-empty
      byte range that starts at or past the object's end;
    - :class:`~tiered_log.errors.RemoteCorruptionError`: the bytes fail their checksum;
    - :class:`~tiered_log.errors.RemoteStorageError`: anything else; ``retriable`` says if
      trying again may help (connection failures, 5xx, throttling: yes).
    """

    def put(self, key: str, data: bytes | memoryview) -> ObjectInfo:
        """Store ``data`` under ``key`` (replacing any object there), atomically."""
        ...

    def put_file(
        self,
        key: str,
        path: str | os.PathLike[str],
        progress: Callable[[int], None] | None = None,
        *,
        storage_class: str | None = None,
    ) -> ObjectInfo:
        """Stream the local file ``path`` to ``key``; ``progress(n)`` gets bytes sent so far.

        ``progress`` is called from the calling thread with non-decreasing totals; an
        exception it raises aborts the upload (nothing is left behind) and propagates.
        ``storage_class``: the S3 storage class to store the object in (None or
        ``STANDARD``: the default class); a store without classes ignores it.
        """
        ...

    def get(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        """The bytes ``[start, end)`` of ``key`` (``end=None``: to the object's end).

        ``end`` past the object's end is clipped. An empty range (``end == start``) gives
        ``b""`` if the object exists and ``start <= size``. A get that returns the whole
        object verifies its checksum (RemoteCorruptionError on mismatch).
        """
        ...

    def size(self, key: str) -> int:
        """The object's size in bytes; RemoteObjectNotFoundError if it does not exist."""
        ...

    def list(self, prefix: str, start_after: str = "") -> Iterator[ObjectInfo]:
        """Every object whose key starts with ``prefix`` (a plain string prefix), by key;
        with ``start_after``, only keys greater than it (S3's ``StartAfter``: a listing
        that skips what it knows costs no requests for it)."""
        ...

    def delete(self, keys: Sequence[str]) -> None:
        """Delete the objects; keys that do not exist are not an error."""
        ...

    def discard_partial(self, keys: Sequence[str]) -> None:
        """Remove what interrupted puts of ``keys`` left behind, never visible as objects:
        temp files (local directory), unfinished multipart uploads (S3).

        For cleaning up after a crashed writer: call it only when no put of these keys is
        running (a running one would fail). Stored objects are not touched.
        """
        ...

    def close(self) -> None:
        """Release connections; later calls raise RemoteStorageError. Idempotent."""
        ...

    @property
    def url(self) -> str:
        """Where the objects live, e.g. ``file:///abs/dir`` or ``s3://bucket/prefix``."""
        ...


def put_in_class(
    storage: RemoteStorage, key: str, data: bytes | memoryview, storage_class: str | None
) -> ObjectInfo:
    """Put ``data`` at ``key`` in ``storage_class`` (None or ``STANDARD``: the default
    class, one :meth:`~RemoteStorage.put`). The protocol takes a class only with a file
    upload, so the bytes of any other class go through a temporary file."""
    if storage_class in (None, "STANDARD"):
        return storage.put(key, data)
    with tempfile.NamedTemporaryFile(prefix="tiered-log-put-") as f:
        f.write(data)
        f.flush()
        return storage.put_file(key, f.name, storage_class=storage_class)


def open_storage(url: str, **s3_options: Any) -> RemoteStorage:
    """Open the store a URL names.

    - ``file:///abs/dir`` (``file://localhost/abs/dir``) or a plain path (absolute, or
      starting with ``./``, ``../`` or ``~``): a :class:`~tiered_log.remote.fs.LocalDirStorage`
      (created if missing); ``s3_options`` are ignored.
    - ``s3://bucket`` or ``s3://bucket/some/prefix``: an
      :class:`~tiered_log.remote.s3.S3Storage`; ``s3_options`` (``endpoint_url``, ``region``,
      ``access_key``, ``secret_key``, ``path_style``, and the other constructor options) are
      passed on; options given as ``None`` keep their defaults.

    Anything else raises InvalidArgumentError. Thread-safe.
    """
    if not isinstance(url, str) or not url.strip():
        raise InvalidArgumentError("remote storage URL is empty")
    url = url.strip()
    expected = "expected file:///abs/dir, an absolute path, or s3://bucket/prefix"
    if url.startswith(("/", "./", "../", "~")) or url in (".", ".."):
        from .fs import LocalDirStorage

        return LocalDirStorage(Path(url).expanduser())
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise InvalidArgumentError(f"malformed remote storage URL {url!r}: {exc}") from exc
    scheme = parts.scheme.lower()
    if scheme == "file":
        from .fs import LocalDirStorage

        if parts.netloc not in ("", "localhost"):
            raise InvalidArgumentError(
                f"file URL {url!r} names host {parts.netloc!r}; only local paths are supported"
            )
        path = unquote(parts.path)
        if not path.startswith("/") or parts.query or parts.fragment:
            raise InvalidArgumentError(f"file URL {url!r} must be file:///absolute/path")
        return LocalDirStorage(Path(path))
    if scheme == "s3":
        from .s3 import S3Storage

        bucket = parts.netloc
        if not bucket or parts.query or parts.fragment or "@" in bucket or ":" in bucket:
            raise InvalidArgumentError(f"S3 URL {url!r} must be s3://bucket or s3://bucket/prefix")
        unknown = set(s3_options) - S3_OPTIONS
        if unknown:
            raise InvalidArgumentError(
                f"unknown S3 option(s) {sorted(unknown)}; accepted: {sorted(S3_OPTIONS)}"
            )
        options = {k: v for k, v in s3_options.items() if v is not None}
        return S3Storage(bucket, prefix=unquote(parts.path).strip("/"), **options)
    if not scheme:
        raise InvalidArgumentError(f"remote storage URL {url!r} has no scheme; {expected}")
    raise InvalidArgumentError(
        f"unsupported remote storage URL scheme {scheme!r} in {url!r}; {expected}"
    )


__all__ = [
    "CHECKSUM_METADATA_NAME",
    "MAX_KEY_BYTES",
    "ObjectInfo",
    "RemoteStorage",
    "check_keys",
    "check_range",
    "open_storage",
    "put_in_class",
    "validate_key",
    "validate_prefix",
    "xxh3_hex",
]
