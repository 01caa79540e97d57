"""A read-only mount of another cluster's archive (Redpanda's remote read replicas).

A service started with ``read_only_remote=true`` and the owner's ``remote_url`` serves
every topic the owner published in that bucket (``topics/<name>.json``) to readers, over
HTTP and the Kafka listener alike, and writes nothing anywhere but its own data
directory. :class:`MountedTopics` stands in for the
:class:`~tiered_log.broker.topics.TopicManager` (the broker, the routes and the Kafka
handlers use it unchanged):

- each partition is a :class:`~tiered_log.partition.log.TieredLog` opened as a follower
  (``replicated``, no shipper: it ships, reserves, snapshots and retains nothing) on the
  bucket behind :class:`~tiered_log.remote.read_only.ReadOnlyStorage`; its local log
  holds no record (it restarts empty at the remote end at every poll,
  :meth:`TieredLog.follow_bucket <tiered_log.partition.log.TieredLog.follow_bucket>`),
  so every read below the end goes to the bucket through the chunk cache;
- :class:`MountPoller`, every ``remote_poll_interval_ms``, lists the topics (a topic
  published since opens, one deleted closes, one created again under a new id is
  replaced, an altered one shows its new settings) and moves every partition's view up
  to what the owner committed (:class:`~tiered_log.remote.follow.BucketFollower`),
  waking the reads parked at a partition's end when it moved (:attr:`MountedTopics.on_advance`);
- every write is refused with :class:`~tiered_log.errors.ReadOnlyError` (HTTP 403
  ``read_only``; Kafka POLICY_VIOLATION with the message): produce
  (:meth:`Broker.produce_target <tiered_log.broker.broker.Broker.produce_target>` asks
  :meth:`MountedTopics.check_writable`), topic creation, deletion and alteration,
  truncation; Kafka's auto-creation is off.

Local layout: ``<data_dir>/mount/<topic>-<id12>/<partition>/`` holds each partition's
view of the bucket (copy journal, metadata, remote-index files) and its chunk cache;
it is derived data, removed and rebuilt from the bucket (the partition snapshots, then
the manifests after them) at every start. ``<data_dir>/topics`` is not used.

Invariant: no object of the mounted bucket is ever written or deleted (the store
refuses it, and no path of the mount asks for it).

Thread-safety: as :class:`~tiered_log.broker.topics.TopicManager`: lookups take no lock
(they read the topic table, which the poller replaces whole); the poller's changes
serialize with :meth:`MountedTopics.close` on the manager's lock. Opening and following
block on the bucket: the poller runs on a thread of its own, never on the event loop.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import shutil
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..config import Settings
from ..errors import (
    InvalidArgumentError,
    ReadOnlyError,
    TieredLogError,
)
from ..format import naming
from ..local.log import LogConfig
from ..partition import TieredLog
from ..remote.read_only import open_read_only_store
from ..remote.storage import ObjectInfo
from .topics import (
    TOPIC_NAME_RE,
    PartitionLog,
    Topic,
    TopicManager,
    TopicMeta,
    lock_data_dir,
    log_id_of,
    tier_config_of,
)

log = logging.getLogger("tiered_log.service.mount")

MOUNT_DIR = "mount"
"""The mount's derived data under the data directory (see the module docstring)."""


def topic_manager_for(settings: Settings) -> TopicManager:
    """The topic manager a service with ``settings`` serves: a :class:`MountedTopics`
    when ``read_only_remote`` is set, else a :class:`TopicManager`."""
    return MountedTopics(settings) if settings.read_only_remote else TopicManager(settings)


def open_mounted_log(
    directory: Path, meta: TopicMeta, partition: int, mount: MountedTopics
) -> TieredLog:
    """The log of one partition of a mounted topic (see the module docstring): a
    follower with no shipper on the read-only store, its view built from the bucket."""
    settings = mount.settings
    tier = dataclasses.replace(tier_config_of(meta.config, settings), remote_enabled=True)
    plog = TieredLog(
        directory,
        log_id=log_id_of(meta, partition),
        storage=mount.storage,
        config=LogConfig.of(meta.config),
        tier=tier,
        start_shipper=False,
        rebuild=False,
        limits=mount.limits,
        replicated=True,
        producer_id_expiration_ms=settings.producer_id_expiration_ms,
    )
    try:
        plog.resync_remote()  # the whole view at once: the snapshot, then the manifests
        plog.follow_bucket()
    except BaseException:
        with contextlib.suppress(Exception):
            plog.close()
        raise
    return plog


class MountedTopics(TopicManager):
    """The topics of a read-only mount; see the module docstring."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.mount_root = self.data_dir / MOUNT_DIR
        self._seen: dict[str, tuple[int, str | None, int | None]] = {}
        """Size, checksum and time of each topic's metadata object when last read."""
        self._failing: set[tuple[str, int]] = set()
        """Partitions whose last follow failed (logged once until they recover)."""
        self._poller: MountPoller | None = None
        self.on_advance: Callable[[str, int], None] | None = None
        """Called from the poller's thread with ``(topic, partition)`` when a partition's
        view moved (the broker wakes the reads parked at its end)."""

    # ---- refusals ------------------------------------------------------------------------

    def refusal(self, what: str) -> ReadOnlyError:
        """The error that refuses ``what`` (a write), naming the mounted bucket."""
        return ReadOnlyError(
            f"{what}: this service mounts {self.settings.remote_storage_url()} read-only "
            "(read_only_remote); write to the cluster that owns it"
        )

    def check_writable(self, what: str) -> None:
        raise self.refusal(what)

    def create(self, name: str, partitions: int, overrides: dict[str, Any] | None = None) -> Topic:
        raise self.refusal(f"cannot create topic {name!r}")

    def adopt(self, meta: TopicMeta, *, created_empty: bool = False) -> Topic:
        raise self.refusal(f"cannot create topic {meta.name!r}")

    def alter(
        self,
        name: str,
        changes: dict[str, Any],
        reset: Sequence[str] = (),
        *,
        remote_disable_policy: str | None = None,
    ) -> Topic:
        self.get(name)
        raise self.refusal(f"cannot alter topic {name!r}")

    def delete(self, name: str) -> None:
        self.get(name)
        raise self.refusal(f"cannot delete topic {name!r}")

    def open_from_store(self, meta: TopicMeta) -> Topic:
        raise self.refusal(f"cannot restore topic {meta.name!r}")

    def ensure_topic(self, meta: TopicMeta, *, created_empty: bool = False) -> None:
        raise self.refusal(f"cannot create topic {meta.name!r}")

    def drop_topic(self, name: str) -> None:
        raise self.refusal(f"cannot delete topic {name!r}")

    # ---- lifecycle -----------------------------------------------------------------------

    def load(self) -> None:
        """Lock the data directory, open the bucket read-only, open every topic it holds
        (a bucket that cannot be read now is logged: the poller tries again) and start
        the poller."""
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InvalidArgumentError(
                f"cannot create the data directory {self.data_dir}: {exc.strerror or exc}"
            ) from None
        self._lock_fd = lock_data_dir(self.data_dir)
        try:
            self.storage = open_read_only_store(
                self.settings.remote_storage_url(), **self.settings.s3_options()
            )
            shutil.rmtree(self.mount_root, ignore_errors=True)  # derived: rebuilt below
            self.mount_root.mkdir()
        except BaseException:
            self._release_lock()
            raise
        if any(self.root.glob(f"*/{naming.TOPIC_FILE}")):
            log.warning(
                "%s holds topics of its own: a read-only mount does not serve them",
                self.root,
            )
        try:
            self.sync()
        except TieredLogError as exc:
            log.warning("the mounted bucket cannot be read yet (polling goes on): %s", exc)
        log.info(
            "mounted %s read-only: %d topic(s), polled every %d ms",
            self.storage.url,
            len(self._topics),
            self.settings.remote_poll_interval_ms,
        )
        self._poller = MountPoller(self, self.settings.remote_poll_interval_ms / 1000).start()

    def close(self) -> None:
        """Stop the poller, then close every log and release the lock (idempotent)."""
        if self._poller is not None:
            self._poller.stop()
        super().close()

    def maintain(self) -> None:
        """Nothing to do: a mount flushes, rolls and retains nothing (its poller
        follows the bucket)."""

    # ---- following the bucket ------------------------------------------------------------

    def sync(self) -> None:
        """One poll: the topics, then every partition's view (see the module docstring).
        RemoteStorageError when the topics cannot be listed; a partition or topic that
        fails is logged and tried again at the next poll."""
        storage = self.storage
        assert storage is not None
        listed = {
            info.key: info
            for info in storage.list(naming.TOPIC_OBJECTS_PREFIX)
            if info.key.endswith(".json")
        }
        names = {
            key[len(naming.TOPIC_OBJECTS_PREFIX) : -len(".json")]: info
            for key, info in listed.items()
        }
        for name in sorted(set(self._topics) - set(names)):
            self._drop(name, "its metadata left the bucket (deleted by its owner)")
        for name in set(self._unavailable) - set(names):
            self._unavailable.pop(name, None)
        for name, info in sorted(names.items()):
            if not TOPIC_NAME_RE.fullmatch(name) or self._closed:
                continue
            if self._seen.get(name) == _stamp(info) and name in self._topics:
                self._follow(self._topics[name])
                continue
            try:
                self._open_or_update(name, info)
            except (
                TieredLogError,
                OSError,
                ValueError,
                KeyError,
                TypeError,
                ValidationError,
            ) as exc:
                message = exc.message if isinstance(exc, TieredLogError) else str(exc)
                if self._unavailable.get(name) != message:
                    log.error("mounted topic %s cannot be opened: %s", name, message)
                self._unavailable[name] = message

    def _open_or_update(self, name: str, info: ObjectInfo) -> None:
        """Read topic ``name``'s metadata object and open, replace or update it."""
        assert self.storage is not None
        meta = TopicMeta.from_json(self.storage.get(info.key))
        if meta.name != name:
            raise ValueError(f"{info.key} names topic {meta.name!r}")
        have = self._topics.get(name)
        if have is not None and have.meta.topic_id != meta.topic_id:
            self._drop(name, "created again by its owner")
            have = None
        if have is None:
            directory = self.mount_root / f"{name}-{meta.topic_id[:12]}"
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir(parents=True)
            logs: list[PartitionLog] = []
            try:
                for p in range(meta.partitions):
                    logs.append(open_mounted_log(directory / str(p), meta, p, self))
            except BaseException:
                for plog in logs:
                    with contextlib.suppress(Exception):
                        plog.close()
                shutil.rmtree(directory, ignore_errors=True)
                raise
            topic = Topic(meta, tuple(logs), directory)
            with self._lock:
                if self._closed:
                    for plog in logs:
                        plog.close()
                    return
                self._topics = {**self._topics, name: topic}
                self._unavailable.pop(name, None)
            log.info("mounted topic %s (%d partition(s))", name, meta.partitions)
        else:
            if have.meta != meta:  # altered by its owner: describe its new settings
                with self._lock:
                    self._topics = {**self._topics, name: Topic(meta, have.logs, have.directory)}
            self._follow(have)
        self._seen[name] = _stamp(info)

    def _follow(self, topic: Topic) -> None:
        """Move every partition's view of ``topic`` up to the bucket (a failure is
        logged once per partition until it recovers)."""
        for p, plog in enumerate(topic.logs):
            if plog.closed:
                continue
            try:
                moved = plog.follow_bucket()
            except TieredLogError as exc:
                if (topic.name, p) not in self._failing:
                    log.warning("mounted %s/%d cannot follow the bucket: %s", topic.name, p, exc)
                self._failing.add((topic.name, p))
                continue
            self._failing.discard((topic.name, p))
            if moved and self.on_advance is not None:
                self.on_advance(topic.name, p)

    def _drop(self, name: str, why: str) -> None:
        """Stop serving topic ``name`` and remove its local view."""
        with self._lock:
            topic = self._topics.get(name)
            if topic is None:
                return
            self._topics = {k: v for k, v in self._topics.items() if k != name}
            self._seen.pop(name, None)
        for plog in topic.logs:
            with contextlib.suppress(Exception):
                plog.close()
        shutil.rmtree(topic.directory, ignore_errors=True)
        log.info("mounted topic %s is no longer served: %s", name, why)


def _stamp(info: ObjectInfo) -> tuple[int, str | None, int | None]:
    """What tells a topic's metadata object changed: its size, checksum and time."""
    return info.size, info.checksum, info.modified_ms


class MountPoller:
    """The mount's background loop: :meth:`MountedTopics.sync` every ``interval_s``
    seconds on a thread of its own (a failing bucket is logged once per outage)."""

    def __init__(self, mount: MountedTopics, interval_s: float) -> None:
        self.mount = mount
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mount-poller", daemon=True)
        self.polls = 0
        """Polls done (for tests and logs)."""

    def start(self) -> MountPoller:
        self._thread.start()
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Stop after the poll under way (blocking: not on the event loop)."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _run(self) -> None:
        failing = False
        while not self._stop.wait(self.interval_s):
            try:
                self.mount.sync()
            except TieredLogError as exc:
                if not failing:
                    log.warning("the mounted bucket cannot be polled: %s", exc)
                failing = True
            except Exception:
                log.exception("polling the mounted bucket failed")
            else:
                if failing:
                    log.info("the mounted bucket can be polled again")
                failing = False
            self.polls += 1


__all__ = ["MOUNT_DIR", "MountPoller", "MountedTopics", "open_mounted_log", "topic_manager_for"]
