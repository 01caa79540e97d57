"""Reconciling the bucket with what references it (``tiered-log archive reconcile``):
orphaned objects found (and, when asked, deleted) and dangling references reported.

An object is *referenced* when a log would serve it, decided as a rebuild from the
bucket decides (:meth:`~tiered_log.remote.recovery.RecoveryTask.rebuild_from_bucket`),
which is also the view the shipping service keeps (it ships in offset order, and a
new leader rebuilds its view by those rules):

- a log's ``meta.json``, ``snapshot.bin`` and the spill objects the snapshot names, and
  ``topics/<name>.json``;
- every *complete* copy (both ``.log`` and ``.rli``) whose manifest decodes, that ends
  above the log start ``meta.json`` records and that is taken in offset order: the first
  copy at each place, or the one of a later leader epoch at the same base offset.

What is left are *orphans*, each with why:

==================  ==============================================================
``torn_copy``       a data object without its manifest (a copy that crashed or was
                    abandoned before its manifest went up)
``below_start``     a complete copy ending at or below the log start (retention's)
``duplicate``       a complete copy of the offsets of a copy taken (same offsets and
                    size, or an older leader epoch: a deposed leader's late copy)
``deleted_topic``   every object of a log whose topic was deleted: its deletion
                    marker (``<log>/deleted.json``) is there and the bucket's
                    ``topics/`` does not name the log
``unnamed_spill``   a spill object of the partition snapshot that the snapshot does
                    not name (:mod:`~tiered_log.remote.snapshot`: merged or dropped
                    by a writer whose delete failed, a predecessor's, a write that
                    did not finish); named ones are referenced
==================  ==============================================================

**What counts as a deleted topic.** The bucket alone cannot tell a deleted topic's log
from a live one whose ``topics/<name>.json`` has not arrived (its publication failed, a
cluster node has not applied the topic yet, a restore has not committed): so a log is
taken for a deleted topic's only on evidence written by the delete itself, the
*deletion marker* a service puts in the log's prefix before it deletes the log's other
objects and deletes last (:func:`delete_deleted_log`). A log of a service-named topic
(``<topic>-<id12>-<p>``) that ``topics/`` does not name and that has no marker is
``unreferenced_log``: reported, never deleted (its copies are classified as a live
log's, so a torn copy in it still goes).

and findings that are reported and never deleted: ``dangling_manifest`` (a manifest
whose data object is missing), ``dangling_snapshot`` (a copy the partition snapshot
lists above the log start whose objects are gone), ``damaged`` (a complete copy whose
manifest does not decode: the scrubber's and recovery's to handle), ``overlap`` (a copy
overlapping the copy taken otherwise than as a duplicate: recovery keeps both),
``listed_duplicate`` (a duplicate the partition snapshot still lists: a rebuild from the
snapshot would serve it, so it stays until the leader writes the snapshot again),
``unreferenced_log`` (see above), ``listed_deleted`` (a log with a deletion marker that
``topics/`` still names or the running service serves) and ``unknown`` (keys
tiered_log does not name).

**The grace period.** An orphan is deleted only when every object of its group (one
copy attempt; for ``deleted_topic``, the whole log) was last written more than
``min_age_s`` ago, by the object's listed time (:attr:`ObjectInfo.modified_ms`: the
file's mtime on a directory store, S3's ``LastModified``) against this machine's clock;
an object whose time is unknown is never deleted. A copy under way puts its data object
and its manifest at the same time and finishes within its upload's time, so with a
grace longer than any upload (default an hour: S3 stamps a multipart object with the
time its upload began) a copy in flight is never taken for a torn one. Right before the
deletes, each torn copy is looked at again (its manifest may have arrived) and the
bucket's topic list read again; a group that changed is kept. A deleted topic's group
is old once its marker is: the grace counts from the delete.

Only the ``.log`` of a torn copy and whole complete copies are deleted; a manifest is
never deleted on its own. Safe while services ship to the bucket: services delete their
own failed attempts too, and a delete of a missing key is not an error.

Blocking I/O on the given store; one call at a time per report (any thread).
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import (
    CorruptRecordError,
    RemoteCorruptionError,
    RemoteObjectNotFoundError,
    TieredLogError,
)
from ..format import naming
from .manifest import COMMITTED, decode_manifest
from .metadata import RemoteMeta, RemoteSegment
from .scrub import LogObjects, list_logs, topic_of
from .snapshot import is_spill_key, read_snapshot
from .storage import ObjectInfo, RemoteStorage

log = logging.getLogger(__name__)

DEFAULT_MIN_AGE_S = 3600
"""The default grace period: orphans younger than this are reported, never deleted."""

ORPHAN_KINDS = frozenset(
    ("torn_copy", "below_start", "duplicate", "deleted_topic", "unnamed_spill")
)
"""The kinds of finding that may be deleted (the others are only reported)."""

_SERVICE_LOG_ID = re.compile(r"(?P<topic>.+)-(?P<tid>[0-9a-f]{12})-(?P<p>\d+)")
_MARKER = naming.deletion_marker_key("x").rsplit("/", 1)[1]
"""The deletion marker's name in a log's prefix (``deleted.json``)."""


@dataclass
class Finding:
    """One group of objects that no log references (or a dangling reference): its kind
    (see the module docstring), the log, the keys and why."""

    kind: str
    log_id: str
    keys: list[str]
    reason: str
    bytes: int = 0
    newest_ms: int | None = None
    """When the youngest of ``keys`` was written (None: not known)."""
    action: str = "report"
    """``delete`` (an orphan past the grace period), ``young`` (an orphan within it,
    kept), ``report`` (never deleted), ``deleted`` (done), ``changed`` (looked at again
    before the delete and no longer an orphan: kept), ``served`` (the running service
    named serves it: kept)."""

    def to_json(self) -> dict[str, Any]:
        topic, partition = topic_of(self.log_id) if self.log_id else ("", -1)
        return {
            "kind": self.kind,
            "topic": topic,
            "partition": partition,
            "log_id": self.log_id,
            "keys": list(self.keys),
            "bytes": self.bytes,
            "newest_ms": self.newest_ms,
            "action": self.action,
            "reason": self.reason,
        }


@dataclass
class ReconcileReport:
    """What a reconcile found and did."""

    min_age_s: float = DEFAULT_MIN_AGE_S
    delete: bool = False
    objects: int = 0
    referenced: int = 0
    findings: list[Finding] = field(default_factory=list)

    @property
    def orphans(self) -> list[Finding]:
        return [f for f in self.findings if f.kind in ORPHAN_KINDS]

    @property
    def dangling(self) -> list[Finding]:
        return [f for f in self.findings if f.kind.startswith("dangling")]

    def count(self, action: str) -> tuple[int, int]:
        """Objects and bytes of the orphans whose action is ``action``."""
        found = [f for f in self.orphans if f.action == action]
        return sum(len(f.keys) for f in found), sum(f.bytes for f in found)

    def to_json(self) -> dict[str, Any]:
        deleted, deleted_bytes = self.count("deleted")
        would, would_bytes = self.count("delete")
        young, young_bytes = self.count("young")
        return {
            "dry_run": not self.delete,
            "min_age_s": self.min_age_s,
            "objects": self.objects,
            "referenced_objects": self.referenced,
            "orphan_objects": sum(len(f.keys) for f in self.orphans),
            "deleted_objects": deleted,
            "deleted_bytes": deleted_bytes,
            "would_delete_objects": would,
            "would_delete_bytes": would_bytes,
            "young_orphan_objects": young,
            "young_orphan_bytes": young_bytes,
            "served_orphan_objects": self.count("served")[0],
            "dangling": len(self.dangling),
            "findings": [f.to_json() for f in self.findings],
        }


@dataclass(frozen=True)
class LiveView:
    """What a running service serves (``--url``): its topics' log ids and the object
    keys of the copies its partitions serve (data objects and their manifests)."""

    log_ids: frozenset[str]
    keys: frozenset[str]


def live_log_ids(outside: list[ObjectInfo], storage: RemoteStorage) -> set[str] | None:
    """The log ids of every topic ``topics/*.json`` names (``<topic>-<id12>-<p>``); None
    when one of them does not read (then no log is taken for a deleted topic's)."""
    metas = [
        o.key
        for o in outside
        if o.key.startswith(naming.TOPIC_OBJECTS_PREFIX) and o.key.endswith(".json")
    ]
    out: set[str] = set()
    for key in metas:
        try:
            doc = json.loads(storage.get(key))
            name, tid, parts = str(doc["name"]), str(doc["topic_id"]), int(doc["partitions"])
        except RemoteObjectNotFoundError:
            continue  # deleted since the listing: its logs are a deleted topic's
        except (RemoteCorruptionError, ValueError, KeyError, TypeError) as exc:
            log.error(
                "reconcile: topic metadata %s does not read (%s): no topic is taken for deleted",
                key,
                exc,
            )
            return None
        out.update(f"{name}-{tid[:12]}-{p}" for p in range(parts))
    return out


def mark_log_deleted(storage: RemoteStorage, log_id: str, topic: str, topic_id: str) -> None:
    """Put the deletion marker of ``log_id``, a log of topic ``topic`` (id ``topic_id``)
    that is deleted or abandoned (never served again): from then on ``archive
    reconcile`` may delete what is left of it (``deleted_topic``) once the bucket's
    ``topics/`` no longer names it. Blocking; RemoteStorageError if the bucket fails."""
    doc = {"log_id": log_id, "topic": topic, "topic_id": topic_id, "deleted_ms": _now_ms()}
    storage.put(naming.deletion_marker_key(log_id), json.dumps(doc).encode())


def delete_deleted_log(storage: RemoteStorage, log_id: str, topic: str, topic_id: str) -> int:
    """Delete every object of ``log_id``, a log of the deleted topic ``topic``: its
    deletion marker put first (:func:`mark_log_deleted`), then every other object
    deleted, then the marker, so whatever a failure or a crash leaves is known as a
    deleted topic's (``deleted_topic``) and not only as a log no metadata names. Returns
    the number of objects deleted besides the marker. Blocking; RemoteStorageError if
    the bucket fails (what is left keeps its marker)."""
    mark_log_deleted(storage, log_id, topic, topic_id)
    marker = naming.deletion_marker_key(log_id)
    keys = [o.key for o in storage.list(naming.log_prefix(log_id) + "/") if o.key != marker]
    storage.delete(keys)  # the store batches (S3: 1,000 keys per request)
    storage.delete([marker])
    return len(keys)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _newer(a: RemoteSegment, b: RemoteSegment) -> bool:
    """Whether copy ``a`` was made by a leader of a later epoch than copy ``b`` (as
    recovery decides it: copies without an epoch are never newer)."""
    return a.leader_epoch is not None and (
        b.leader_epoch is None or a.leader_epoch > b.leader_epoch
    )


def _bucket_meta(storage: RemoteStorage, log_id: str) -> RemoteMeta:
    """The log's ``meta.json`` (log start, clips); empty when missing or unreadable (then
    nothing is taken for below the start)."""
    try:
        return RemoteMeta.from_bytes(storage.get(naming.meta_object_key(log_id)))
    except (TieredLogError, ValueError):
        return RemoteMeta()


def _newest(infos: list[ObjectInfo]) -> int | None:
    times = [i.modified_ms for i in infos]
    if not times or any(t is None for t in times):
        return None
    return max(t for t in times if t is not None)


class _Reconcile:
    def __init__(self, storage: RemoteStorage, report: ReconcileReport, now_ms: int) -> None:
        self.storage, self.report, self.now_ms = storage, report, now_ms

    def add(self, kind: str, log_id: str, infos: list[ObjectInfo], reason: str) -> Finding:
        f = Finding(
            kind,
            log_id,
            [i.key for i in infos],
            reason,
            sum(i.size for i in infos),
            _newest(infos),
        )
        if kind in ORPHAN_KINDS:
            old = f.newest_ms is not None and (
                self.now_ms - f.newest_ms >= self.report.min_age_s * 1000
            )
            f.action = "delete" if old else "young"
        self.report.findings.append(f)
        return f

    def log_copies(self, lo: LogObjects) -> None:
        """Classify one live log's objects (see the module docstring)."""
        log_id = lo.log_id
        meta = _bucket_meta(self.storage, log_id)
        start = meta.log_start_offset

        def end(s: RemoteSegment) -> int:  # what the copy serves: a truncation clips it
            return min(s.next_offset, meta.clips.get(s.id, s.next_offset))

        listed, spills = self._snapshot(lo, start)
        complete = sorted(k for k, objs in lo.copies.items() if set(objs) >= COMMITTED)
        taken: list[RemoteSegment] = []
        for (base, seg_id), objs in sorted(lo.copies.items()):
            if (base, seg_id) in complete:
                continue
            also = " (the partition snapshot lists it)" if (base, seg_id) in listed else ""
            if naming.LOG_SUFFIX not in objs:
                self.add(
                    "dangling_manifest",
                    log_id,
                    [objs[naming.RLI_SUFFIX]],
                    f"copy {base}-{seg_id}: a manifest whose data object is missing{also}",
                )
            elif also:
                self.add(
                    "dangling_snapshot",
                    log_id,
                    [objs[naming.LOG_SUFFIX]],
                    f"copy {base}-{seg_id}: a data object without its manifest{also}",
                )
            else:
                self.add(
                    "torn_copy",
                    log_id,
                    [objs[naming.LOG_SUFFIX]],
                    f"copy {base}-{seg_id}: a data object without its manifest",
                )
        for base, seg_id in complete:
            objs = lo.copies[(base, seg_id)]
            infos = [objs[naming.LOG_SUFFIX], objs[naming.RLI_SUFFIX]]
            rli = objs[naming.RLI_SUFFIX].key
            try:
                rs, _, _, _ = decode_manifest(
                    self.storage.get(rli), rli, objs[naming.LOG_SUFFIX].size
                )
            except RemoteObjectNotFoundError:
                continue  # deleted since the listing (retention)
            except (RemoteCorruptionError, CorruptRecordError) as exc:
                self.add("damaged", log_id, infos, exc.message)
                continue
            prev = taken[-1] if taken else None
            if rs.next_offset <= start:
                self.add(
                    "below_start",
                    log_id,
                    infos,
                    f"copy {base}-{seg_id} [{rs.base_offset}, {rs.next_offset}) ends at or "
                    f"below the log start {start}",
                )
            elif prev is None or rs.base_offset >= end(prev):
                taken.append(rs)
                self.report.referenced += 2
            elif _newer(rs, prev) and rs.base_offset == prev.base_offset:
                prev_objs = lo.copies[(prev.base_offset, prev.id)]
                self.add(
                    "listed_duplicate" if (prev.base_offset, prev.id) in listed else "duplicate",
                    log_id,
                    [prev_objs[naming.LOG_SUFFIX], prev_objs[naming.RLI_SUFFIX]],
                    f"copy {prev.base_offset}-{prev.id} of leader epoch {prev.leader_epoch}: "
                    f"a deposed leader's copy of the offsets copy {seg_id} (epoch "
                    f"{rs.leader_epoch}) holds",
                )
                taken[-1] = rs
            elif (rs.base_offset, rs.next_offset, rs.size) == (
                prev.base_offset,
                prev.next_offset,
                prev.size,
            ) or _newer(prev, rs):
                self.add(
                    "listed_duplicate" if (base, seg_id) in listed else "duplicate",
                    log_id,
                    infos,
                    f"copy {base}-{seg_id} [{rs.base_offset}, {rs.next_offset}) duplicates "
                    f"copy {prev.id}"
                    + (
                        f" (its leader epoch {rs.leader_epoch} is older: a deposed leader's)"
                        if _newer(prev, rs)
                        else ""
                    ),
                )
            else:
                self.add(
                    "overlap",
                    log_id,
                    infos,
                    f"copy {base}-{seg_id} [{rs.base_offset}, {rs.next_offset}) overlaps copy "
                    f"{prev.id} [{prev.base_offset}, {prev.next_offset}) otherwise than as a "
                    "duplicate: kept (recovery serves the first)",
                )
        for info in lo.others:
            rest = info.key.split("/", 2)[2]
            if rest in ("meta.json", "snapshot.bin") or info.key in spills:
                self.report.referenced += 1
            elif is_spill_key(rest):
                self.add(
                    "unnamed_spill",
                    log_id,
                    [info],
                    f"log {log_id}: a spill of the partition snapshot that the snapshot does "
                    "not name (merged into another, below the log start, a predecessor's, or "
                    "put by a write that did not finish)",
                )
            elif rest == _MARKER:
                self.add(
                    "listed_deleted",
                    log_id,
                    [info],
                    f"log {log_id}: a deletion marker, yet the bucket's topics/ names the log "
                    "(a delete that did not remove the topic's metadata) or the bucket's "
                    "topic metadata does not read: kept",
                )
            else:
                self.add("unknown", log_id, [info], "not an object tiered_log names")

    def _snapshot(self, lo: LogObjects, start: int) -> tuple[set[tuple[int, str]], set[str]]:
        """The copies the partition snapshot (with its spills) lists above the log start
        (a rebuild takes them without reading their manifests: never orphans) and the
        keys of the spills it names, and its dangling references (copies it lists whose
        objects are both gone) added. A damaged snapshot lists nothing (a rebuild then
        reads every manifest)."""
        if not any(i.key.endswith("/snapshot.bin") for i in lo.others):
            return set(), set()
        try:
            snap = read_snapshot(self.storage, lo.log_id, start)
        except (RemoteCorruptionError, CorruptRecordError) as exc:
            self.add("damaged", lo.log_id, [], exc.message)
            return set(), set()
        if snap is None:
            return set(), set()
        listed = {(s.base_offset, s.id) for s in snap.segments if s.next_offset > start}
        for s in snap.segments:
            if s.next_offset > start and (s.base_offset, s.id) not in lo.copies:
                key = naming.segment_object_key(lo.log_id, s.base_offset, s.id, naming.LOG_SUFFIX)
                self.add(
                    "dangling_snapshot",
                    lo.log_id,
                    [],
                    f"the partition snapshot lists copy {s.base_offset}-{s.id} "
                    f"[{s.base_offset}, {s.next_offset}) whose objects ({key}, .rli) are missing",
                )
        return listed, {p.key for p in snap.spills}


def reconcile_bucket(
    storage: RemoteStorage,
    *,
    topic: str | None = None,
    delete: bool = False,
    min_age_s: float = DEFAULT_MIN_AGE_S,
    progress: Callable[[str], None] | None = None,
    live_view: Callable[[], LiveView] | None = None,
) -> ReconcileReport:
    """Find the bucket's orphans and dangling references (of ``topic``'s logs only,
    when given) and, with ``delete``, delete the orphans older than ``min_age_s``; see
    the module docstring. ``live_view``: what a running service serves, asked before the
    listing and again after it: a log it serves is never a deleted topic's, and an
    orphan holding a key it serves is kept (action ``served``). RemoteStorageError if the
    bucket fails; the live view's own errors propagate (nothing is deleted then)."""
    report = ReconcileReport(min_age_s=min_age_s, delete=delete)
    now_ms = _now_ms()
    work = _Reconcile(storage, report, now_ms)
    served = live_view() if live_view is not None else None
    logs, outside = list_logs(storage)
    live = live_log_ids(outside, storage)
    if live is not None and served is not None:
        live |= served.log_ids
    report.objects = len(outside) + sum(
        len(lo.others) + sum(len(o) for o in lo.copies.values()) for lo in logs.values()
    )
    for info in outside:
        if topic is not None:
            continue
        if info.key.startswith(naming.TOPIC_OBJECTS_PREFIX) and info.key.endswith(".json"):
            report.referenced += 1
        else:
            work.add("unknown", "", [info], "not under a log's prefix nor a topic's metadata")
    chosen = sorted(lid for lid in logs if topic is None or topic_of(lid)[0] == topic)
    for n, log_id in enumerate(chosen, 1):
        lo = logs[log_id]
        unnamed = live is not None and _SERVICE_LOG_ID.fullmatch(log_id) and log_id not in live
        name, tid = topic_of(log_id)[0], log_id.rsplit("-", 2)[1]
        if unnamed and any(i.key.rsplit("/", 1)[1] == _MARKER for i in lo.others):
            infos = lo.others + [i for objs in lo.copies.values() for i in objs.values()]
            work.add(
                "deleted_topic",
                log_id,
                sorted(infos, key=lambda i: i.key),
                f"log {log_id}: its topic {name!r} (id {tid}...) was deleted (its deletion "
                "marker is there) and is not in the bucket's topics/",
            )
        else:
            if unnamed:
                work.add(
                    "unreferenced_log",
                    log_id,
                    [],
                    f"log {log_id}: its topic {name!r} (id {tid}...) is not in the bucket's "
                    "topics/ and no deletion marker says it was deleted (its metadata may "
                    "not have reached the bucket yet): kept",
                )
            work.log_copies(lo)
        if progress is not None:
            progress(f"reconcile: {n}/{len(chosen)} logs, {len(report.findings)} findings")
    if live_view is not None:  # again: what the service took up while we listed
        now = live_view()
        keys, ids = now.keys | (served.keys if served else frozenset()), now.log_ids
        for f in report.orphans:
            if (f.log_id in ids and f.kind == "deleted_topic") or keys.intersection(f.keys):
                f.action = "served"
                f.reason += "; the service serves it: kept"
    if delete:
        _delete(storage, report, live)
    return report


def _delete(storage: RemoteStorage, report: ReconcileReport, live: set[str] | None) -> None:
    """Delete the orphans past the grace period, each looked at again first."""
    doomed = [f for f in report.orphans if f.action == "delete"]
    if any(f.kind == "deleted_topic" for f in doomed):
        _, outside = list_logs(storage, naming.TOPIC_OBJECTS_PREFIX)
        now_live = live_log_ids(outside, storage)
        for f in doomed:
            if f.kind == "deleted_topic" and (now_live is None or f.log_id in now_live):
                f.action = "changed"
    for f in doomed:
        if f.action != "delete":
            continue
        if f.kind == "torn_copy":
            rli = naming.manifest_key_of(f.keys[0])
            try:
                storage.size(rli)
                f.action = "changed"  # its manifest arrived: a copy that finished late
                continue
            except RemoteObjectNotFoundError:
                pass
        storage.delete(f.keys)
        f.action = "deleted"
        log.info("reconcile: deleted %d object(s): %s", len(f.keys), f.reason)


__all__ = [
    "DEFAULT_MIN_AGE_S",
    "ORPHAN_KINDS",
    "Finding",
    "LiveView",
    "ReconcileReport",
    "delete_deleted_log",
    "live_log_ids",
    "mark_log_deleted",
    "reconcile_bucket",
]
