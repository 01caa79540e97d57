"""The wrapped data keys of a log's encrypted copies, kept on the node beside its remote
index, so that a reader unwraps a segment's key without reading its manifest first.

An encrypted copy's manifest in the bucket holds its data key wrapped with a key of
the ring (:mod:`~tiered_log.remote.crypto`); that stays the source of truth. This file
is a cache of it, filled when this node copies a segment and when a reader had to read
a manifest: ``<log>/remote/data-keys``, one JSON line per copy::

    {"object": "<the data object's key>", "key_id": "<ring key id>", "wrapped": "<base64>"}

Lines are only appended (a later line for an object replaces an earlier one: a manifest
re-wrapped with another key), without fsync: a line lost or torn in a crash, or a stale
one (the key it names removed from the ring after a re-wrap), only sends the reader
back to the manifest. When the file holds more than :data:`COMPACT_LINES` lines and at
least half of them name objects the log no longer has, it is rewritten with the rest.

Thread-safe: one lock guards the map and the appends.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from ..local.files import write_atomic

log = logging.getLogger(__name__)

FILE_NAME = "data-keys"
COMPACT_LINES = 1000
"""Lines the file may hold before the ones of vanished objects are dropped at load."""


class DataKeys:
    """Object key -> ``(key id, wrapped data key)`` of one log's encrypted copies (see
    the module docstring). ``live`` gives the object keys the log has now (read when
    the file is compacted at load)."""

    def __init__(self, directory: Path, live: Callable[[], Iterable[str]]) -> None:
        self.path = directory / FILE_NAME
        self._live = live
        self._lock = threading.Lock()
        self._keys: dict[str, tuple[str, str]] | None = None  # None: not loaded yet

    def _load(self) -> dict[str, tuple[str, str]]:
        """The map, read from the file on first use (caller holds the lock)."""
        if self._keys is not None:
            return self._keys
        keys: dict[str, tuple[str, str]] = {}
        lines = 0
        try:
            with open(self.path, encoding="utf-8") as f:
                for line in f:
                    lines += 1
                    try:
                        doc = json.loads(line)
                        keys[str(doc["object"])] = (str(doc["key_id"]), str(doc["wrapped"]))
                    except (ValueError, KeyError, TypeError):
                        continue  # a torn last line: that copy's manifest is read instead
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("%s: cannot read the data keys (%s); manifests are read", self.path, exc)
        if lines > COMPACT_LINES:
            live = set(self._live())
            kept = {k: v for k, v in keys.items() if k in live}
            if 2 * len(kept) <= lines:
                try:
                    write_atomic(self.path, b"".join(_line(k, *v) for k, v in kept.items()))
                    keys = kept
                except OSError as exc:
                    log.warning("%s: not compacted: %s", self.path, exc)
        self._keys = keys
        return keys

    def get(self, object_key: str) -> tuple[str, str] | None:
        """``(key id, wrapped key)`` of ``object_key`` if this node knows it."""
        with self._lock:
            return self._load().get(object_key)

    def put(self, object_key: str, key_id: str, wrapped: str) -> None:
        """Remember the wrapped key of ``object_key`` (a copy made, or a manifest read).
        A failure to write it is logged: readers then read the manifest."""
        with self._lock:
            keys = self._load()
            if keys.get(object_key) == (key_id, wrapped):
                return
            keys[object_key] = (key_id, wrapped)
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                try:
                    os.write(fd, _line(object_key, key_id, wrapped))
                finally:
                    os.close(fd)
            except OSError as exc:
                log.warning("%s: a data key not kept: %s", self.path, exc)


def _line(object_key: str, key_id: str, wrapped: str) -> bytes:
    doc = {"object": object_key, "key_id": key_id, "wrapped": wrapped}
    return (json.dumps(doc, separators=(",", ":")) + "\n").encode()


__all__ = ["COMPACT_LINES", "FILE_NAME", "DataKeys"]
