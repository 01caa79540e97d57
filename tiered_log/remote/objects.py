"""What every object store shares: the object type, the key rules, byte ranges, checksums.

The vocabulary of :class:`~tiered_log.remote.storage.RemoteStorage` that its backends
(:mod:`tiered_log.remote.fs`, :mod:`tiered_log.remote.s3`, the tests' in-memory store)
are written with, apart from the protocol and the URL factory so that a backend never
imports the module that imports it.

Keys are ``/``-separated relative strings: no leading ``/``, no empty, ``.`` or ``..``
segments, no NUL, backslash or other ASCII control character, at most 1024 UTF-8 bytes
(:func:`validate_key`). A bad key raises :class:`~tiered_log.errors.InvalidArgumentError`.

Every object carries the xxh3-128 hex digest of its whole content (:func:`xxh3_hex`),
computed on put and verified by any get that returns the whole object.

Everything here is pure: safe from any thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import xxhash

from ..errors import InvalidArgumentError

MAX_KEY_BYTES = 1024
"""S3's limit on a key (including the store's prefix), in UTF-8 bytes."""

CHECKSUM_METADATA_NAME = "xxh3"
"""Name of the S3 user-metadata entry (``x-amz-meta-xxh3``) holding an object's digest."""


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
    modified_ms: int | None = field(default=None, compare=False)
    """When the object was last written (ms since the epoch), as listings give it (the
    file's mtime; S3's LastModified); None when not known. Not part of equality."""


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
        raise InvalidArgumentError(f"invalid object key {key!r}: empty, '.' or '..' path segment")
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


__all__ = [
    "CHECKSUM_METADATA_NAME",
    "MAX_KEY_BYTES",
    "ObjectInfo",
    "check_keys",
    "check_range",
    "validate_key",
    "validate_prefix",
    "xxh3_hex",
]
