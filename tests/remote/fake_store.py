"""An in-memory RemoteStorage for tests, with faults injected on demand.

:class:`MemoryStorage` keeps its objects in a dict and follows the whole
:class:`~tiered_log.remote.storage.RemoteStorage` contract (the contract suite runs it
beside the directory and S3 stores), so remote-tier code can be tested without moto or a
file system, and made to fail in ways a real bucket only fails by bad luck. As
Litestream's mock ``ReplicaClient``, it injects faults two ways:

- a **fault plan**: :meth:`MemoryStorage.inject` adds a :class:`Fault` that hits the next
  ``times`` calls of one operation on keys under a prefix: raise an error, wait, tear an
  upload (part of it is left behind as an invisible partial upload, as an unfinished S3
  multipart upload, and the put fails), or answer "no such object";
- a **function field**: :attr:`MemoryStorage.before` is called with ``(op, key)`` before
  every call and may raise, sleep, or change the store (``store.lose(key)``).

Behind the store's back, as damage would happen: :meth:`MemoryStorage.lose` removes an
object, :meth:`MemoryStorage.flip_byte` damages one (keeping its now wrong checksum).
:attr:`MemoryStorage.calls` records every call as ``(op, key)``.

Operations (``op`` of a fault and of :attr:`MemoryStorage.calls`): ``put``, ``put_file``,
``get``, ``size``, ``list`` (key: the prefix), ``delete`` and ``discard_partial`` (key:
the keys joined by commas; a fault hits the call if it hits any of them). Thread-safe: one lock guards the objects, the partial uploads and the plan;
waits and ``before`` run outside it.
"""

from __future__ import annotations

import builtins
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from tiered_log.errors import (
    RemoteCorruptionError,
    RemoteObjectNotFoundError,
    RemoteStorageError,
)
from tiered_log.remote.objects import (
    ObjectInfo,
    check_keys,
    check_range,
    validate_key,
    validate_prefix,
    xxh3_hex,
)

OPS = frozenset({"put", "put_file", "get", "size", "list", "delete", "discard_partial"})


@dataclass
class Fault:
    """One injected fault: which calls it hits and what it does to them.

    It hits calls of ``op`` (``"*"``: any) whose key starts with ``key``, the next
    ``times`` of them (None: all). A hit first waits ``delay`` seconds, then, in this
    order: raises ``error``; answers RemoteObjectNotFoundError if ``missing`` (reads
    only); tears the upload after ``torn_at`` bytes if set (puts only: those bytes are
    left as a partial upload, which no get or listing shows and ``discard_partial``
    removes, and a retriable RemoteStorageError is raised). A fault with none of these
    only delays the call.
    """

    op: str
    key: str = ""
    error: BaseException | None = None
    delay: float = 0.0
    torn_at: int | None = None
    missing: bool = False
    times: int | None = 1
    hits: int = 0

    def __post_init__(self) -> None:
        if self.op != "*" and self.op not in OPS:
            raise ValueError(f"unknown operation {self.op!r}; one of {sorted(OPS)} or '*'")

    @property
    def spent(self) -> bool:
        return self.times is not None and self.hits >= self.times


class MemoryStorage:
    """A RemoteStorage in memory; see the module docstring. Thread-safe."""

    def __init__(self, name: str = "test", *, part_size: int = 1 << 20) -> None:
        self.name = name
        self.part_size = part_size
        """put_file reads (and reports progress) this many bytes at a time."""
        self.before: Callable[[str, str], None] | None = None
        """Called with ``(op, key)`` before every call (outside the lock)."""
        self.plan: list[Fault] = []
        self.calls: builtins.list[tuple[str, str]] = []
        self._objects: dict[str, tuple[bytes, str]] = {}  # key -> (data, xxh3 hex)
        self._partials: dict[str, builtins.list[bytes]] = {}  # torn uploads left behind
        self._lock = threading.Lock()
        self._closed = False

    # ---- faults and damage ---------------------------------------------------------------

    def inject(self, op: str, key: str = "", **what: object) -> Fault:
        """Add a :class:`Fault` (``what``: its other fields) to the plan; returns it."""
        fault = Fault(op, key, **what)  # type: ignore[arg-type]
        with self._lock:
            self.plan.append(fault)
        return fault

    def lose(self, key: str) -> None:
        """Remove an object behind the store's back (as a lifecycle rule or an operator
        might); KeyError if there is none."""
        with self._lock:
            del self._objects[key]

    def flip_byte(self, key: str, pos: int) -> None:
        """XOR one stored byte with 0xFF, keeping the object's (now wrong) checksum."""
        with self._lock:
            data, digest = self._objects[key]
            b = bytearray(data)
            b[pos] ^= 0xFF
            self._objects[key] = (bytes(b), digest)

    def partial_keys(self) -> builtins.list[str]:
        """Keys with torn uploads left behind (sorted)."""
        with self._lock:
            return sorted(self._partials)

    def stored_keys(self) -> builtins.list[str]:
        """Every stored key (sorted), without a call being recorded or faults applied."""
        with self._lock:
            return sorted(self._objects)

    def _enter(self, op: str, *keys: str) -> Fault | None:
        """Record the call, run ``before``, take and apply the first matching fault's
        wait and error; return the fault for the caller's own effects (missing, torn).
        A call on several keys (delete, discard_partial) is hit if any of them is."""
        key = ",".join(keys)
        with self._lock:
            if self._closed:
                raise RemoteStorageError(f"{self.url} is closed", retriable=False)
            self.calls.append((op, key))
            fault = next(
                (
                    f
                    for f in self.plan
                    if not f.spent
                    and f.op in ("*", op)
                    and any(k.startswith(f.key) for k in keys or ("",))
                ),
                None,
            )
            if fault is not None:
                fault.hits += 1
        if self.before is not None:
            self.before(op, key)
        if fault is not None:
            if fault.delay:
                time.sleep(fault.delay)
            if fault.error is not None:
                raise fault.error
            if fault.missing and op in ("get", "size"):
                raise RemoteObjectNotFoundError(f"no object {key!r} in {self.url} (injected)")
        return fault

    # ---- RemoteStorage -------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"mem://{self.name}"

    def put(self, key: str, data: bytes | memoryview) -> ObjectInfo:
        validate_key(key)
        fault = self._enter("put", key)
        return self._store(key, [bytes(data)], fault, None)

    def put_file(
        self,
        key: str,
        path: str | os.PathLike[str],
        progress: Callable[[int], None] | None = None,
        *,
        storage_class: str | None = None,  # ignored, as the directory store does
    ) -> ObjectInfo:
        validate_key(key)
        fault = self._enter("put_file", key)
        try:
            with open(path, "rb") as f:
                parts = list(iter(lambda: f.read(self.part_size), b""))
        except OSError as exc:
            raise RemoteStorageError(
                f"cannot read local file {os.fspath(path)!r} to upload: {exc}", retriable=False
            ) from exc
        return self._store(key, parts, fault, progress)

    def _store(
        self,
        key: str,
        parts: builtins.list[bytes],
        fault: Fault | None,
        progress: Callable[[int], None] | None,
    ) -> ObjectInfo:
        """Upload ``parts`` (progress after each), tearing it if ``fault`` says so; the
        object appears whole, at once, when every part is in."""
        torn_at = fault.torn_at if fault is not None else None
        sent: builtins.list[bytes] = []
        n = 0
        for part in parts:
            if torn_at is not None and n + len(part) > torn_at:
                sent.append(part[: torn_at - n])
                with self._lock:
                    self._partials.setdefault(key, []).append(b"".join(sent))
                raise RemoteStorageError(
                    f"upload of {key!r} to {self.url} torn after {torn_at} bytes (injected)",
                    retriable=True,
                )
            sent.append(part)
            n += len(part)
            if progress is not None:
                progress(n)  # an exception here aborts the upload: nothing is left
        data = b"".join(sent)
        if torn_at is not None:  # torn at (or past) the end: the last request never landed
            with self._lock:
                self._partials.setdefault(key, []).append(data)
            raise RemoteStorageError(
                f"upload of {key!r} to {self.url} torn after {len(data)} bytes (injected)",
                retriable=True,
            )
        digest = xxh3_hex(data)
        with self._lock:
            self._check_open()
            self._objects[key] = (data, digest)
        return ObjectInfo(key, len(data), digest)

    def get(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        validate_key(key)
        check_range(start, end)
        self._enter("get", key)
        with self._lock:
            stored = self._objects.get(key)
        if stored is None:
            raise RemoteObjectNotFoundError(f"no object {key!r} in {self.url}")
        data, digest = stored
        size = len(data)
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
        if start == 0 and stop == size and xxh3_hex(data) != digest:
            raise RemoteCorruptionError(f"object {key!r} in {self.url} fails its checksum")
        return data[start:stop]

    def size(self, key: str) -> int:
        validate_key(key)
        self._enter("size", key)
        with self._lock:
            stored = self._objects.get(key)
        if stored is None:
            raise RemoteObjectNotFoundError(f"no object {key!r} in {self.url}")
        return len(stored[0])

    def list(self, prefix: str, start_after: str = "") -> Iterator[ObjectInfo]:
        validate_prefix(prefix)
        self._enter("list", prefix)
        with self._lock:
            found = [
                ObjectInfo(k, len(d), c)
                for k, (d, c) in self._objects.items()
                if k.startswith(prefix) and k > start_after
            ]
        return iter(sorted(found, key=lambda i: i.key))

    def delete(self, keys: Sequence[str]) -> None:
        unique = check_keys(keys)
        self._enter("delete", *unique)
        with self._lock:
            self._check_open()
            for k in unique:
                self._objects.pop(k, None)

    def discard_partial(self, keys: Sequence[str]) -> None:
        unique = check_keys(keys)
        self._enter("discard_partial", *unique)
        with self._lock:
            for k in unique:
                self._partials.pop(k, None)

    def close(self) -> None:
        with self._lock:
            self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise RemoteStorageError(f"{self.url} is closed", retriable=False)
