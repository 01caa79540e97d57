"""The one narrow interface to object storage, its shared types, key rules and a URL factory.

Backends (one file each, chosen by URL scheme in :func:`open_storage`):

- ``file:///dir`` or a plain absolute path -> :class:`tiered_log.remote.fs.LocalDirStorage`
- ``s3://bucket/prefix`` -> :class:`tiered_log.remote.s3.S3Storage`

Keys are ``/``-separated relative strings: no leading ``/``, no empty, ``.`` or ``..``
segments, no NUL, backslash or other ASCII control character, at most 1024 UTF-8 bytes
(:func:`validate_key`). A bad key raises :class:`~tiered_log.errors.InvalidArgumentError`.

Every object carries the xxh3-128 hex digest of its whole content (:func:`xxh3_hex`),
computed on put and verified by any get that returns the whole object.

Every implementation is safe to call from several threads at once; the functions of this
module are pure and thread-safe too.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable
from urllib.parse import unquote, urlsplit

import xxhash

from ..errors import InvalidArgumentError

MAX_KEY_BYTES = 1024
"""S3's limit on a key (including the store's prefix), in UTF-8 bytes."""

CHECKSUM_METADATA_NAME = "xxh3"
"""Name of the S3 user-metadata entry (``x-amz-meta-xxh3``) holding an object's digest."""

S3_OPTIONS = frozenset({
    "endpoint_url", "region", "access_key", "secret_key", "path_style", "multipart_threshold",
    "part_size", "part_concurrency", "max_pool_connections", "connect_timeout", "read_timeout",
    "retries", "get_timeout", "get_retries",
})
"""Keyword options :func:`open_storage` passes on to :class:`~tiered_log.remote.s3.S3Storage`."""


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """One stored object: its key (without the store's prefix), size and checksum.

    ``checksum`` is the xxh3-128 hex digest of the whole object when the backend knows it
    cheaply (always after a put; ``None`` from S3 listings, which carry no user metadata).
    Immutable, so safe to share between threads.
    """

    key: str
    size: int
    checksum: str | None  # xxh3-128 hex of the whole object, when known


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

    def put_file(self, key: str, path: str | os.PathLike[str],
                 progress: Callable[[int], None] | None = None) -> ObjectInfo:
        """Stream the local file ``path`` to ``key``; ``progress(n)`` gets bytes sent so far.

        ``progress`` is called from the calling thread with non-decreasing totals; an
        exception it raises aborts the upload (nothing is left behind) and propagates.
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

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        """Every object whose key starts with ``prefix`` (a plain string prefix), by key."""
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


def xxh3_hex(data: bytes | memoryview) -> str:
    """The xxh3-128 hex digest tiered_log stores with every object."""
    return str(xxhash.xxh3_128_hexdigest(data))


def _check_chars(what: str, value: str) -> None:
    if "\\" in value or any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        raise InvalidArgumentError(
            f"invalid {what} {value!r}: control characters and backslashes are not allowed"
        )
    try:
        n = len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InvalidArgumentError(f"invalid {what} {value!r}: not encodable as UTF-8") from exc
    if n > MAX_KEY_BYTES:
        raise InvalidArgumentError(f"invalid {what}: {n} bytes long (at most {MAX_KEY_BYTES})")


def validate_key(key: str) -> str:
    """Return ``key`` if it is a valid object key (see the module docstring), else raise
    InvalidArgumentError."""
    if not isinstance(key, str):
        raise InvalidArgumentError(f"object key must be a str, not {type(key).__name__}")
    if not key:
        raise InvalidArgumentError("object key is empty")
    _check_chars("object key", key)
    if key.startswith("/"):
        raise InvalidArgumentError(f"invalid object key {key!r}: must not start with '/'")
    if any(part in ("", ".", "..") for part in key.split("/")):
        raise InvalidArgumentError(
            f"invalid object key {key!r}: empty, '.' or '..' path segment"
        )
    return key


def validate_prefix(prefix: str) -> str:
    """Return ``prefix`` if it can prefix valid keys, else raise InvalidArgumentError.

    ``""`` (everything) is valid; the last segment may be partial or empty (``"a/b"``,
    ``"a/"``); the segments before it follow the key rules.
    """
    if not isinstance(prefix, str):
        raise InvalidArgumentError(f"key prefix must be a str, not {type(prefix).__name__}")
    if not prefix:
        return prefix
    _check_chars("key prefix", prefix)
    if prefix.startswith("/"):
        raise InvalidArgumentError(f"invalid key prefix {prefix!r}: must not start with '/'")
    if any(part in ("", ".", "..") for part in prefix.split("/")[:-1]):
        raise InvalidArgumentError(
            f"invalid key prefix {prefix!r}: empty, '.' or '..' path segment"
        )
    return prefix


def check_range(start: int, end: int | None) -> None:
    """Raise InvalidArgumentError unless ``0 <= start`` and ``end`` is None or ``>= start``."""
    if not isinstance(start, int) or isinstance(start, bool) or start < 0:
        raise InvalidArgumentError(f"bad byte range start {start!r}: must be an int >= 0")
    if end is not None and (not isinstance(end, int) or isinstance(end, bool) or end < start):
        raise InvalidArgumentError(f"bad byte range [{start}, {end!r}): end must be >= start")


def check_keys(keys: Sequence[str]) -> list[str]:
    """Validate every key of a batch (for ``delete``); the unique keys, in first-seen order."""
    if isinstance(keys, (str, bytes)):
        raise InvalidArgumentError("expected a sequence of keys, not a single string")
    return list(dict.fromkeys(validate_key(k) for k in keys))


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
    raise InvalidArgumentError(f"unsupported remote storage URL scheme {scheme!r} in {url!r}; {expected}")


__all__ = [
    "CHECKSUM_METADATA_NAME",
    "MAX_KEY_BYTES",
    "ObjectInfo",
    "RemoteStorage",
    "check_keys",
    "check_range",
    "open_storage",
    "validate_key",
    "validate_prefix",
    "xxh3_hex",
]
