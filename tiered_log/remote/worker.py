"""The tier's heavy work in worker processes, off the producers' interpreter (issue 18).

A segment's copy has two heavy parts: uploading the store (boto3's request handling,
checksums, multipart bookkeeping) and the scan that verifies every batch and cuts the
store into chunks for the manifest. Run on threads of the process that appends, they
take the GIL from the producers: a producer whose fsync returned waits for it, so an
acknowledged append's p99 follows how busy shipping is. Here both run in a small pool
of worker processes (:func:`shared_worker`, process-wide as the thread pools of
:mod:`~tiered_log.remote.limits`): a worker reads the sealed segment file itself and
uploads it through its own client of the same store; the log's process only waits
(without the GIL) and keeps every decision: the copy journal, the leader's fence before
the manifest is put (the commit point), rate limits, retries and cleanup stay where they
were (:mod:`~tiered_log.remote.copy`).

Only stores a worker can open again from plain arguments go there (a directory store and
S3, :func:`spec_of`); any other (an in-memory store in tests) is used in-process as
before. ``worker_processes`` 0 (:class:`~tiered_log.remote.tier_config.TierConfig`)
turns the pool off.

Processes start with the ``forkserver`` method (``spawn`` where there is none): never a
fork of a process with threads. A worker whose parent died finds its task pipe closed and
exits; an upload it had under way may still complete after that (an object without its
manifest: the restarted log's cleanup of the interrupted attempt, or the next rebuild,
deletes it).

Thread-safety: :func:`shared_worker` and :class:`TierWorker`'s methods may be called
from any thread; each call blocks until its task is done.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import RemoteStorageError
from ..format.remote_index import RemoteLogIndexEntry
from .manifest import chunk_entries
from .storage import RemoteStorage

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StorageSpec:
    """How a worker opens the same store again: ``kind`` ``"fs"`` (``args``: ``root``)
    or ``"s3"`` (``args``: :class:`~tiered_log.remote.s3.S3Storage`'s constructor's, and
    ``env``: the ``AWS_*`` variables of the log's process when the spec was taken, so a
    worker resolves the same credentials and region as the log's own client did)."""

    kind: str
    args_json: str
    env_json: str = "{}"

    def open(self) -> RemoteStorage:
        args = json.loads(self.args_json)
        if self.kind == "fs":
            from .fs import LocalDirStorage

            return LocalDirStorage(args["root"])
        from .s3 import S3Storage

        env = json.loads(self.env_json)
        for k in [k for k in os.environ if k.startswith("AWS_") and k not in env]:
            del os.environ[k]
        os.environ.update(env)  # the client resolves its credentials as it is made
        return S3Storage(**args)


def spec_of(storage: RemoteStorage) -> StorageSpec | None:
    """The spec a worker opens ``storage`` again with; None for a store only this
    process can use (it is then used in-process)."""
    from .fs import LocalDirStorage
    from .s3 import S3Storage

    if isinstance(storage, LocalDirStorage) and not storage.read_only:
        return StorageSpec("fs", json.dumps({"root": str(storage.root)}))
    if isinstance(storage, S3Storage):
        env = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
        return StorageSpec("s3", json.dumps(storage.reopen_args, sort_keys=True),
                           json.dumps(env, sort_keys=True))
    return None


# ---- in the worker process -----------------------------------------------------------------

_stores: dict[StorageSpec, RemoteStorage] = {}
_stores_lock = threading.Lock()


def _store(spec: StorageSpec) -> RemoteStorage:
    with _stores_lock:
        s = _stores.get(spec)
        if s is None:
            s = _stores[spec] = spec.open()
        return s


def _upload(spec: StorageSpec, key: str, path: str) -> int:
    """Worker: put the file ``path`` at ``key``; its size."""
    return _store(spec).put_file(key, path).size


def _scan(path: str, size: int, base_offset: int, expected_next: int, object_key: str,
          chunk_bytes: int) -> list[RemoteLogIndexEntry]:
    """Worker: :func:`~tiered_log.remote.manifest.chunk_entries`."""
    return chunk_entries(Path(path), size, base_offset, expected_next, object_key, chunk_bytes)


# ---- in the log's process ------------------------------------------------------------------


class TierWorker:
    """A pool of ``processes`` worker processes (started on first use) running the
    copy's upload and scan; see the module docstring."""

    def __init__(self, processes: int) -> None:
        if processes < 1:
            raise ValueError("a worker pool needs at least one process")
        self.processes = processes
        self._lock = threading.Lock()
        self._pool: ProcessPoolExecutor | None = None

    def _executor(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                methods = multiprocessing.get_all_start_methods()
                ctx = multiprocessing.get_context(
                    "forkserver" if "forkserver" in methods else "spawn")
                self._pool = ProcessPoolExecutor(self.processes, mp_context=ctx)
            return self._pool

    def _run(self, fn: Any, *args: Any) -> Any:
        try:
            return self._executor().submit(fn, *args).result()
        except BrokenProcessPool as exc:  # a worker died (killed, out of memory): a new pool
            with self._lock:
                self._pool = None
            raise RemoteStorageError(f"a tier worker process died: {exc}",
                                     retriable=True) from None

    def upload(self, spec: StorageSpec, key: str, path: Path) -> int:
        """Put the file ``path`` at ``key`` of the store ``spec`` names, in a worker;
        returns its size. The store's errors as it raises them."""
        return int(self._run(_upload, spec, key, str(path)))

    def scan(self, path: Path, size: int, base_offset: int, expected_next: int,
             object_key: str, chunk_bytes: int) -> list[RemoteLogIndexEntry]:
        """:func:`~tiered_log.remote.manifest.chunk_entries` in a worker (it verifies
        every batch: CorruptRecordError if the store is damaged)."""
        got: list[RemoteLogIndexEntry] = self._run(_scan, str(path), size, base_offset,
                                                   expected_next, object_key, chunk_bytes)
        return got

    def pids(self) -> list[int]:
        """The pids of the worker processes running now (none before first use)."""
        with self._lock:
            procs = getattr(self._pool, "_processes", None) or {}
            return sorted(p.pid for p in procs.values() if p.pid is not None)

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


_workers: dict[int, TierWorker] = {}
_workers_lock = threading.Lock()


def shared_worker(processes: int) -> TierWorker | None:
    """The process-wide worker pool of ``processes`` processes (None for 0: none)."""
    if processes <= 0:
        return None
    with _workers_lock:
        w = _workers.get(processes)
        if w is None:
            w = _workers[processes] = TierWorker(processes)
        return w


__all__ = ["StorageSpec", "TierWorker", "shared_worker", "spec_of"]
