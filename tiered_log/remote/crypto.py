"""Envelope encryption of the archive: the operator's key ring and the per-segment data keys.

Every segment shipped while a key ring is set gets its own random 32-byte *data key*
(DEK); its chunks are encrypted with it (AES-256-GCM, :mod:`~tiered_log.remote.chunk_codec`)
and the DEK itself is stored in the segment's manifest only *wrapped*: encrypted with
one of the operator's *key-encryption keys* (KEK), named by its id. Re-wrapping a DEK
with another KEK rewrites the manifest and nothing else (``tiered-log archive rewrap``),
so a KEK can be retired without touching the data.

The key ring file (the service setting ``remote_encryption_key_file``) is JSON::

    {"active": "k2", "keys": {"k1": "<base64 of 32 bytes>", "k2": "<base64 of 32 bytes>"}}

``active`` wraps new DEKs; every key listed can unwrap. Ids are 1-64 characters of
``[A-Za-z0-9._-]``. A wrapped DEK (the manifest's ``wrapped_key``) is the base64 of::

    nonce       12 bytes, random
    ciphertext  32 bytes (the DEK) + 16 bytes GCM tag; associated data b"tiered-log dek:" + key id

so a wrapped key moved under another id does not unwrap.

:class:`KeyRing` re-reads its file when the file changes (size or mtime): an operator
adds a key, marks it active, runs the rewrap and removes the old key without
restarting anything. A file that turns bad after start-up is logged and the last good
contents kept (a half-written edit must not stop reads). Thread-safety: a KeyRing may be
used from any thread (one lock guards the reload; the contents are immutable).
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ..errors import InvalidArgumentError, RemoteCorruptionError, RemoteStorageError

log = logging.getLogger(__name__)

KEY_BYTES = 32
"""AES-256: the size of every KEK and DEK."""
NONCE_BYTES = 12
"""AES-GCM's nonce, random per wrapped key and per chunk."""
_KEY_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
_WRAP_AAD = b"tiered-log dek:"


class KeyUnavailableError(RemoteStorageError):
    """A segment's data key cannot be had here: its KEK is not in this node's key ring
    (or no key ring is set). Not retriable; the message names the key id and the file."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retriable=False)


@dataclass(frozen=True, slots=True)
class KeyRingContents:
    """One reading of a key ring file: the active key's id and every key by id."""

    active: str
    keys: Mapping[str, bytes]


def parse_key_ring(data: bytes, source: str) -> KeyRingContents:
    """The contents of a key ring file (layout in the module docstring);
    InvalidArgumentError, one line naming ``source`` and what is wrong, for anything
    else."""

    def bad(why: str) -> InvalidArgumentError:
        return InvalidArgumentError(f"key ring {source}: {why}")

    try:
        doc = json.loads(data)
    except ValueError as exc:
        raise bad(f"not JSON ({exc})") from None
    if not isinstance(doc, dict) or set(doc) != {"active", "keys"}:
        raise bad('expected {"active": "<key id>", "keys": {"<key id>": "<base64 of 32 bytes>"}}')
    active, raw = doc["active"], doc["keys"]
    if not isinstance(raw, dict) or not raw:
        raise bad('"keys" must be a non-empty object of key id -> base64 key')
    keys: dict[str, bytes] = {}
    for key_id, b64 in raw.items():
        if not _KEY_ID.fullmatch(key_id):
            raise bad(f"key id {key_id!r} is not 1-64 characters of A-Z a-z 0-9 . _ -")
        try:
            key = base64.b64decode(b64, validate=True) if isinstance(b64, str) else b""
        except (binascii.Error, ValueError):
            key = b""
        if len(key) != KEY_BYTES:
            raise bad(f"key {key_id!r} is not the base64 of {KEY_BYTES} bytes")
        keys[key_id] = key
    if not isinstance(active, str) or active not in keys:
        raise bad(f'"active" must name one of the keys ({", ".join(sorted(keys))}), got {active!r}')
    return KeyRingContents(active, keys)


def new_key_ring_file(path: Path, key_id: str = "k1") -> None:
    """Write a new key ring file holding one random key, active (mode 0600); for
    tests, benchmarks and an operator's first ring."""
    doc = {"active": key_id, "keys": {key_id: base64.b64encode(os.urandom(KEY_BYTES)).decode()}}
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f)


class KeyRing:
    """The operator's key ring, read from ``path`` (see the module docstring).
    InvalidArgumentError (one line) when the file cannot be read or is not a key ring."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._stamp = self._stat()
        self._contents = self._read()

    def _stat(self) -> tuple[int, int, int]:
        try:
            st = os.stat(self.path)
        except OSError as exc:
            raise InvalidArgumentError(
                f"key ring {self.path}: cannot be read: {exc.strerror}"
            ) from None
        return st.st_mtime_ns, st.st_size, st.st_ino

    def _read(self) -> KeyRingContents:
        try:
            data = self.path.read_bytes()
        except OSError as exc:
            raise InvalidArgumentError(
                f"key ring {self.path}: cannot be read: {exc.strerror}"
            ) from None
        return parse_key_ring(data, str(self.path))

    def contents(self) -> KeyRingContents:
        """The ring as its file holds it now (re-read when the file changed; a bad file
        keeps the last good contents, logged)."""
        with self._lock:
            try:
                stamp = self._stat()
                if stamp != self._stamp:
                    self._contents = self._read()
                    self._stamp = stamp
            except InvalidArgumentError as exc:
                log.error("%s; keeping the keys read before", exc.message)
            return self._contents

    @property
    def active_id(self) -> str:
        return self.contents().active

    def wrap(self, dek: bytes) -> tuple[str, str]:
        """``(key id, wrapped key)``: ``dek`` wrapped with the active KEK."""
        ring = self.contents()
        return ring.active, wrap_key(ring.keys[ring.active], ring.active, dek)

    def unwrap(self, key_id: str, wrapped: str) -> bytes:
        """The DEK ``wrapped`` with the KEK ``key_id``. KeyUnavailableError naming the
        id when the ring does not hold it; RemoteCorruptionError when it does not
        unwrap (damaged, or not wrapped with that key)."""
        kek = self.contents().keys.get(key_id)
        if kek is None:
            raise KeyUnavailableError(
                f"encryption key {key_id!r} is not in the key ring {self.path} "
                "(remote_encryption_key_file): add it back to read what it wraps"
            )
        return unwrap_key(kek, key_id, wrapped)


def wrap_key(kek: bytes, key_id: str, dek: bytes) -> str:
    """``dek`` wrapped with ``kek`` (layout in the module docstring), base64."""
    nonce = os.urandom(NONCE_BYTES)
    ct = AESGCM(kek).encrypt(nonce, dek, _WRAP_AAD + key_id.encode())
    return base64.b64encode(nonce + ct).decode()


def unwrap_key(kek: bytes, key_id: str, wrapped: str) -> bytes:
    """The DEK of :func:`wrap_key`'s output; RemoteCorruptionError if it does not unwrap."""
    try:
        raw = base64.b64decode(wrapped, validate=True)
        dek = AESGCM(kek).decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], _WRAP_AAD + key_id.encode())
    except (InvalidTag, binascii.Error, ValueError) as exc:
        raise RemoteCorruptionError(
            f"the data key wrapped with encryption key {key_id!r} does not unwrap with it "
            f"(damaged, or wrapped with another key): {type(exc).__name__}"
        ) from None
    if len(dek) != KEY_BYTES:
        raise RemoteCorruptionError(f"the data key wrapped with {key_id!r} is {len(dek)} bytes")
    return dek


def new_data_key() -> bytes:
    """A random DEK for one segment."""
    return os.urandom(KEY_BYTES)


_rings: dict[Path, KeyRing] = {}
_rings_lock = threading.Lock()


def key_ring(path: Path) -> KeyRing:
    """The process-wide KeyRing of the file ``path`` (one per file, shared by every log);
    InvalidArgumentError when it is not a key ring."""
    p = Path(path).absolute()
    with _rings_lock:
        ring = _rings.get(p)
        if ring is None:
            ring = _rings[p] = KeyRing(p)
        return ring


__all__ = [
    "KEY_BYTES",
    "KeyRing",
    "KeyRingContents",
    "KeyUnavailableError",
    "key_ring",
    "new_data_key",
    "new_key_ring_file",
    "parse_key_ring",
    "unwrap_key",
    "wrap_key",
]
