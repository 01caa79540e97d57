"""The tier's heavy work in a worker process, off the producers' interpreter (issue 18).

A segment's copy has two heavy parts: uploading the store (boto3's request handling,
checksums, multipart bookkeeping) and the scan that verifies every batch and cuts the
store into chunks for the manifest; a catch-up read of archived data has one: fetching
chunks (a ranged GET through boto3) and writing them to the chunk cache.
Run on threads of the process that appends, they take the GIL from the producers: a
producer whose fsync returned waits for it, so an acknowledged append's p99 follows how
busy tiering is. Here all three run in worker processes (:func:`shared_worker`,
process-wide as the thread pools of :mod:`~tiered_log.remote.limits`), and so do a
compressed or encrypted copy's scan and encoding and a fetched chunk's decoding
(:mod:`~tiered_log.remote.chunk_codec`): a worker reads
the sealed segment file itself and uploads it through its own client of the same store,
or GETs a range and writes each chunk's cache file itself
(:func:`~tiered_log.remote.cache.write_chunk_file`), telling the log's process about
each chunk as soon as its file is there (a reader starts on the first chunk while the
rest are written). The worker does not check a fetched chunk's batches: the reader
checks every batch it serves, once, where it reads it (the cache file), so damage
after the hand-over is caught too and no byte is checked twice. The log's process only waits
(without the GIL) and keeps every decision: the copy journal, the leader's fence before
the manifest is put (the commit point), rate limits, retries, cleanup and the chunk
cache's bookkeeping stay where they were (:mod:`~tiered_log.remote.copy`,
:mod:`~tiered_log.remote.reader`).

Every other call of a remote tier to its store runs in a worker too
(:class:`WorkerStorage`, :func:`in_worker`: the store a tier and the topic manager use):
manifest puts, the metadata record and its reservations, partition snapshots, deletes,
listings and small reads. The store's client (boto3 for S3) then never runs in the log's
process; the decisions stay there (the fence is asked before the manifest is put, as
before), and each call keeps the store's behaviour (its retries run in the worker, its
errors come back as raised). A local-directory store goes the same way: its calls are
file writes with fsyncs, which hold the GIL less, but one path for both keeps the tests
of one the tests of the other.

A worker is a plain child process running :func:`main` (not
:mod:`multiprocessing`, which would import the caller's ``__main__`` script again in the
child and run whatever it does at top level). It runs tasks on a few threads of its own.
The channel is its stdin and stdout, frames of::

    length   4 bytes, big-endian: the bytes of the pickle that follows
    task id  8 bytes, big-endian
    pickle   request:  (task name, args)   task name "upload", "scan", "encode", "fetch"
                       or "store" (any other store call, :class:`WorkerStorage`), or
                       "cancel" (args: the task id)
             answer:   (ok, result or the exception raised)
             progress: (None, value)   before the answer, any number ("fetch":
                       (chunk index, written, bytes) as each chunk's cache file is written;
                       "store" put_file: bytes sent so far)

between this package's own processes only. The task id is outside the pickle so that a
frame whose pickle cannot be decoded on its side still reaches its task: a request the
worker cannot decode, an answer the worker cannot encode and an answer the log's process
cannot decode each fail that task with a RemoteStorageError, and the channel goes on.
Every task's future completes: with its answer, or with that error, or (the worker gone,
the channel broken or closed) with a retriable RemoteStorageError.

Only stores a worker can open again from plain arguments go there (a directory store
and S3, :func:`spec_of`); any other (the tests' in-memory store) is used in-process as
before. ``worker_processes`` 0
(:class:`~tiered_log.remote.tier_config.TierConfig`) turns the workers off.

Workers run at a lower CPU priority (``worker_nice``, 10 by default): tiering is
background work, and on a busy machine the producers' (and consumers') process gets the
CPU first. Measured with the log on tmpfs (the CPU alone): an acknowledged append's p99
while shipping 1.7 -> 0.85 ms, with a catch-up reader 3.7 -> 1.5 ms; the catch-up
reader 42 K -> 26 K records/s.

A worker whose parent died reads the end of its stdin and exits; an upload it had under
way may still complete (an object without its manifest: the restarted log's cleanup of
the interrupted attempt, or the next rebuild, deletes it). A worker that dies fails the
tasks it had with a retriable RemoteStorageError; the next task starts a new one.

Thread-safety: :func:`shared_worker` and :class:`TierWorker`'s methods may be called
from any thread; each call blocks until its task is done.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import pickle
import queue
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, InvalidStateError, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from ..allocator import tune_malloc
from ..errors import RemoteCorruptionError, RemoteStorageError
from ..format.remote_index import RemoteLogIndexEntry
from .cache import chunk_file_name, write_chunk_file
from .chunk_codec import decode_chunk
from .manifest import chunk_entries, encode_segment
from .objects import ObjectInfo
from .storage import RemoteStorage
from .tier_config import TierConfig

log = logging.getLogger(__name__)

THREADS = 8
"""Tasks one worker runs at once (a log has at most ``copies_in_flight`` copies of two
tasks each under way, and its readers a few fetches)."""
_HEAD = struct.Struct(">IQ")
"""A frame's head: its pickle's length and its task id."""


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

            return LocalDirStorage(args["root"], read_only=args.get("read_only", False))
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

    if isinstance(storage, WorkerStorage):
        return storage.spec
    if isinstance(storage, LocalDirStorage):
        return StorageSpec(
            "fs", json.dumps({"root": str(storage.root), "read_only": storage.read_only})
        )
    # An S3Storage exists only once its module (and boto3, a tenth of a second to import)
    # has been imported: a process whose tier is a local directory need not import it.
    s3 = sys.modules.get(f"{__package__}.s3")
    if s3 is not None and isinstance(storage, s3.S3Storage):
        env = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
        return StorageSpec(
            "s3", json.dumps(storage.reopen_args, sort_keys=True), json.dumps(env, sort_keys=True)
        )
    return None


def _write_frame(out: IO[bytes], task_id: int, obj: object) -> None:
    """Send one frame (see the module docstring); pickling errors are raised before
    anything is written. The caller holds the channel's write lock."""
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    out.write(_HEAD.pack(len(data), task_id))
    out.write(data)
    out.flush()


def _read_frame(inp: IO[bytes]) -> tuple[int, bytes] | None:
    """The next frame's task id and pickle, undecoded; None at the end of the stream."""
    head = inp.read(_HEAD.size)
    if len(head) < _HEAD.size:
        return None
    n, task_id = _HEAD.unpack(head)
    data = inp.read(n)
    if len(data) < n:
        return None
    return task_id, data


def _describe(value: object) -> str:
    """``repr(value)``, or its type's name when that fails too."""
    try:
        return repr(value)
    except Exception:
        return f"<{type(value).__name__}>"


# ---- in the worker process -----------------------------------------------------------------

_stores: dict[StorageSpec, RemoteStorage] = {}
_stores_lock = threading.Lock()


def _store(spec: StorageSpec) -> RemoteStorage:
    with _stores_lock:
        s = _stores.get(spec)
        if s is None:
            s = _stores[spec] = spec.open()
        return s


def _upload(spec: StorageSpec, key: str, path: str, storage_class: str | None = None) -> int:
    """Put the file ``path`` at ``key`` (in ``storage_class``); its size."""
    return _store(spec).put_file(key, path, storage_class=storage_class).size


def _scan(
    path: str, size: int, base_offset: int, expected_next: int, object_key: str, chunk_bytes: int
) -> list[RemoteLogIndexEntry]:
    return chunk_entries(Path(path), size, base_offset, expected_next, object_key, chunk_bytes)


def _encode(
    path: str,
    size: int,
    base_offset: int,
    expected_next: int,
    object_key: str,
    chunk_bytes: int,
    codec: str,
    dek: bytes | None,
    out: str,
) -> list[RemoteLogIndexEntry]:
    return encode_segment(
        Path(path), size, base_offset, expected_next, object_key, chunk_bytes, codec, dek, Path(out)
    )


def _fetch(
    spec: StorageSpec,
    key: str,
    start: int,
    end: int,
    chunks: list[tuple[int, int]],
    cache_dir: str,
    dek: bytes | None,
    progress: Callable[[tuple[int, bool, int]], None],
) -> list[bool]:
    """GET ``[start, end)`` of ``key``; decode each stored chunk ``(position, length)``
    in it (:func:`~tiered_log.remote.chunk_codec.decode_chunk`, with the segment's data
    key ``dek``) and write its chunk cache file, in order, calling
    ``progress((index, written, bytes))`` as each is done. Whether each was written.
    The batches are not checked here: the reader checks every batch it serves (see
    the module docstring); a chunk that does not decode raises (RemoteCorruptionError,
    or KeyUnavailableError for an encrypted one without ``dek``)."""
    blob = _store(spec).get(key, start, end)
    if len(blob) != end - start:
        raise RemoteCorruptionError(
            f"{key}: asked for {end - start} bytes at {start}, got {len(blob)}"
        )
    view = memoryview(blob)
    out: list[bool] = []
    for i, (position, length) in enumerate(chunks):
        data = decode_chunk(
            view[position - start : position - start + length], dek, f"{key} byte {position}"
        )
        ok = write_chunk_file(Path(cache_dir), chunk_file_name(key, position, length), data)
        out.append(ok)
        progress((i, ok, len(data)))
    return out


class _Cancelled(Exception):
    """Raised in a worker's task whose caller cancelled it (see :func:`serve`)."""


STORE_CALLS = frozenset({"put", "put_file", "get", "size", "list", "delete", "discard_partial"})
"""The :class:`~tiered_log.remote.storage.RemoteStorage` methods a worker runs for
:class:`WorkerStorage`."""


def _store_call(
    spec: StorageSpec,
    method: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    progress: Callable[[int], None],
) -> Any:
    """Run the store's ``method`` (one of :data:`STORE_CALLS`); a listing is returned
    whole, and ``put_file`` asked to ``report`` sends its progress as progress frames."""
    if method not in STORE_CALLS:
        raise RemoteStorageError(f"a tier worker runs no store method {method!r}")
    store = _store(spec)
    if method == "list":
        return list(store.list(*args, **kwargs))
    if method == "put_file" and kwargs.pop("report", False):
        kwargs["progress"] = progress
    return getattr(store, method)(*args, **kwargs)


_TASKS: dict[str, Any] = {
    "upload": _upload,
    "scan": _scan,
    "encode": _encode,
    "fetch": _fetch,
    "store": _store_call,
}


def serve(inp: IO[bytes], out: IO[bytes]) -> None:
    """The worker's loop: run each request on a thread, answer on ``out``; return at
    the end of ``inp`` (the parent is gone or closed the channel). A ``"cancel"``
    request (args: the task id) is taken at once: that task's next progress report
    raises :class:`_Cancelled` in it (a ``put_file`` aborts, leaving nothing behind).
    Every request gets an answer: one that cannot be decoded here, or whose answer
    cannot be encoded, is answered with a RemoteStorageError saying so."""
    write_lock = threading.Lock()
    cancelled: set[int] = set()

    def answer(task_id: int, ok: bool, value: object, name: str) -> None:
        with write_lock:
            try:
                try:
                    _write_frame(out, task_id, (ok, value))
                except Exception as exc:  # the answer does not pickle: say so instead
                    _write_frame(
                        out,
                        task_id,
                        (
                            False,
                            RemoteStorageError(
                                f"tier worker task {name} ended with {_describe(value)}, "
                                f"which cannot be sent back ({exc!r})",
                                retriable=False,
                            ),
                        ),
                    )
            except (OSError, ValueError):
                pass  # the channel is gone: nobody waits for the answer here any more

    def run(task_id: int, name: str, args: tuple[Any, ...]) -> None:
        def progress(value: object) -> None:
            if task_id in cancelled:
                raise _Cancelled(f"task {task_id} cancelled by its caller")
            with write_lock:
                _write_frame(out, task_id, (None, value))

        try:
            if name in ("fetch", "store"):
                args = (*args, progress)
            ok, value = True, _TASKS[name](*args)
        except BaseException as exc:  # returned to the caller, raised there
            ok, value = False, exc
        finally:
            cancelled.discard(task_id)
        answer(task_id, ok, value, name)

    with ThreadPoolExecutor(THREADS, thread_name_prefix="tier-worker") as pool:
        while (frame := _read_frame(inp)) is not None:
            task_id, data = frame
            try:
                name, args = pickle.loads(data)
            except Exception as exc:
                answer(
                    task_id,
                    False,
                    RemoteStorageError(
                        f"tier worker task {task_id}: its request cannot be decoded in the "
                        f"worker ({exc!r})",
                        retriable=False,
                    ),
                    "?",
                )
                continue
            if name == "cancel":
                cancelled.add(args[0])
            else:
                pool.submit(run, task_id, name, args)


# ---- in the log's process ------------------------------------------------------------------


class _Process:
    """One worker process and the tasks it has under way. Thread-safe: ``submit`` and
    ``cancel`` from any thread; one thread of its own reads the answers. Every future
    ``submit`` returns completes (see the module docstring)."""

    def __init__(self, nice: int = 0) -> None:
        self.owner = os.getpid()
        """The process that started it (a forked child must start its own)."""
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from tiered_log.remote.worker import main; main()", str(nice)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None,
            close_fds=True,
        )
        self.pending: dict[int, Future[Any]] = {}
        self.progress: dict[int, Callable[[Any], None]] = {}
        self.lock = threading.Lock()
        self.dead: str | None = None
        """Why no task may be sent any more (None: it takes tasks)."""
        self.reader = threading.Thread(
            target=self._read, daemon=True, name=f"tier-worker-{self.proc.pid}"
        )
        self.reader.start()

    def _read(self) -> None:
        """The channel's thread: completes each task's future with its answer; at the end
        of the channel (or any failure of this thread) fails every task left."""
        why = "the tier worker process ended"
        try:
            assert self.proc.stdout is not None
            while (frame := _read_frame(self.proc.stdout)) is not None:
                self._answer(*frame)
        except BaseException as exc:
            why = f"the tier worker's channel broke ({exc!r})"
            log.warning("tier worker %d: %s", self.proc.pid, why)
        finally:
            self._fail(why)

    def _answer(self, task_id: int, data: bytes) -> None:
        """Hand one frame to its task: a progress report, or the answer that completes
        its future (an answer that does not decode fails it)."""
        try:
            ok, value = pickle.loads(data)
        except Exception as exc:
            ok, value = (
                False,
                RemoteStorageError(
                    f"tier worker task {task_id}: its answer cannot be decoded ({exc!r})",
                    retriable=False,
                ),
            )
        if ok is None:  # progress of a task still under way
            with self.lock:
                report = self.progress.get(task_id)
            if report is not None:
                try:
                    report(value)
                except Exception:  # the caller's bug must not end the channel
                    log.exception("tier worker %d: progress report failed", self.proc.pid)
            return
        with self.lock:
            fut = self.pending.pop(task_id, None)
            self.progress.pop(task_id, None)
        if fut is None:
            return
        if not ok and not isinstance(value, BaseException):
            value = RemoteStorageError(
                f"tier worker task {task_id} failed with {_describe(value)}", retriable=False
            )
        try:
            if ok:
                fut.set_result(value)
            else:
                fut.set_exception(value)
        except InvalidStateError:
            pass  # completed already (nothing else completes these: defensive)

    def _fail(self, why: str) -> None:
        """No more tasks go to this process; every task it has fails (retriable)."""
        with self.lock:
            self.dead = why
            pending, self.pending = self.pending, {}
            self.progress = {}
        for fut in pending.values():
            with contextlib.suppress(InvalidStateError):
                fut.set_exception(
                    RemoteStorageError(
                        f"{why} (pid {self.proc.pid}, exit {self.proc.poll()})", retriable=True
                    )
                )

    def submit(
        self,
        task_id: int,
        name: str,
        args: tuple[Any, ...],
        progress: Callable[[Any], None] | None = None,
    ) -> Future[Any]:
        """Send a task; its future. ``progress`` gets the task's progress values, on
        this process's channel thread, before the future completes (it must not block).
        Arguments that cannot be pickled raise here as pickling raised them; a channel
        that is closed or breaks raises a retriable RemoteStorageError (this process
        then takes no more tasks: the next one starts a new one)."""
        data = pickle.dumps((name, args), protocol=pickle.HIGHEST_PROTOCOL)
        head = _HEAD.pack(len(data), task_id)
        fut: Future[Any] = Future()
        with self.lock:
            if self.dead is not None:
                raise RemoteStorageError(self.dead, retriable=True)
            self.pending[task_id] = fut
            if progress is not None:
                self.progress[task_id] = progress
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write(head)
                self.proc.stdin.write(data)
                self.proc.stdin.flush()
            except BaseException as exc:
                self.pending.pop(task_id, None)
                self.progress.pop(task_id, None)
                # A frame may be cut short: nothing more goes on this channel. Its end
                # lets the worker finish the tasks it has and exit; the channel's thread
                # then fails whatever is left.
                self.dead = f"the tier worker's channel is gone ({exc!r})"
                self._close_input()
                if isinstance(exc, Exception):
                    raise RemoteStorageError(self.dead, retriable=True) from None
                raise
        return fut

    def _close_input(self) -> None:
        """Close the worker's stdin (the caller holds ``lock``)."""
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        except (OSError, ValueError):
            pass  # a frame cut short stays cut: the worker reads the end of its input

    def cancel(self, task_id: int) -> None:
        """Ask the worker to stop task ``task_id`` at its next progress report."""
        with self.lock:
            if self.dead is None:
                try:
                    assert self.proc.stdin is not None
                    _write_frame(self.proc.stdin, task_id, ("cancel", (task_id,)))
                except (OSError, ValueError) as exc:
                    self.dead = f"the tier worker's channel is gone ({exc!r})"
                    self._close_input()

    def close(self) -> None:
        """Take no more tasks and stop the worker once it has answered the ones it has
        (killed after 30 s)."""
        with self.lock:
            if self.dead is None:
                self.dead = "the tier worker process was stopped"
            self._close_input()  # the worker finishes what it has, then exits
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.reader.join(5)


class TierWorker:
    """``processes`` worker processes (started on first use, again after one dies),
    tasks spread over them in turn; see the module docstring."""

    def __init__(self, processes: int, nice: int = 0) -> None:
        if processes < 1:
            raise ValueError("a tier worker pool needs at least one process")
        self.processes = processes
        self.nice = nice
        """How much lower the workers' CPU priority is than this process's (``nice``)."""
        self._lock = threading.Lock()
        self._procs: list[_Process | None] = [None] * processes
        self._ids = itertools.count()
        self._turn = itertools.count()

    def _process(self) -> _Process:
        """The next worker process in turn (started again if it died)."""
        with self._lock:
            i = next(self._turn) % self.processes
            p = self._procs[i]
            if p is None or p.dead is not None or p.owner != os.getpid():
                p = self._procs[i] = _Process(self.nice)
            return p

    def _run(self, name: str, *args: Any, progress: Callable[[Any], None] | None = None) -> Any:
        return self._process().submit(next(self._ids), name, args, progress).result()

    def upload(
        self, spec: StorageSpec, key: str, path: Path, storage_class: str | None = None
    ) -> int:
        """Put the file ``path`` at ``key`` of the store ``spec`` names (in
        ``storage_class``, :meth:`RemoteStorage.put_file
        <tiered_log.remote.storage.RemoteStorage.put_file>`'s), in a worker; returns its
        size. The store's errors as it raises them."""
        return int(self._run("upload", spec, key, str(path), storage_class))

    def scan(
        self,
        path: Path,
        size: int,
        base_offset: int,
        expected_next: int,
        object_key: str,
        chunk_bytes: int,
    ) -> list[RemoteLogIndexEntry]:
        """:func:`~tiered_log.remote.manifest.chunk_entries` in a worker (it verifies
        every batch: CorruptRecordError if the store is damaged)."""
        got: list[RemoteLogIndexEntry] = self._run(
            "scan", str(path), size, base_offset, expected_next, object_key, chunk_bytes
        )
        return got

    def encode(
        self,
        path: Path,
        size: int,
        base_offset: int,
        expected_next: int,
        object_key: str,
        chunk_bytes: int,
        codec: str,
        dek: bytes | None,
        out: Path,
    ) -> list[RemoteLogIndexEntry]:
        """:func:`~tiered_log.remote.manifest.encode_segment` in a worker: the store
        verified, cut and each chunk compressed/encrypted into the file ``out``; the
        stored chunks' entries."""
        got: list[RemoteLogIndexEntry] = self._run(
            "encode",
            str(path),
            size,
            base_offset,
            expected_next,
            object_key,
            chunk_bytes,
            codec,
            dek,
            str(out),
        )
        return got

    def fetch(
        self,
        spec: StorageSpec,
        key: str,
        start: int,
        end: int,
        chunks: list[tuple[int, int]],
        cache_dir: Path,
        on_chunk: Callable[[int, bool, int], None],
        dek: bytes | None = None,
    ) -> list[bool]:
        """In a worker: GET ``[start, end)`` of ``key``, decode each stored chunk
        ``(position, length)`` (with the segment's data key ``dek`` when it is
        encrypted) and write its file into the chunk cache ``cache_dir`` (see
        :meth:`~tiered_log.remote.cache.ChunkCache.expect`), in order; as each is done,
        ``on_chunk(index, written, bytes)`` runs on the channel's thread (it must not
        block), so a reader can start on it before the rest are written. Returns whether
        each was written (False: the file could not be written). The chunks' batches are
        not checked (the reader checks what it serves). The store's errors as it raises
        them; RemoteCorruptionError for a short answer or a chunk that does not decode."""
        got: list[bool] = self._run(
            "fetch",
            spec,
            key,
            start,
            end,
            chunks,
            str(cache_dir),
            dek,
            progress=lambda value: on_chunk(*value),
        )
        return got

    def store_call(
        self,
        spec: StorageSpec,
        method: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        progress: Callable[[int], None] | None = None,
    ) -> Any:
        """The store ``spec`` names runs ``method(*args, **kwargs)`` (one of
        :data:`STORE_CALLS`) in a worker; its result (a listing as a list), or its error
        raised here. ``progress`` (``put_file``'s) runs on the calling thread, as the
        store's own would; an exception it raises cancels the upload in the worker and
        propagates (an upload that finished before the cancel arrived is deleted)."""
        if progress is None:
            return self._run("store", spec, method, args, kwargs)
        reports: queue.SimpleQueue[int] = queue.SimpleQueue()
        task_id, p = next(self._ids), self._process()
        fut = p.submit(task_id, "store", (spec, method, args, kwargs), reports.put)
        fut.add_done_callback(lambda _f: reports.put(-1))
        try:
            while not fut.done() or not reports.empty():
                n = reports.get()
                if n >= 0:
                    progress(n)
        except BaseException:
            p.cancel(task_id)
            try:
                fut.result()
            except Exception:  # cancelled (or failed anyway): nothing was stored
                pass
            else:
                self._run("store", spec, "delete", ([args[0]],), {})
            raise
        return fut.result()

    def pids(self) -> list[int]:
        """The pids of the worker processes running now (none before first use)."""
        with self._lock:
            return sorted(p.proc.pid for p in self._procs if p is not None and p.dead is None)

    def close(self) -> None:
        """Stop the workers (each finishes the tasks it has first)."""
        with self._lock:
            procs, self._procs = self._procs, [None] * self.processes
        for p in procs:
            if p is not None:
                p.close()


class WorkerStorage:
    """A :class:`~tiered_log.remote.storage.RemoteStorage` whose every call runs in a
    tier worker (the store the worker opens from ``spec``), so the store's client
    (boto3) never runs in this process for it: a remote tier's manifest puts, metadata
    and snapshot writes, deletes, listings and small reads go through the same channel
    as its uploads and fetches. Each method has the store's own behaviour: its retries
    run in the worker and its errors come back as it raised them (a worker that dies:
    retriable RemoteStorageError, as for an upload). ``local``: the same store opened
    in this process, for its plain attributes (``url``, ``endpoint_url``, ``region``...)
    and its close; none of its methods is called. Thread-safe: each call blocks its
    caller until the worker answers."""

    def __init__(self, worker: TierWorker, spec: StorageSpec, local: RemoteStorage) -> None:
        self.worker = worker
        self.spec = spec
        self.local = local
        self._closed = False

    def _call(
        self, method: str, *args: Any, progress: Callable[[int], None] | None = None, **kw: Any
    ) -> Any:
        if self._closed:
            raise RemoteStorageError(f"storage {self.url} is closed", retriable=False)
        return self.worker.store_call(self.spec, method, args, kw, progress)

    def put(self, key: str, data: bytes | memoryview) -> ObjectInfo:
        info: ObjectInfo = self._call("put", key, bytes(data))
        return info

    def put_file(
        self,
        key: str,
        path: str | os.PathLike[str],
        progress: Callable[[int], None] | None = None,
        *,
        storage_class: str | None = None,
    ) -> ObjectInfo:
        info: ObjectInfo = self._call(
            "put_file",
            key,
            os.fspath(path),
            storage_class=storage_class,
            report=progress is not None,
            progress=progress,
        )
        return info

    def get(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        data: bytes = self._call("get", key, start, end)
        return data

    def size(self, key: str) -> int:
        return int(self._call("size", key))

    def list(self, prefix: str, start_after: str = "") -> Iterator[ObjectInfo]:
        found: list[ObjectInfo] = self._call("list", prefix, start_after)
        return iter(found)

    def delete(self, keys: Sequence[str]) -> None:
        self._call("delete", keys if isinstance(keys, (str, tuple)) else list(keys))

    def discard_partial(self, keys: Sequence[str]) -> None:
        self._call("discard_partial", keys if isinstance(keys, (str, tuple)) else list(keys))

    def close(self) -> None:
        self._closed = True
        self.local.close()

    @property
    def url(self) -> str:
        return self.local.url

    def __getattr__(self, name: str) -> Any:
        """The local store's plain attributes (never a method: those run in a worker)."""
        value = getattr(self.local, name)
        if callable(value):
            raise AttributeError(f"{name} is not a store call a tier worker runs")
        return value


def in_worker(config: TierConfig, storage: RemoteStorage) -> RemoteStorage:
    """``storage`` with its calls run in the tier's worker processes
    (:class:`WorkerStorage`), or ``storage`` itself when workers are off or it cannot
    be opened in another process (:func:`worker_for`)."""
    if isinstance(storage, WorkerStorage):
        return storage
    placed = worker_for(config, storage)
    return storage if placed is None else WorkerStorage(placed[0], placed[1], storage)


_workers: dict[tuple[int, int], TierWorker] = {}
_workers_lock = threading.Lock()


def shared_worker(processes: int, nice: int = 0) -> TierWorker | None:
    """The process-wide worker pool of ``processes`` processes at ``nice`` (None for 0
    processes: none)."""
    if processes <= 0:
        return None
    with _workers_lock:
        w = _workers.get((processes, nice))
        if w is None:
            w = _workers[(processes, nice)] = TierWorker(processes, nice)
        return w


def worker_for(config: TierConfig, storage: RemoteStorage) -> tuple[TierWorker, StorageSpec] | None:
    """Where a log's tier work goes: the process-wide pool ``config`` names and how a
    worker opens ``storage`` (:func:`spec_of`); None when workers are off or the store
    cannot be opened in another process (then on this process's threads)."""
    worker = shared_worker(config.worker_processes, config.worker_nice)
    spec = spec_of(storage) if worker is not None else None
    return (worker, spec) if worker is not None and spec is not None else None


def main() -> None:
    """A worker process's entry point: serve tasks on stdin/stdout until stdin ends. Nothing else may write to stdout: prints and logs go to stderr."""
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    tune_malloc()  # chunks of megabytes are encoded and decoded here one after another
    nice = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    if nice > 0:  # background work: producers and consumers first when the CPU is short
        os.nice(nice)
    serve(inp, out)


__all__ = [
    "STORE_CALLS",
    "StorageSpec",
    "TierWorker",
    "WorkerStorage",
    "in_worker",
    "serve",
    "shared_worker",
    "spec_of",
    "worker_for",
]
