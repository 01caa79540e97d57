"""The archive's scrubber: read every archived segment back as a reader would and report
damage before a reader finds it (``tiered-log archive scrub``, and the service's
background pass, :class:`Scrubber`).

What one pass checks, for every copy in the bucket that has a manifest (``.rli``) and
lies at or above its log's start (``<log>/meta.json``)::

    the manifest      its stored digest (a whole GET verifies it), its own checksum and
                      consistency (:func:`~tiered_log.remote.manifest.decode_manifest`:
                      entries tile [base, next) and the stored bytes, chunk count)
    the data key      an encrypted segment's wrapped key unwraps with the key ring
                      (a key the ring lacks is reported naming its key id; the chunks'
                      stored checksums are still verified, their records cannot be)
    the data object   present, and exactly the stored size the manifest gives
    every chunk       one ranged GET per chunk (within the rate limit); the frame's
                      checksum, decryption (GCM's tag), decompression and length
                      (:func:`~tiered_log.remote.chunk_codec.decode_chunk`); then every
                      batch's framing and CRC-32C with offsets contiguous from the
                      entry's first offset to its last
                      (:func:`~tiered_log.format.batch_decode.batch_table`)

A copy with a data object and no manifest is an incomplete attempt, not damage (left to
``archive reconcile``). A manifest whose data object is missing is damage unless the
manifest is younger than :data:`IN_FLIGHT_GRACE_MS`: a plain copy puts its two objects
at the same time, so a young manifest alone may be a copy under way. A copy deleted
while it is checked (retention) is skipped, not damage: each "missing" finding is
confirmed by looking the manifest up again.

Read-only: a pass never writes or deletes an object, so it is safe while services ship
to and read from the same bucket. Blocking I/O; :func:`scrub_bucket` is one call at a
time per report (any thread); :class:`Scrubber` runs passes on a thread of its own and
its counters may be read from any thread.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..errors import (
    CorruptRecordError,
    RemoteCorruptionError,
    RemoteObjectNotFoundError,
    TieredLogError,
)
from ..format import naming
from ..format.records import batch_table
from .chunk_codec import decode_chunk
from .crypto import KeyRing, KeyUnavailableError
from .limits import RateLimiter
from .manifest import decode_manifest, manifest_encryption
from .metadata import RemoteMeta
from .storage import ObjectInfo, RemoteStorage

log = logging.getLogger(__name__)

IN_FLIGHT_GRACE_MS = 5 * 60 * 1000
"""A manifest younger than this whose data object is missing may be a copy under way:
it is skipped, not reported."""

_LOG_ID = re.compile(r"(?P<topic>.+)-(?P<tid>[0-9a-f]{12})-(?P<p>\d+)")
_PLAIN_LOG_ID = re.compile(r"(?P<topic>.+)-(?P<p>\d+)")


def topic_of(log_id: str) -> tuple[str, int]:
    """``(topic, partition)`` of a log id: a service's ``<topic>-<id12>-<p>``, or a plain
    ``<name>-<p>``; ``(log_id, -1)`` for anything else."""
    m = _LOG_ID.fullmatch(log_id) or _PLAIN_LOG_ID.fullmatch(log_id)
    return (m["topic"], int(m["p"])) if m else (log_id, -1)


def log_id_of_key(key: str) -> tuple[str, str] | None:
    """``(log id, the rest of the key)`` of an object under a log's prefix
    (``<h>/<log id>/...``, :func:`~tiered_log.format.naming.log_prefix`), else None."""
    parts = key.split("/", 2)
    if len(parts) != 3 or len(parts[0]) != 4:
        return None
    if naming.log_prefix(parts[1]) != f"{parts[0]}/{parts[1]}":
        return None
    return parts[1], parts[2]


@dataclass
class LogObjects:
    """One log's objects in the bucket: its copies by ``(base, id)`` and suffix, and the
    other objects under its prefix (``meta.json``, ``snapshot.bin``, unknown ones)."""

    log_id: str
    copies: dict[tuple[int, str], dict[str, ObjectInfo]] = field(default_factory=dict)
    others: list[ObjectInfo] = field(default_factory=list)


def list_logs(
    storage: RemoteStorage, prefix: str = ""
) -> tuple[dict[str, LogObjects], list[ObjectInfo]]:
    """Every log's objects in the bucket (one listing) and the objects under no log's
    prefix (``topics/*.json`` and anything else)."""
    logs: dict[str, LogObjects] = {}
    outside: list[ObjectInfo] = []
    for info in storage.list(prefix):
        found = log_id_of_key(info.key)
        if found is None:
            outside.append(info)
            continue
        lo = logs.setdefault(found[0], LogObjects(found[0]))
        parsed = (
            naming.parse_segment_object_key(info.key) if found[1].startswith("segments/") else None
        )
        if parsed is None:
            lo.others.append(info)
        else:
            lo.copies.setdefault((parsed[0], parsed[1]), {})[parsed[2]] = info
    return logs, outside


def bucket_log_start(storage: RemoteStorage, log_id: str) -> int:
    """The log start ``<log>/meta.json`` records (0 when it is missing or unreadable:
    then every copy is checked)."""
    try:
        return RemoteMeta.from_bytes(storage.get(naming.meta_object_key(log_id))).log_start_offset
    except (TieredLogError, ValueError):
        return 0


@dataclass
class Damage:
    """What is wrong with one segment: an archived copy (``tier`` ``remote``) or a
    node's local segment (``local``), where it is and each problem found, with its kind
    (``manifest``, ``data_missing``, ``data_size``, ``chunk``, ``key_unavailable``,
    ``format``; ``local`` for a local segment), and what its repair did (``repaired``:
    from where; ``unrepaired``: why not; both None when none was tried)."""

    topic: str
    partition: int
    log_id: str
    base_offset: int
    next_offset: int | None
    object_key: str
    problems: list[str] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    key_id: str | None = None
    found_ms: int = 0
    """When the pass found it (ms since the epoch)."""
    tier: str = "remote"
    repaired: str | None = None
    unrepaired: str | None = None

    @property
    def segment_id(self) -> str | None:
        """The copy's id (from its object key); None for a local segment."""
        parsed = naming.parse_segment_object_key(self.object_key) if self.tier == "remote" else None
        return parsed[1] if parsed is not None else None

    def add(self, kind: str, problem: str) -> None:
        self.kinds.append(kind)
        self.problems.append(problem)

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "log_id": self.log_id,
            "base_offset": self.base_offset,
            "next_offset": self.next_offset,
            "object_key": self.object_key,
            "kinds": sorted(set(self.kinds)),
            "problems": list(self.problems),
            "found_ms": self.found_ms,
            "tier": self.tier,
            "repaired": self.repaired is not None,
            "repair": self.repaired if self.repaired is not None else self.unrepaired,
            **({"key_id": self.key_id} if self.key_id is not None else {}),
        }

    def line(self) -> str:
        where = f"{self.topic}/{self.partition}" if self.partition >= 0 else self.log_id
        offsets = (
            f"[{self.base_offset}, {self.next_offset})"
            if self.next_offset is not None
            else f"from {self.base_offset}"
        )
        text = f"{where} offsets {offsets} {self.object_key}: {'; '.join(self.problems)}"
        if self.repaired is not None:
            return f"{text} (repaired {self.repaired})"
        if self.unrepaired is not None:
            return f"{text} (not repaired: {self.unrepaired})"
        return text


@dataclass
class ScrubReport:
    """What a pass found: counts, and one :class:`Damage` per damaged segment."""

    segments_total: int = 0
    segments_done: int = 0
    segments_clean: int = 0
    segments_skipped: int = 0
    """Copies not checked: below the log start, deleted while checked, or a young
    manifest without its data object (a copy under way)."""
    chunks_verified: int = 0
    bytes_read: int = 0
    damaged: list[Damage] = field(default_factory=list)
    partitions: set[tuple[str, int]] = field(default_factory=set)
    """The ``(topic, partition)`` pairs a node's pass covered whole (empty for a bucket's
    pass)."""
    started_ms: int = 0
    finished_ms: int = 0

    @property
    def unrepaired(self) -> list[Damage]:
        """The damaged segments no repair made good."""
        return [d for d in self.damaged if d.repaired is None]

    @property
    def missing_keys(self) -> dict[str, int]:
        """Segments per key id the key ring lacks."""
        out: dict[str, int] = {}
        for d in self.damaged:
            if d.key_id is not None and "key_unavailable" in d.kinds:
                out[d.key_id] = out.get(d.key_id, 0) + 1
        return out

    def to_json(self) -> dict[str, Any]:
        secs = max(self.finished_ms - self.started_ms, 1) / 1000
        return {
            "segments_total": self.segments_total,
            "segments_checked": self.segments_done,
            "segments_clean": self.segments_clean,
            "segments_skipped": self.segments_skipped,
            "segments_damaged": len(self.damaged),
            "segments_repaired": len(self.damaged) - len(self.unrepaired),
            "chunks_verified": self.chunks_verified,
            "bytes_read": self.bytes_read,
            "seconds": round(secs, 3),
            "bytes_per_sec": round(self.bytes_read / secs),
            "missing_keys": dict(sorted(self.missing_keys.items())),
            "damaged": [d.to_json() for d in self.damaged],
        }


class _Pass:
    """One scrub pass's state (see :func:`scrub_bucket`)."""

    def __init__(
        self,
        storage: RemoteStorage,
        ring: KeyRing | None,
        limiter: RateLimiter,
        cancel: threading.Event | None,
        now_ms: int,
        grace_ms: int,
        log_damage: bool,
        report: ScrubReport | None = None,
    ) -> None:
        self.storage, self.ring, self.limiter, self.cancel = storage, ring, limiter, cancel
        self.now_ms, self.grace_ms, self.log_damage = now_ms, grace_ms, log_damage
        self.report = report if report is not None else ScrubReport(started_ms=now_ms)

    def _gone(self, key: str) -> bool:
        """Whether the object ``key`` is no longer there (retention deleted the copy)."""
        try:
            self.storage.size(key)
            return False
        except RemoteObjectNotFoundError:
            return True

    def copy(
        self, log_id: str, base: int, seg_id: str, objs: dict[str, ObjectInfo], start: int
    ) -> None:
        """Check one copy (it has a manifest); adds to the report."""
        topic, partition = topic_of(log_id)
        rli_key = naming.segment_object_key(log_id, base, seg_id, naming.RLI_SUFFIX)
        data_key = naming.segment_object_key(log_id, base, seg_id, naming.LOG_SUFFIX)
        dmg = Damage(topic, partition, log_id, base, None, data_key)
        rep = self.report
        data_info = objs.get(naming.LOG_SUFFIX)
        try:
            blob = self.storage.get(rli_key)
        except RemoteObjectNotFoundError:
            rep.segments_skipped += 1  # deleted since the listing
            return
        except RemoteCorruptionError as exc:
            dmg.object_key = rli_key
            dmg.add("manifest", f"manifest {rli_key}: {exc.message}")
            self._damaged(dmg)
            return
        rep.bytes_read += len(blob)
        try:
            rs, entries, _, _ = decode_manifest(blob, rli_key)
            head = json.loads(blob.partition(b"\n")[0])
            stored = int(head.get("stored_size", rs.size))
        except RemoteCorruptionError as exc:
            dmg.object_key = rli_key
            dmg.add("manifest", exc.message)
            self._damaged(dmg)
            return
        except CorruptRecordError as exc:  # another batch format: not damage, not readable
            dmg.object_key = rli_key
            dmg.add("format", exc.message)
            self._damaged(dmg)
            return
        dmg.next_offset = rs.next_offset
        if rs.next_offset <= start:
            rep.segments_skipped += 1  # below the log start: retention's to delete
            return
        if data_info is None:
            young = (
                objs[naming.RLI_SUFFIX].modified_ms is None
                or self.now_ms - (objs[naming.RLI_SUFFIX].modified_ms or 0) < self.grace_ms
            )
            if young or self._gone(rli_key) or not self._gone(data_key):
                rep.segments_skipped += 1  # a copy under way, or deleted meanwhile
                return
            dmg.add(
                "data_missing",
                f"data object {data_key} is missing (its manifest {rli_key} is there)",
            )
            self._damaged(dmg)
            return
        dek = self._data_key(blob, rli_key, dmg)
        if dmg.kinds and "key_unavailable" not in dmg.kinds:
            self._damaged(dmg)
            return
        if data_info.size != stored:
            what = "truncated" if data_info.size < stored else "longer than it should be"
            dmg.add(
                "data_size",
                f"data object is {data_info.size} bytes, its manifest says {stored} ({what})",
            )
        for e in entries:
            if e.position + e.data_length > data_info.size:
                dmg.add(
                    "chunk",
                    f"chunk [{e.first_offset}, {e.last_offset}] at byte {e.position} lies past "
                    f"the object's end",
                )
                break
            if not self._chunk(
                e.object_key, e.position, e.data_length, e.first_offset, e.last_offset, dek, dmg
            ):  # the data object went away
                if self._gone(rli_key):
                    rep.segments_skipped += 1  # retention deleted the copy meanwhile
                    return
                break
        if dmg.kinds:
            self._damaged(dmg)
        else:
            rep.segments_clean += 1

    def _data_key(self, blob: bytes, rli_key: str, dmg: Damage) -> bytes | None:
        """The segment's data key (None: unencrypted, or not at hand: then ``dmg`` says
        so, naming the key id)."""
        try:
            found = manifest_encryption(blob, rli_key)
        except RemoteCorruptionError as exc:
            dmg.add("manifest", exc.message)
            return None
        if found is None:
            return None
        if self.ring is None:
            dmg.key_id = found[0]
            dmg.add(
                "key_unavailable",
                f"encrypted with key {found[0]!r} and no key ring was given: only the "
                "chunks' stored checksums were verified",
            )
            return None
        try:
            return self.ring.unwrap(*found)
        except KeyUnavailableError as exc:
            dmg.key_id = found[0]
            dmg.add(
                "key_unavailable", f"{exc.message}; only the chunks' stored checksums were verified"
            )
        except RemoteCorruptionError as exc:
            dmg.add("manifest", f"manifest {rli_key}: {exc.message}")
        return None

    def _chunk(
        self, key: str, pos: int, length: int, first: int, last: int, dek: bytes | None, dmg: Damage
    ) -> bool:
        """Verify one chunk; False when it could not be read at all (the object is
        gone: ``dmg`` says so)."""
        self.limiter.consume(length, self.cancel)
        where = f"chunk [{first}, {last}] at byte {pos}"
        try:
            data = self.storage.get(key, pos, pos + length)
        except RemoteObjectNotFoundError:
            dmg.add("data_missing", f"data object {key} is missing")
            return False
        except RemoteCorruptionError as exc:  # a range that is the whole object: its digest
            self.report.bytes_read += length
            dmg.add("chunk", f"{where}: {exc.message}")
            return True
        self.report.bytes_read += len(data)
        if len(data) != length:
            dmg.add("chunk", f"{where}: got {len(data)} of its {length} bytes")
            return True
        try:
            batches = decode_chunk(data, dek, where)
        except KeyUnavailableError:
            self.report.chunks_verified += 1  # its stored checksum held; no key for the rest
            return True
        except RemoteCorruptionError as exc:
            dmg.add("chunk", exc.message)
            return True
        try:
            got, end = batch_table(batches, first)
        except CorruptRecordError as exc:
            dmg.add("format", f"{where}: {exc.message}")
            return True
        if end != len(batches):
            dmg.add(
                "chunk",
                f"{where}: the batch at byte {end} of the chunk does not verify (CRC-32C, "
                f"framing or offset order; expected offset "
                f"{got[-1].next_offset if got else first})",
            )
        elif got[-1].next_offset != last + 1:
            dmg.add("chunk", f"{where}: its batches end at offset {got[-1].next_offset - 1}")
        else:
            self.report.chunks_verified += 1
        return True

    def _damaged(self, dmg: Damage) -> None:
        dmg.found_ms = int(time.time() * 1000)
        if self.log_damage:
            log.error("scrub: damaged segment %s", dmg.line())
        self.report.damaged.append(dmg)


def _topic_name(d: Damage) -> str:
    """The topic a damaged copy belongs to ("" for a log no service topic names)."""
    return d.topic if d.partition >= 0 else ""


def scrub_bucket(
    storage: RemoteStorage,
    ring: KeyRing | None = None,
    *,
    topic: str | None = None,
    bytes_per_sec: int | None = None,
    progress: Callable[[ScrubReport], None] | None = None,
    cancel: threading.Event | None = None,
    in_flight_grace_ms: int = IN_FLIGHT_GRACE_MS,
    log_damage: bool = False,
) -> ScrubReport:
    """One scrub pass over every archived segment in ``storage`` (of ``topic`` only,
    when given), reading at most ``bytes_per_sec`` (None: unlimited); see the module
    docstring. ``progress`` gets the report after each segment. ``cancel`` set ends the
    pass early (the report then covers what was checked). ``in_flight_grace_ms``: how old
    a manifest without its data object must be to be reported. ``log_damage``: log each
    damaged segment as an ERROR when found. RemoteStorageError if the bucket fails
    (listing, or a read that fails otherwise than with damage)."""
    pass_ = _Pass(
        storage,
        ring,
        RateLimiter(bytes_per_sec),
        cancel,
        int(time.time() * 1000),
        in_flight_grace_ms,
        log_damage,
    )
    logs, _ = list_logs(storage)
    wanted = {
        log_id: lo
        for log_id, lo in sorted(logs.items())
        if topic is None or topic_of(log_id)[0] == topic
    }
    _check_copies(pass_, wanted, progress)
    pass_.report.finished_ms = int(time.time() * 1000)
    return pass_.report


def scrub_log_copies(
    storage: RemoteStorage,
    ring: KeyRing | None,
    log_id: str,
    report: ScrubReport,
    limiter: RateLimiter,
    *,
    progress: Callable[[ScrubReport], None] | None = None,
    cancel: threading.Event | None = None,
    in_flight_grace_ms: int = IN_FLIGHT_GRACE_MS,
    log_damage: bool = False,
    only: tuple[int, str] | None = None,
    served: set[str] | None = None,
    unlisted: set[str] | None = None,
) -> list[Damage]:
    """Check every archived copy of one log (one listing of its prefix), or only the
    copy ``only`` names (``(base offset, segment id)``), or only those whose ids are in
    ``served`` (a leader's finished copies: then nothing in the listing is a copy under
    way, and leftovers no reader is sent to are left to ``archive reconcile``), adding
    to ``report`` (its totals grow by the copies checked); the damaged copies found.
    ``unlisted`` (with ``served``) gets the served ids the listing shows no manifest of
    (the caller confirms them: the listing may predate a deletion). As
    :func:`scrub_bucket` otherwise, and read-only likewise: repairing is the caller's."""
    pass_ = _Pass(
        storage,
        ring,
        limiter,
        cancel,
        int(time.time() * 1000),
        in_flight_grace_ms,
        log_damage,
        report,
    )
    before = len(report.damaged)
    prefix = (
        naming.log_prefix(log_id) + "/"
        if only is None
        else naming.segment_object_key(log_id, only[0], only[1], "")
    )
    logs, _ = list_logs(storage, prefix)
    mine = logs.get(log_id, LogObjects(log_id))
    if served is not None:
        mine.copies = {k: v for k, v in mine.copies.items() if k[1] in served}
        if unlisted is not None:
            listed = {k[1] for k, v in mine.copies.items() if naming.RLI_SUFFIX in v}
            unlisted.update(served - listed)
    _check_copies(pass_, {log_id: mine}, progress)
    return report.damaged[before:]


def _check_copies(
    pass_: _Pass,
    logs: dict[str, LogObjects],
    progress: Callable[[ScrubReport], None] | None,
) -> None:
    """Check every copy with a manifest of ``logs``, in offset order, each log above the
    start its ``meta.json`` records."""
    rep, cancel = pass_.report, pass_.cancel
    work: list[tuple[str, int, str, dict[str, ObjectInfo]]] = []
    for log_id, lo in logs.items():
        for (base, seg_id), objs in sorted(lo.copies.items()):
            if naming.RLI_SUFFIX in objs:
                work.append((log_id, base, seg_id, objs))
    rep.segments_total += len(work)
    starts: dict[str, int] = {}
    for log_id, base, seg_id, objs in work:
        if cancel is not None and cancel.is_set():
            break
        if log_id not in starts:
            starts[log_id] = bucket_log_start(pass_.storage, log_id)
        pass_.copy(log_id, base, seg_id, objs, starts[log_id])
        rep.segments_done += 1
        if progress is not None:
            progress(rep)


PassFn = Callable[[str | None, Callable[[ScrubReport], None], threading.Event], ScrubReport]
"""One scrub pass: ``(topic or None for all, progress, cancel) -> report``."""


class Scrubber:
    """A node's scrubber: passes run by ``run_pass`` (the service's is
    :func:`tiered_log.partition.scrub.scrub_node`: both tiers of every partition the node
    holds, repairing what it can), in the background every ``interval_s`` seconds
    (None: only when asked, :meth:`run_now`) on a daemon thread of its own. Keeps the last
    full pass's report, each partition's findings of the last pass that covered it
    (:attr:`ScrubReport.partitions`) and running totals for ``/metrics``.

    Thread-safety: one pass at a time (a lock; :meth:`run_now` waits for a background
    pass under way); :meth:`start`/:meth:`stop` from one thread; the totals, reports and
    findings may be read from any thread (each is replaced whole)."""

    def __init__(self, run_pass: PassFn, interval_s: float | None) -> None:
        self._run_pass = run_pass
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._pass_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.passes = 0
        self.failures = 0
        self.bytes_total = 0
        self.segments_total = 0
        self.repaired_total: dict[str, int] = {}
        """Segments repaired, per tier (``local``, ``remote``)."""
        self.last: ScrubReport | None = None
        self.current: ScrubReport | None = None
        self.found: dict[tuple[str, int], list[Damage]] = {}
        """Each partition's damaged segments, as the last pass that covered it left them."""

    @property
    def background(self) -> bool:
        """Whether passes run in the background (``interval_s`` set)."""
        return bool(self.interval_s)

    def start(self) -> Scrubber:
        """Start the background passes (no-op without ``interval_s``)."""
        if self.background:
            self._thread = threading.Thread(
                target=self._run, name="tiered-log-scrubber", daemon=True
            )
            self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """End the pass under way (at its next segment or rate-limit wait) and the thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def run_now(self, topic: str | None = None) -> ScrubReport:
        """Run one pass now (of ``topic`` only, when given) and answer its report; waits
        for a pass under way first. Blocking: from a worker thread. The bucket's
        failures raise as :func:`scrub_bucket`'s."""
        with self._pass_lock:
            rep = self._run_pass(topic, self._progress, self._stop)
            self._record(rep, full=topic is None)
            return rep

    def _run(self) -> None:
        assert self.interval_s
        while not self._stop.wait(self.interval_s):
            try:
                with self._pass_lock:
                    rep = self._run_pass(None, self._progress, self._stop)
                    if self._stop.is_set():
                        return  # a cut-short pass says nothing about the rest
                    self._record(rep, full=True)
            except (TieredLogError, OSError) as exc:
                self.failures += 1
                self.current = None
                log.warning("scrub pass failed (tried again in %.0f s): %s", self.interval_s, exc)
                continue
            log.info(
                "scrub pass: %d segments checked, %d damaged (%d repaired), %d bytes read",
                rep.segments_done,
                len(rep.damaged),
                len(rep.damaged) - len(rep.unrepaired),
                rep.bytes_read,
            )

    def _record(self, rep: ScrubReport, *, full: bool) -> None:
        self.passes += 1
        self.bytes_total += rep.bytes_read
        self.segments_total += rep.segments_done
        for d in rep.damaged:
            if d.repaired is not None:
                self.repaired_total[d.tier] = self.repaired_total.get(d.tier, 0) + 1
        found = dict(self.found)
        for key in rep.partitions:
            found[key] = [d for d in rep.damaged if (d.topic, d.partition) == key]
        self.found = found
        if full:
            self.last = rep
        self.current = None

    def _progress(self, rep: ScrubReport) -> None:
        self.current = rep

    def partition_anomalies(self, topic: str, partition: int) -> list[dict[str, Any]]:
        """What the last pass that covered the partition found there (either tier)."""
        return [d.to_json() for d in self.found.get((topic, partition), [])]

    def anomalies(self, allowed: Callable[[str], bool] = lambda _topic: True) -> dict[str, Any]:
        """What the scrubber found, for ``GET /v1/archive/anomalies``: the last finished
        pass's damaged segments (each: where, its offsets, what is wrong, when found,
        whether it was repaired) and those the pass under way found so far, of the
        topics ``allowed`` names (a log that is no service topic's is shown when
        ``allowed("")``), with the passes' counts. Any thread (the reports are read once
        each)."""
        last, cur = self.last, self.current

        def shown(rep: ScrubReport | None) -> list[dict[str, Any]]:
            if rep is None:
                return []
            return [d.to_json() for d in list(rep.damaged) if allowed(_topic_name(d))]

        def summary(rep: ScrubReport | None) -> dict[str, Any] | None:
            if rep is None:
                return None
            return {
                "started_ms": rep.started_ms,
                "finished_ms": rep.finished_ms or None,
                "segments_total": rep.segments_total,
                "segments_checked": rep.segments_done,
                "segments_damaged": len(rep.damaged),
                "segments_repaired": len(rep.damaged) - len(rep.unrepaired),
                "bytes_read": rep.bytes_read,
            }

        return {
            "interval_s": self.interval_s,
            "passes": self.passes,
            "failures": self.failures,
            "last_pass": summary(last),
            "current_pass": summary(cur),
            "anomalies": shown(last),
            "found_in_current_pass": shown(cur),
        }

    def samples(
        self,
    ) -> Iterable[tuple[str, str, str, tuple[str, ...], list[tuple[tuple[str, ...], float]]]]:
        """``(name, kind, help, label names, samples)`` of the scrubber's metrics."""
        last = self.last
        cur = self.current
        by_topic: dict[tuple[str, str], int] = {}
        for d in last.unrepaired if last is not None else []:
            by_topic[d.topic, d.tier] = by_topic.get((d.topic, d.tier), 0) + 1
        missing = last.missing_keys if last is not None else {}
        return [
            (
                "tiered_log_scrub_passes_total",
                "counter",
                "Scrub passes finished.",
                (),
                [((), float(self.passes))],
            ),
            (
                "tiered_log_scrub_failures_total",
                "counter",
                "Scrub passes the bucket failed.",
                (),
                [((), float(self.failures))],
            ),
            (
                "tiered_log_scrub_bytes_total",
                "counter",
                "Bytes the scrubber read from either tier (finished passes).",
                (),
                [((), float(self.bytes_total))],
            ),
            (
                "tiered_log_scrub_segments_checked_total",
                "counter",
                "Segments the scrubber checked, either tier (finished passes).",
                (),
                [((), float(self.segments_total))],
            ),
            (
                "tiered_log_scrub_damaged_segments",
                "gauge",
                "Damaged segments the last full scrub pass found and could not repair, "
                "per topic and tier (local, remote).",
                ("topic", "tier"),
                [(k, float(n)) for k, n in sorted(by_topic.items())],
            ),
            (
                "tiered_log_scrub_repaired_segments_total",
                "counter",
                "Damaged segments the scrubber repaired from a good copy, per tier.",
                ("tier",),
                [((t,), float(n)) for t, n in sorted(self.repaired_total.items())],
            ),
            (
                "tiered_log_scrub_missing_key_segments",
                "gauge",
                "Encrypted segments whose key id the key ring lacks (last finished pass).",
                ("key_id",),
                [((k,), float(n)) for k, n in sorted(missing.items())],
            ),
            (
                "tiered_log_scrub_last_pass_timestamp_seconds",
                "gauge",
                "When the last scrub pass finished (0: none yet).",
                (),
                [((), (last.finished_ms / 1000) if last is not None else 0.0)],
            ),
            (
                "tiered_log_scrub_pass_segments_done",
                "gauge",
                "Segments the scrub pass under way has checked, of its total.",
                ("of",),
                [
                    (("done",), float(cur.segments_done if cur else 0)),
                    (("total",), float(cur.segments_total if cur else 0)),
                ],
            ),
        ]


__all__ = [
    "IN_FLIGHT_GRACE_MS",
    "Damage",
    "LogObjects",
    "PassFn",
    "ScrubReport",
    "Scrubber",
    "bucket_log_start",
    "list_logs",
    "log_id_of_key",
    "scrub_bucket",
    "scrub_log_copies",
    "topic_of",
]
