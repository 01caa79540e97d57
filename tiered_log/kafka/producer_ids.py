"""Producer ids for Kafka's InitProducerId: unique across the service's life, handed
out from blocks reserved in a durable store before any id of the block is used.

- A single node keeps the next unreserved id in ``<data_dir>/producer-ids``
  (:data:`ID_FILE`: the decimal number and a newline), written atomically (temporary
  file, fsync, rename, fsync of the directory) with the block's end *before* an id of
  the block is handed out: after a crash (or a SIGKILL) the ids of a block partly used
  are skipped, never handed out twice.
- A cluster keeps it in the metadata store (etcd key :data:`ETCD_KEY`, a JSON object
  ``{"next": N}``) and every node reserves its blocks with a compare-and-swap on the
  key's revision (:meth:`~tiered_log.cluster.etcd.MetaStore.put_if`): two nodes never
  reserve the same block, so an id is unique across nodes; a node that dies leaves the
  rest of its block unused.

Invariant kept: an id is handed out only once its whole block is recorded as reserved
in the store, and a block is reserved only by moving the store's ``next`` up; so no id
is ever handed out twice, across restarts and nodes.

Thread-safety: :class:`ProducerIds` hands out ids under a lock; a reservation (a file
write and fsync, or an etcd round trip) blocks: call it off the event loop.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import MetadataUnavailableError, TieredLogError
from ..local.files import write_atomic

if TYPE_CHECKING:
    from ..cluster.etcd import MetaStore

BLOCK = 1000
"""Ids reserved at once (Kafka's ``PRODUCER_ID_BLOCK_SIZE``)."""
ID_FILE = "producer-ids"
"""The single node's file, in the data directory."""
ETCD_KEY = "producer-ids"
"""The cluster's key, relative to the cluster's prefix in etcd."""
MAX_ID = (1 << 63) - 1

Reserve = Callable[[int], int]
"""Reserve ``n`` ids in the store; returns the first (the block is ``[first, first+n)``)."""


class ProducerIds:
    """Hands out producer ids from blocks ``reserve`` records (see the module
    docstring). Thread-safe."""

    def __init__(self, reserve: Reserve, block: int = BLOCK) -> None:
        self._reserve = reserve
        self._block = block
        self._lock = threading.Lock()
        self._next = 0
        self._end = 0

    def next_id(self) -> int:
        """A producer id never handed out before. Blocks on the store when a block is
        used up; its errors propagate (nothing is handed out then)."""
        with self._lock:
            if self._next >= self._end:
                first = self._reserve(self._block)
                if first < 0 or first + self._block > MAX_ID:
                    raise TieredLogError(f"producer ids exhausted (next block at {first})")
                self._next, self._end = first, first + self._block
            pid = self._next
            self._next += 1
            return pid


def file_reserver(data_dir: Path) -> Reserve:
    """Blocks recorded in ``<data_dir>/producer-ids`` (a single node)."""
    path = Path(data_dir) / ID_FILE

    def reserve(n: int) -> int:
        try:
            text = path.read_text()
        except FileNotFoundError:
            text = "0"
        try:
            first = int(text.strip())
        except ValueError:
            raise TieredLogError(
                f"{path} is damaged ({text[:40]!r}): it must hold the next producer id"
            ) from None
        try:
            write_atomic(path, b"%d\n" % (first + n))
        except OSError as exc:
            raise TieredLogError(f"cannot reserve producer ids in {path}: {exc}") from exc
        return first

    return reserve


def etcd_reserver(store: MetaStore, attempts: int = 20) -> Reserve:
    """Blocks recorded in the cluster's metadata store, by compare-and-swap."""

    def reserve(n: int) -> int:
        for _ in range(attempts):
            got = store.get(ETCD_KEY)
            first = 0 if got is None else int(got.value["next"])
            if store.put_if(ETCD_KEY, {"next": first + n}, 0 if got is None else got.mod_revision):
                return first
        raise MetadataUnavailableError(
            f"producer ids: {attempts} reservations lost a race in the metadata store"
        )

    return reserve


__all__ = [
    "BLOCK",
    "ETCD_KEY",
    "ID_FILE",
    "ProducerIds",
    "Reserve",
    "etcd_reserver",
    "file_reserver",
]
