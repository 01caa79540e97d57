"""Topics: named sets of partition logs, their on-disk state and their lifecycle (Kafka's
``LogManager``). The broker serves them; a cluster node drives them
(:meth:`TopicManager.ensure_topic` and its neighbours: the topics etcd lists).

Layout under the data directory::

    <data_dir>/.lock                          held (flock) by the one server using the dir
    <data_dir>/topics/<topic>/topic.json      the topic's metadata: the commit point
    <data_dir>/topics/<topic>/<partition>/    one log directory per partition (0, 1, ...)
    <data_dir>/trash/                         deleted topics on their way out

``topic.json`` is written atomically (tmp file, fsync, rename, fsync of the directory)
after every partition log exists, so a topic either exists whole or not at all: a topic
directory without ``topic.json`` is a creation that crashed half way (it never
acknowledged a record) and is removed on the next start. Deleting a topic renames its
directory into ``trash/`` (atomic) before removing the files, so a crash mid-delete never
leaves a half topic behind.

Every partition log is created by :func:`open_partition_log`, the one place that decides
what a partition log is: a :class:`~tiered_log.partition.log.TieredLog` whose remote tier is the
server's one shared store (``Settings.remote_storage_url()``). A partition's log id in
the store is ``<topic>-<topic id, 12 hex>-<partition>``, so a topic deleted and created
again never sees the old topic's objects.

The store also holds every topic's metadata (``topics/<topic>.json``, written when the
topic is created, deleted first when it is deleted). A server started on an empty data
directory restores the topics it finds there and their logs rebuild from the bucket:
a lost broker disk comes back from the bucket alone.

Thread-safety: :class:`TopicManager` is safe to use from several threads. Creating and
deleting topics serialize on one lock; lookups take no lock (they read an immutable
snapshot of the topic table). Every method may block on disk: call them from worker
threads (``asyncio.to_thread``), never on an event loop.
"""

from __future__ import annotations

import contextlib
import difflib
import fcntl
import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..bounds import PartitionBounds
from ..config import Settings, TopicConfig
from ..errors import (
    DataDirLockedError,
    InvalidArgumentError,
    LogClosedError,
    TieredLogError,
    TopicExistsError,
    TopicNotFoundError,
    TopicUnavailableError,
)
from ..format import naming
from ..local.log import LogConfig
from ..local.segment import fsync_dir, write_atomic
from ..partition import TieredLog
from ..remote.crypto import key_ring
from ..remote.reconcile import delete_deleted_log
from ..remote.storage import RemoteStorage, open_storage
from ..remote.tier import TierConfig, TierLimits
from ..remote.worker import in_worker
from .topic_meta import (
    MAX_PARTITIONS,
    TOPIC_NAME_PATTERN,
    TOPIC_NAME_RE,
    TopicMeta,
    check_growth,
    validate_partitions,
    validate_topic_name,
)

log = logging.getLogger("tiered_log.service.topics")

TOPIC_FILE = naming.TOPIC_FILE


PartitionLog = TieredLog
"""What the service holds per partition (every partition is a tiered log)."""


def tier_config_of(config: TopicConfig, settings: Settings) -> TierConfig:
    """The remote-tier settings of a partition of a topic with ``config``: the topic's,
    with this node's tier settings (its rate limits are the node's: :func:`node_limits`)."""
    return TierConfig.of(
        config,
        chunk_bytes=settings.remote_chunk_bytes,
        cache_bytes=max(1, settings.remote_cache_bytes),
        copies_in_flight=settings.remote_copies_in_flight,
        worker_processes=settings.remote_worker_processes,
        worker_nice=settings.remote_worker_nice,
        catchup_retention_bytes=settings.replica_catchup_retention_bytes,
        ship_interval_ms=settings.ship_interval_ms,
        fetch_max_wait_ms=settings.remote_fetch_max_wait_ms,
        key_ring=(
            None
            if settings.remote_encryption_key_file is None
            else key_ring(settings.remote_encryption_key_file)
        ),
    )


def node_limits(settings: Settings) -> TierLimits:
    """The upload and fetch rate limits every partition of a node shares (as Kafka's
    broker-wide remote copy and fetch quotas)."""
    return TierLimits.of(settings.remote_upload_bytes_per_sec, settings.remote_fetch_bytes_per_sec)


def open_partition_log(
    directory: Path,
    config: TopicConfig,
    settings: Settings,
    *,
    log_id: str,
    storage: RemoteStorage | None,
    rebuild: bool = True,
    limits: TierLimits | None = None,
) -> TieredLog:
    """Open (creating if needed) the log of one partition: the ONE place that does it.

    ``log_id`` names the log in the remote tier (see the module docstring); ``storage``
    is the server's shared store (``None``: no remote tier). ``config`` carries the
    topic's segment, flush and both retention settings and ``remote_enabled``.
    ``rebuild=False`` for a partition created just now (nothing to rebuild from).
    ``limits``: the node's (:func:`node_limits`; default: limits of this log's own).
    """
    # A cluster's replica ships only while it leads (the node starts its shipper then,
    # after rebuilding its remote state from the bucket): none at open, no rebuild.
    return TieredLog(
        directory,
        log_id=log_id,
        storage=storage,
        config=LogConfig.of(config),
        tier=tier_config_of(config, settings),
        rebuild=rebuild and not settings.clustered,
        start_shipper=not settings.clustered,
        limits=limits or node_limits(settings),
        replicated=settings.clustered,
        producer_id_expiration_ms=settings.producer_id_expiration_ms,
    )


def maintain_partition_log(plog: PartitionLog) -> None:
    """Time-based upkeep of one log, run periodically: flush by ``flush_ms``, roll by
    ``segment_ms``; retention of a log without a shipper (remote tier off). A log with a
    remote tier applies both retentions in its shipper."""
    plog.maintain()


def partition_stats(plog: PartitionLog) -> dict[str, float]:
    """Counters and gauges of one log for /metrics (see :meth:`TieredLog.stats`)."""
    return plog.stats()


def partition_bounds(plog: PartitionLog) -> PartitionBounds:
    """Bounds of a partition log, as the API reports them (PartitionNotReadyError while
    a new leader has not read the bucket yet: its log start is not known)."""
    plog.check_remote_view()
    return plog.bounds()


FIXED_SETTINGS = {
    "partitions": "the number of partitions is not a setting: grow it with "
    '{"partitions": N} beside "config" (topics alter --partitions N); it cannot shrink',
    "replication_factor": "the replication factor cannot be changed after a topic is created",
    "min_insync_replicas": "min_insync_replicas cannot be changed after a topic is created",
    "name": "a topic cannot be renamed",
    "topic_id": "a topic's id cannot be changed",
    "created_ms": "a topic's creation time cannot be changed",
}
"""Keys of a topic's description that are not settings one may change, and why."""
REMOTE_DISABLE_POLICIES = ("retain", "delete")
"""What turning a topic's tiering off (``remote_enabled`` true -> false) does with the
data its bucket holds, as Kafka's KIP-950 asks for an explicit choice: ``retain`` (it
stays readable until the total retention removes it) or ``delete`` (deleted at once)."""


def altered_config(
    current: TopicConfig,
    defaults: TopicConfig,
    changes: dict[str, Any],
    reset: Sequence[str] = (),
) -> TopicConfig:
    """``current`` with ``changes`` applied and the settings named in ``reset`` set back
    to ``defaults`` (the server's topic defaults), validated as a created topic's are
    (``null`` or ``-1`` for a limit: no limit). InvalidArgumentError (one line naming
    the key) for an unknown key, a key that cannot change (:data:`FIXED_SETTINGS`), a key
    both set and reset, or an invalid value. Every TopicConfig setting may change."""
    valid = sorted(TopicConfig.model_fields)
    for key in [*changes, *reset]:
        if key in FIXED_SETTINGS:
            raise InvalidArgumentError(f"cannot change {key}: {FIXED_SETTINGS[key]}")
        if key not in TopicConfig.model_fields:
            near = difflib.get_close_matches(str(key), valid, n=1)
            hint = f" (did you mean {near[0]}?)" if near else ""
            raise InvalidArgumentError(
                f"unknown topic setting {key!r}{hint}; valid: {', '.join(valid)}"
            )
    both = sorted(set(changes) & set(reset))
    if both:
        raise InvalidArgumentError(f"{both[0]} is both set and reset in one request")
    values = current.model_dump()
    values.update({k: getattr(defaults, k) for k in reset})
    values.update(changes)
    try:
        config = TopicConfig.model_validate(values)
        LogConfig.of(config)
    except ValidationError as exc:
        err = exc.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(p) for p in err.get("loc", ())) or "config"
        raise InvalidArgumentError(f"invalid topic config {where}: {err['msg']}") from None
    return config


def check_remote_disable(old: TopicConfig, new: TopicConfig, policy: str | None) -> None:
    """InvalidArgumentError unless ``policy`` is None or one of
    :data:`REMOTE_DISABLE_POLICIES`, and given when ``new`` turns tiering off."""
    if policy is not None and policy not in REMOTE_DISABLE_POLICIES:
        raise InvalidArgumentError(
            f"remote_disable_policy must be 'retain' or 'delete', got {policy!r}"
        )
    if old.remote_enabled and not new.remote_enabled and policy is None:
        raise InvalidArgumentError(
            "remote_enabled=false needs remote_disable_policy: 'retain' (the remote data "
            "stays readable until retention removes it) or 'delete' (it is deleted now)"
        )


@dataclass(frozen=True, slots=True)
class Topic:
    """An open topic: its metadata and one open log per partition."""

    meta: TopicMeta
    logs: tuple[PartitionLog, ...]
    directory: Path

    @property
    def name(self) -> str:
        return self.meta.name

    def partition(self, index: int) -> PartitionLog:
        if not 0 <= index < len(self.logs):
            raise TopicNotFoundError(
                f"topic {self.name!r} has no partition {index} (it has {len(self.logs)})"
            )
        return self.logs[index]


def log_id_of(meta: TopicMeta, partition: int) -> str:
    """Name of a partition's log in the remote tier: ``<topic>-<id12>-<partition>``."""
    return f"{meta.name}-{meta.topic_id[:12]}-{partition}"


topic_object_key = naming.topic_object_key


def lock_data_dir(data_dir: Path) -> int:
    """Take the data directory's exclusive lock (a ``flock`` on its lock file, held
    while the returned descriptor is open): one process serves a data directory.
    DataDirLockedError when another process holds it."""
    fd = os.open(data_dir / naming.DATA_DIR_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise DataDirLockedError(
            f"the data directory {data_dir} is in use by another process"
        ) from None
    return fd


class TopicManager:
    """Creates, opens, lists and deletes topics under ``settings.data_dir``.

    Call :meth:`load` once (it takes the data-dir lock and opens every topic), and
    :meth:`close` at shutdown (flushes and closes every log, releases the lock). See the
    module docstring for the layout and thread-safety.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.limits = node_limits(settings)
        """Rate limits all of this node's partitions share."""
        self.data_dir = Path(settings.data_dir)
        self.root = self.data_dir / naming.TOPICS_DIR
        self.trash = self.data_dir / naming.TRASH_DIR
        self._lock = threading.RLock()
        self._topics: dict[str, Topic] = {}
        self._unavailable: dict[str, str] = {}
        """Topics on disk that could not be opened at start, and why (see load)."""
        self._lock_fd: int | None = None
        self._closed = False
        self.storage: RemoteStorage | None = None
        self._deleters: set[threading.Thread] = set()

    # ---- lifecycle -----------------------------------------------------------------------

    def load(self) -> None:
        """Lock the data directory and open every committed topic; remove leftovers."""
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            self.root.mkdir(exist_ok=True)
            self.trash.mkdir(exist_ok=True)
        except OSError as exc:
            raise InvalidArgumentError(
                f"cannot create the data directory {self.data_dir}: {exc.strerror or exc}"
            ) from None
        self._lock_fd = lock_data_dir(self.data_dir)
        try:
            self.storage = open_storage(
                self.settings.remote_storage_url(), **self.settings.s3_options()
            )
        except BaseException:
            self._release_lock()
            raise
        for p in self.trash.iterdir():
            shutil.rmtree(p, ignore_errors=True)
        topics: dict[str, Topic] = {}
        for d in sorted(self.root.iterdir()):
            if not d.is_dir():
                continue
            meta_path = d / TOPIC_FILE
            if not meta_path.exists():
                log.warning("removing %s: a topic creation that never completed", d.name)
                self._discard_dir(d)
                continue
            try:
                meta = TopicMeta.from_json(meta_path.read_bytes())
            except (OSError, ValueError, KeyError, TypeError, ValidationError) as exc:
                log.error(
                    "skipping topic directory %s: unreadable %s (%s)",
                    d.name,
                    TOPIC_FILE,
                    type(exc).__name__,
                )
                continue
            if meta.name != d.name:
                log.error("skipping topic directory %s: %s names %r", d.name, TOPIC_FILE, meta.name)
                continue
            try:
                topics[meta.name] = self._open_topic(meta, d)
            except TieredLogError as exc:  # contained: the rest of the service serves
                log.error(
                    "topic %s is unavailable: a partition could not be opened: %s", meta.name, exc
                )
                self._unavailable[meta.name] = exc.message
        self._topics = topics
        self._sync_with_store()
        # From now on (serving) its calls run in the tier's worker processes, as every
        # partition's; the start's few ran here, not waiting for a worker to start.
        self.storage = in_worker(
            tier_config_of(self.settings.topic_defaults, self.settings), self.storage
        )
        log.info("loaded %d topic(s) from %s", len(self._topics), self.root)

    def _sync_with_store(self) -> None:
        """Restore topics the store has and the disk lacks (a lost disk); publish the
        metadata of topics the store lacks. A store that cannot be reached is logged and
        skipped: the server runs on local data and ships once the store is back. A
        cluster's topics are etcd's: nothing to sync."""
        if self.storage is None or self.settings.clustered:
            return
        try:
            stored = {info.key for info in self.storage.list(naming.TOPIC_OBJECTS_PREFIX)}
        except TieredLogError as exc:
            log.warning("remote store unreachable at start, topics not synced: %s", exc)
            return
        for key in sorted(stored):
            name = key[len(naming.TOPIC_OBJECTS_PREFIX) :].removesuffix(".json")
            if (
                name in self._topics
                or name in self._unavailable
                or (not TOPIC_NAME_RE.fullmatch(name))
            ):
                continue
            try:
                meta = TopicMeta.from_json(self.storage.get(key))
                if meta.name != name:
                    raise ValueError(f"it names {meta.name!r}")
                self._topics = {**self._topics, name: self._commit_topic(meta, rebuild=True)}
                log.info(
                    "restored topic %s (%d partition(s)) from the remote store",
                    name,
                    meta.partitions,
                )
            except (
                TieredLogError,
                OSError,
                ValueError,
                KeyError,
                TypeError,
                ValidationError,
            ) as exc:
                log.error("cannot restore topic %s from the remote store: %s", name, exc)
        for name, topic in self._topics.items():
            if topic_object_key(name) not in stored:
                self._publish(topic.meta)

    def _publish(self, meta: TopicMeta) -> None:
        """Put a topic's metadata into the store (best effort: logged on failure, and
        published again at the next start)."""
        if self.storage is None:
            return
        try:
            self.storage.put(topic_object_key(meta.name), meta.to_json())
        except TieredLogError as exc:
            log.warning("topic %s: metadata not written to the remote store: %s", meta.name, exc)

    def _open_topic(self, meta: TopicMeta, directory: Path, *, rebuild: bool = True) -> Topic:
        logs: list[PartitionLog] = []
        try:
            for p in range(meta.partitions):
                logs.append(
                    open_partition_log(
                        directory / str(p),
                        meta.config,
                        self.settings,
                        log_id=log_id_of(meta, p),
                        storage=self.storage,
                        rebuild=rebuild,
                        limits=self.limits,
                    )
                )
        except BaseException:
            for plog in logs:
                with contextlib.suppress(Exception):
                    plog.close()
            raise
        return Topic(meta, tuple(logs), directory)

    def close(self) -> None:
        """Flush and close every log; release the data-dir lock. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for topic in self._topics.values():
                for plog in topic.logs:
                    try:
                        plog.close()
                    except Exception:
                        log.exception("closing a log of topic %s failed", topic.name)
            for t in list(self._deleters):
                t.join(timeout=self.settings.shutdown_timeout_s)
            if self.storage is not None:
                self.storage.close()
            self._release_lock()

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    @property
    def closed(self) -> bool:
        return self._closed

    # ---- lookups (no lock) ---------------------------------------------------------------

    def list(self) -> list[Topic]:
        """Every topic, by name."""
        return sorted(self._topics.values(), key=lambda t: t.name)

    def get(self, name: str) -> Topic:
        """The topic named ``name``; TopicNotFoundError if there is none."""
        validate_topic_name(name)
        topic = self._topics.get(name)
        if topic is None:
            if name in self._unavailable:
                raise TopicUnavailableError(
                    f"topic {name!r} could not be opened at start: {self._unavailable[name]}"
                )
            raise TopicNotFoundError(f"topic {name!r} does not exist")
        return topic

    def exists(self, name: str) -> bool:
        return name in self._topics or name in self._unavailable

    def check_writable(self, what: str) -> None:
        """Nothing: these topics take writes. A read-only mount's manager
        (:class:`~tiered_log.broker.mount.MountedTopics`) raises ReadOnlyError naming
        ``what`` (e.g. ``"cannot produce to t/0"``); the front ends ask before a write."""

    def partition(self, name: str, index: int) -> PartitionLog:
        """The log of partition ``index`` of topic ``name`` (TopicNotFoundError if none)."""
        return self.get(name).partition(index)

    @property
    def total_partitions(self) -> int:
        return sum(t.meta.partitions for t in self._topics.values())

    # ---- create / delete -------------------------------------------------------------------

    def create(self, name: str, partitions: int, overrides: dict[str, Any] | None = None) -> Topic:
        """Create a topic; TopicExistsError if it exists, InvalidArgumentError if bad input.

        ``overrides`` are TopicConfig fields replacing the server's ``topic_defaults``.
        """
        validate_topic_name(name)
        validate_partitions(partitions)
        try:
            config = self.settings.topic_defaults.with_overrides(overrides or {})
            LogConfig.of(config)
        except ValidationError as exc:
            err = exc.errors(include_url=False, include_input=False)[0]
            where = ".".join(str(p) for p in err.get("loc", ())) or "config"
            raise InvalidArgumentError(f"invalid topic config {where}: {err['msg']}") from None
        with self._lock:
            if self._closed:
                raise LogClosedError("the service is shutting down")
            if name in self._topics or name in self._unavailable:
                raise TopicExistsError(f"topic {name!r} exists already")
            limit = self.settings.max_total_partitions
            if self.total_partitions + partitions > limit:
                raise InvalidArgumentError(
                    f"creating {partitions} partition(s) would pass this server's limit of "
                    f"{limit} partitions"
                )
            meta = TopicMeta(
                name,
                partitions,
                config=config,
                topic_id=uuid.uuid4().hex,
                created_ms=time.time_ns() // 1_000_000,
            )
            return self.adopt(meta)

    def adopt(self, meta: TopicMeta, *, created_empty: bool = False) -> Topic:
        """Create the local logs of a topic whose metadata is decided (by :meth:`create`,
        or by the cluster, whose nodes must agree on the topic id: it names the logs in
        the bucket). ``created_empty``: a cluster's node that runs created them, marked
        so (:meth:`TieredLog.mark_created_empty
        <tiered_log.partition.log.TieredLog.mark_created_empty>`). TopicExistsError if
        the name is held."""
        with self._lock:
            if meta.name in self._topics or meta.name in self._unavailable:
                raise TopicExistsError(f"topic {meta.name!r} exists already")
            topic = self._commit_topic(meta, rebuild=False)
            if created_empty:
                for plog in topic.logs:
                    plog.mark_created_empty()
            self._publish(meta)
            self._topics = {**self._topics, meta.name: topic}
            log.info("created topic %s with %d partition(s)", meta.name, meta.partitions)
            return topic

    def open_from_store(self, meta: TopicMeta) -> Topic:
        """Open a topic whose metadata and logs were just made in the store (a
        point-in-time restore, :mod:`tiered_log.broker.point_in_time`): its logs rebuild
        from the bucket as on an empty disk and continue after their restored end.
        TopicExistsError if the name is held."""
        with self._lock:
            if self._closed:
                raise LogClosedError("the service is shutting down")
            if meta.name in self._topics or meta.name in self._unavailable:
                raise TopicExistsError(f"topic {meta.name!r} exists already")
            topic = self._commit_topic(meta, rebuild=True)
            self._topics = {**self._topics, meta.name: topic}
            log.info("opened topic %s (%d partition(s)) from the store", meta.name, meta.partitions)
            return topic

    def _commit_topic(self, meta: TopicMeta, *, rebuild: bool) -> Topic:
        """Create the topic's directory and partition logs, then commit ``topic.json``."""
        directory = self.root / meta.name
        if directory.exists():
            self._discard_dir(directory)  # an earlier creation that crashed half way
        try:
            directory.mkdir()
            topic = self._open_topic(meta, directory, rebuild=rebuild)
        except BaseException:
            self._discard_dir(directory)
            raise
        try:
            write_atomic(directory / TOPIC_FILE, meta.to_json())
            fsync_dir(self.root)
        except BaseException:
            for plog in topic.logs:
                with contextlib.suppress(Exception):
                    plog.close()
            self._discard_dir(directory)
            raise
        return topic

    def add_partitions(self, name: str, count: int, *, created_empty: bool = False) -> Topic:
        """Grow topic ``name`` to ``count`` partitions (Kafka's CreatePartitions): the new
        partitions' logs are created empty, then the new ``topic.json`` committed and
        published to the store; the partitions there keep their records (a key's
        partition may change for producers that hash keys, as in Kafka). ``created_empty``:
        as :meth:`adopt`'s, for the new logs (a cluster's node that runs). Returns the
        topic as it is now. TopicNotFoundError; InvalidArgumentError when ``count`` is not
        above the current count or passes the limits."""
        validate_topic_name(name)
        with self._lock:
            if self._closed:
                raise LogClosedError("the service is shutting down")
            topic = self.get(name)
            have = len(topic.logs)
            check_growth(name, have, count)
            limit = self.settings.max_total_partitions
            if self.total_partitions + count - have > limit:
                raise InvalidArgumentError(
                    f"adding {count - have} partition(s) would pass this server's limit of "
                    f"{limit} partitions"
                )
            meta = replace(topic.meta, partitions=count)
            new: list[PartitionLog] = []
            try:
                for p in range(have, count):
                    path = topic.directory / str(p)
                    if path.exists():
                        self._discard_dir(path)  # an earlier growth that crashed half way
                    new.append(
                        open_partition_log(
                            path,
                            meta.config,
                            self.settings,
                            log_id=log_id_of(meta, p),
                            storage=self.storage,
                            rebuild=False,
                            limits=self.limits,
                        )
                    )
                if created_empty:
                    for plog in new:
                        plog.mark_created_empty()
                write_atomic(topic.directory / TOPIC_FILE, meta.to_json())
            except BaseException:
                for plog in new:
                    with contextlib.suppress(Exception):
                        plog.close()
                raise
            self._publish(meta)
            grown = Topic(meta, (*topic.logs, *new), topic.directory)
            self._topics = {**self._topics, name: grown}
            log.info("topic %s: %d partitions now (was %d)", name, count, have)
            return grown

    # ---- configuration -----------------------------------------------------------------

    def alter(
        self,
        name: str,
        changes: dict[str, Any],
        reset: Sequence[str] = (),
        *,
        remote_disable_policy: str | None = None,
    ) -> Topic:
        """Change topic ``name``'s settings: ``changes`` set, ``reset`` back to the
        server's topic defaults (see :func:`altered_config`; turning ``remote_enabled``
        off needs ``remote_disable_policy``, :func:`check_remote_disable`). The new
        ``topic.json`` is committed (atomically) and published to the store before it
        is applied to every open partition log (:meth:`TieredLog.reconfigure
        <tiered_log.partition.log.TieredLog.reconfigure>`), so a restart keeps it. Returns
        the topic as it is now. TopicNotFoundError, InvalidArgumentError."""
        validate_topic_name(name)
        with self._lock:
            if self._closed:
                raise LogClosedError("the service is shutting down")
            topic = self.get(name)
            config = altered_config(topic.meta.config, self.settings.topic_defaults, changes, reset)
            check_remote_disable(topic.meta.config, config, remote_disable_policy)
            return self._apply_config(topic, config, remote_disable_policy)

    def _apply_config(self, topic: Topic, config: TopicConfig, policy: str | None) -> Topic:
        """Commit ``config`` as ``topic``'s and apply it to its open logs. Lock held."""
        meta = replace(topic.meta, config=config)
        write_atomic(topic.directory / TOPIC_FILE, meta.to_json())
        self._publish(meta)
        new = Topic(meta, topic.logs, topic.directory)
        self._topics = {**self._topics, meta.name: new}
        local, tier = LogConfig.of(config), tier_config_of(config, self.settings)
        for plog in topic.logs:
            if not plog.closed:
                plog.reconfigure(local, tier, remote_disable_policy=policy)
        log.info("topic %s: configuration changed", meta.name)
        return new

    # ---- the cluster's view (a ClusterNode drives these from its poll thread) ------------

    def ensure_topic(self, meta: TopicMeta, *, created_empty: bool = False) -> None:
        """Create the cluster topic's local logs if missing, with its topic id (so a
        partition's log has one id on every node); a local topic of that name with
        another id was deleted in the cluster and created again: it is replaced.
        ``created_empty``: the topic was created after the node started (not at its
        first round, where a missing log may be a lost disk's, nor restored from the
        bucket): logs created now are marked so (see :mod:`tiered_log.partition.empty_lead`)."""
        have = next((t for t in self.list() if t.name == meta.name), None)
        if have is not None:
            if have.meta.topic_id == meta.topic_id:
                if meta.partitions > len(have.logs):  # partitions added in the cluster
                    with contextlib.suppress(InvalidArgumentError):  # added meanwhile
                        have = self.add_partitions(
                            meta.name, meta.partitions, created_empty=created_empty
                        )
                config = meta.config
                if config != have.meta.config:  # altered in the cluster: apply it here
                    with self._lock:
                        have = self.get(meta.name)
                        if have.meta.topic_id == meta.topic_id and config != have.meta.config:
                            # Tiering turned off keeps or deletes the bucket's data as
                            # the change said (stored with the settings).
                            policy = "delete" if config.remote_delete_on_disable else "retain"
                            self._apply_config(have, config, policy)
                return
            log.info(
                "topic %s was created again in the cluster: replacing the local one", meta.name
            )
            self.delete(meta.name)
        local = replace(meta, created_ms=meta.created_ms or time.time_ns() // 1_000_000)
        with contextlib.suppress(TopicExistsError):  # created meanwhile on this node
            self.adopt(local, created_empty=created_empty)

    def drop_topic(self, name: str) -> None:
        """Delete the topic's local logs (it left the cluster's metadata)."""
        with contextlib.suppress(TopicNotFoundError):
            self.delete(name)

    def local_topics(self) -> set[str]:
        """Names of the topics held locally."""
        return {t.name for t in self.list()}

    def partition_log(self, topic: str, partition: int) -> TieredLog | None:
        """The open log of a partition, None if not held (or unavailable)."""
        try:
            t = self.get(topic)
        except TieredLogError:
            return None
        return t.logs[partition] if 0 <= partition < len(t.logs) else None

    def delete(self, name: str) -> None:
        """Delete a topic and every record in it; TopicNotFoundError if there is none.

        Requests racing the delete see either the topic or TopicNotFoundError (an append
        caught in between fails with LogClosedError and is not acknowledged).
        """
        validate_topic_name(name)
        with self._lock:
            topic = self.get(name)  # an unavailable topic is kept for the operator
            if self.storage is not None:
                try:  # first, so a restart on an empty disk never restores it
                    self.storage.delete([topic_object_key(name)])
                except TieredLogError as exc:
                    log.warning(
                        "topic %s: metadata not deleted from the remote store: %s", name, exc
                    )
            self._topics = {k: v for k, v in self._topics.items() if k != name}
            for plog in topic.logs:
                try:
                    plog.close()
                except Exception:
                    log.exception("closing a log of topic %s failed", name)
            self._discard_dir(topic.directory)
            log.info("deleted topic %s", name)
            t = threading.Thread(
                target=self._delete_remote, args=(topic,), name=f"delete-{name}", daemon=True
            )
            self._deleters.add(t)
            t.start()

    def _delete_remote(self, topic: Topic) -> None:
        """Delete a deleted topic's objects from the remote store (in the background):
        each log's deletion marker first, its other objects, then the marker
        (:func:`~tiered_log.remote.reconcile.delete_deleted_log`: what a failure leaves
        is known as a deleted topic's, for ``archive reconcile``). Also the objects a
        topic kept when tiering was turned off."""
        try:
            n, storage = 0, self.storage
            if storage is None:
                return
            for p in range(topic.meta.partitions):
                n += delete_deleted_log(
                    storage, log_id_of(topic.meta, p), topic.name, topic.meta.topic_id
                )
            log.info("deleted %d remote object(s) of topic %s", n, topic.name)
        except Exception as exc:  # the bucket failed: the objects stay, named by a dead id
            log.warning("topic %s: remote objects not all deleted: %s", topic.name, exc)
        finally:
            self._deleters.discard(threading.current_thread())

    def _discard_dir(self, directory: Path) -> None:
        """Move a topic directory into the trash (atomic), then remove it."""
        target = self.trash / f"{uuid.uuid4().hex}"
        try:
            os.rename(directory, target)
            fsync_dir(self.root)
        except FileNotFoundError:
            return
        shutil.rmtree(target, ignore_errors=True)

    # ---- upkeep --------------------------------------------------------------------------

    def maintain(self) -> None:
        """One round of :func:`maintain_partition_log` over every open log."""
        for topic in list(self._topics.values()):
            for plog in topic.logs:
                if plog.closed:
                    continue
                try:
                    maintain_partition_log(plog)
                except LogClosedError:
                    pass
                except Exception:
                    log.exception("maintenance of a log of topic %s failed", topic.name)


__all__ = [
    "FIXED_SETTINGS",
    "MAX_PARTITIONS",
    "REMOTE_DISABLE_POLICIES",
    "TOPIC_NAME_PATTERN",
    "TOPIC_NAME_RE",
    "DataDirLockedError",
    "PartitionBounds",
    "PartitionLog",
    "Topic",
    "TopicManager",
    "TopicMeta",
    "altered_config",
    "check_remote_disable",
    "log_id_of",
    "maintain_partition_log",
    "open_partition_log",
    "partition_bounds",
    "partition_stats",
    "validate_partitions",
    "validate_topic_name",
]
