"""Scrubbing one partition's log, both tiers, and repairing what a good copy can mend
(the node's scrubber runs this for every partition it holds,
:mod:`tiered_log.service.scrubbing`).

What a pass over one partition does::

    local tier    every sealed local segment read back (at the node's scrub rate) and
                  every batch verified: framing, CRC-32C, offsets contiguous from the
                  segment's base to its end. A damaged one is repaired from the
                  archived copy of the same offsets when the bucket holds them: the
                  archived batches (verified as any remote read is) are written over
                  the segment's bytes that differ (:meth:`TieredLog.rewrite_sealed_segment
                  <tiered_log.partition.log.TieredLog.rewrite_sealed_segment>`)
    remote tier   on the partition's leader only (a single node leads all): every
                  archived copy of the log checked as ``archive scrub`` checks it
                  (:func:`~tiered_log.remote.scrub.scrub_log_copies`). A damaged or
                  missing data object is made again in place from this replica's local
                  batches (:func:`~tiered_log.remote.repair.rebuild_data_object`); a
                  damaged or missing manifest from its data object
                  (:func:`~tiered_log.remote.manifest.repair_manifest`; an encrypted
                  copy's with the data key this node kept of it). A missing manifest is
                  found by comparing the copies the partition serves with the listing.
                  Each repair is checked again before it counts.

Both tiers hold the very same batch bytes (a copy is a byte range of a local segment;
replicas receive the leader's batches unchanged), which is what lets either mend the
other. What cannot be mended (no other copy holds the offsets, a key the ring lacks, a
chunk that would not fit its manifest) is reported with the reason and left as it is.

Who may write: the bucket only from the partition's leader, under its tier's lock and
after asking its fence (a deposed leader repairs nothing); a local segment only through
its own log's lock. Blocking I/O; one pass per partition at a time (the node's scrubber
runs one pass at a time); safe beside shipping, reads and appends.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator

from ..errors import RemoteObjectNotFoundError, TieredLogError
from ..format import naming
from ..format.records import batch_header, batch_table
from ..local.segment import SegmentInfo
from ..remote.limits import RateLimiter
from ..remote.manifest import repair_manifest, scan_store
from ..remote.repair import RepairError, rebuild_data_object
from ..remote.scrub import Damage, ScrubReport, scrub_log_copies
from ..remote.storage import RemoteStorage
from .log import TieredLog

log = logging.getLogger(__name__)

NOT_REPAIRABLE = frozenset(("key_unavailable", "format"))
"""Kinds of damage no copy of the batches mends (a key the ring lacks, another format)."""


def scrub_partition(
    plog: TieredLog,
    topic: str,
    partition: int,
    report: ScrubReport,
    limiter: RateLimiter,
    *,
    repair: bool = True,
    peers: PeerBatches | None = None,
    progress: Callable[[ScrubReport], None] | None = None,
    cancel: threading.Event | None = None,
) -> None:
    """Scrub one partition's log (see the module docstring), adding to ``report``; the
    partition counts as covered (``report.partitions``) when the pass was not cut short.
    ``repair`` False: find and report only (a read-only node). ``peers``: the other
    replicas' batches, where a repair looks when neither tier here holds a good copy
    (a cluster's; None for a single node)."""
    _scrub_local(plog, topic, partition, report, limiter, repair, peers, progress, cancel)
    remote = plog.remote_tier
    if remote is not None and not plog.following:
        unlisted: set[str] = set()
        found = scrub_log_copies(
            remote.storage,
            remote.config.key_ring,
            plog.log_id,
            report,
            limiter,
            progress=progress,
            cancel=cancel,
            in_flight_grace_ms=0,  # only finished copies are checked: none is under way
            log_damage=True,
            served={s.id for s in remote.finished_segments},
            unlisted=unlisted,
        )
        found += _missing_manifests(plog, topic, partition, unlisted, report)
        for dmg in found:
            if repair:
                _repair_copy(plog, dmg, peers)
    if cancel is None or not cancel.is_set():
        report.partitions.add((topic, partition))


def _missing_manifests(
    plog: TieredLog, topic: str, partition: int, unlisted: set[str], report: ScrubReport
) -> list[Damage]:
    """The copies the partition serves whose manifest the pass's listing lacked and
    that still lack it (asked again under the tier's lock, so a copy retention deleted
    since the listing is not one): damage, since a replica or a restore that rebuilds
    its view from the bucket skips a copy without a manifest. Each is added to
    ``report``."""
    remote = plog.remote_tier
    if remote is None or not unlisted:
        return []
    out: list[Damage] = []
    with remote.lock:
        for seg in remote.finished_segments:
            if seg.id not in unlisted:
                continue
            rli_key = naming.segment_object_key(
                plog.log_id, seg.base_offset, seg.id, naming.RLI_SUFFIX
            )
            data_key = naming.data_key_of(rli_key)
            if _exists(remote.storage, rli_key):
                continue
            dmg = _found(topic, partition, plog, seg.base_offset, seg.next_offset, rli_key)
            dmg.add(
                "manifest",
                f"manifest {rli_key} is missing (the partition serves the copy; a rebuild "
                "from the bucket would skip it)",
            )
            if not _exists(remote.storage, data_key):
                dmg.add("data_missing", f"data object {data_key} is missing too")
            log.error("scrub: damaged archived copy %s", dmg.line())
            report.damaged.append(dmg)
            report.segments_total += 1
            report.segments_done += 1
            out.append(dmg)
    return out


def _found(
    topic: str,
    partition: int,
    plog: TieredLog,
    base: int,
    end: int,
    where: str,
    tier: str = "remote",
) -> Damage:
    """A new finding for the copy or segment ``[base, end)`` of ``plog`` at ``where``."""
    return Damage(
        topic, partition, plog.log_id, base, end, where, tier=tier, found_ms=int(time.time() * 1000)
    )


def _exists(storage: RemoteStorage, key: str) -> bool:
    try:
        storage.size(key)
        return True
    except RemoteObjectNotFoundError:
        return False


def _scrub_local(
    plog: TieredLog,
    topic: str,
    partition: int,
    report: ScrubReport,
    limiter: RateLimiter,
    repair: bool,
    peers: PeerBatches | None,
    progress: Callable[[ScrubReport], None] | None,
    cancel: threading.Event | None,
) -> None:
    segs = [s for s in plog.local_segments() if s.sealed]
    report.segments_total += len(segs)
    for seg in segs:
        if cancel is not None and cancel.is_set():
            return
        limiter.consume(seg.size, cancel)
        problem = _verify_local(seg)
        report.bytes_read += seg.size
        report.segments_done += 1
        if problem is None:
            report.segments_clean += 1
        elif not _still_there(plog, seg):
            report.segments_skipped += 1  # retention or a truncation took it meanwhile
        else:
            where = str(seg.store_path)
            dmg = _found(topic, partition, plog, seg.base_offset, seg.next_offset, where, "local")
            dmg.add("local", problem)
            log.error("scrub: damaged local segment %s", dmg.line())
            if repair:
                _repair_local(plog, seg, dmg, peers)
            report.damaged.append(dmg)
        if progress is not None:
            progress(report)


def _verify_local(seg: SegmentInfo) -> str | None:
    """What is wrong with a sealed local segment's batches, or None when all verify."""
    try:
        batches, end = scan_store(seg.store_path, seg.size, seg.base_offset)
    except FileNotFoundError:
        return f"local segment {seg.store_path.name} is missing"
    nxt = batches[-1].next_offset if batches else seg.base_offset
    if end == seg.size and nxt == seg.next_offset:
        return None
    return (
        f"local segment {seg.store_path.name} does not verify at byte {end} of {seg.size} "
        f"(CRC-32C, framing or offset order; expected offset {nxt})"
    )


def _still_there(plog: TieredLog, seg: SegmentInfo) -> bool:
    return any(
        s.base_offset == seg.base_offset and s.size == seg.size and s.sealed
        for s in plog.local_segments()
    )


PeerBatches = Callable[[int, int], tuple[bytes, str] | None]
"""Another replica's batches of ``[base, end)``: ``(the batches, which replica)``, None
when no other replica holds them all (the service's, over the cluster's HTTP)."""


def _reason(exc: BaseException) -> str:
    return exc.message if isinstance(exc, TieredLogError) else str(exc)


def _archive_then_peers(
    plog: TieredLog, seg: SegmentInfo, peers: PeerBatches | None, why: list[str]
) -> Iterator[tuple[str, bytes]]:
    """Good copies of a local segment's batches, best first: ``(from where, batches)``;
    why each source had none is added to ``why``."""
    remote = plog.remote_tier
    if remote is None:
        why.append("the partition has no remote tier")
    elif remote.remote_end < seg.next_offset:
        why.append(f"the archive ends at offset {remote.remote_end}")
    else:
        try:
            good = _archived_batches(plog, seg.base_offset, seg.next_offset)
        except (TieredLogError, OSError) as exc:
            why.append(_reason(exc))
        else:
            yield "from the archived copy", good
    yield from _peer_copy(peers, seg.base_offset, seg.next_offset, why)


def _peer_copy(
    peers: PeerBatches | None, base: int, end: int, why: list[str]
) -> Iterator[tuple[str, bytes]]:
    """Another replica's copy of ``[base, end)``, if one holds it."""
    if peers is None:
        return
    got = peers(base, end)
    if got is None:
        why.append("no other replica holds them")
    else:
        yield f"from replica {got[1]}", got[0]


def _repair_local(
    plog: TieredLog, seg: SegmentInfo, dmg: Damage, peers: PeerBatches | None
) -> None:
    """Mend a damaged local segment from the archived copy of its offsets, else from
    another replica."""
    why: list[str] = []
    for how, good in _archive_then_peers(plog, seg, peers, why):
        try:
            plog.rewrite_sealed_segment(seg.base_offset, good)
            again = _verify_local(seg)
            if again is not None:
                raise RepairError(f"still damaged after the rewrite: {again}")
        except (TieredLogError, OSError) as exc:
            why.append(_reason(exc))
            continue
        dmg.repaired = how
        log.warning("scrub: local segment %s repaired %s", seg.store_path, how)
        return
    dmg.unrepaired = (
        f"no good copy of offsets [{seg.base_offset}, {seg.next_offset}): " + "; ".join(why)
    )
    log.error("scrub: local segment %s not repaired: %s", seg.store_path, dmg.unrepaired)


def _archived_batches(plog: TieredLog, base: int, end: int) -> bytes:
    """The archived batches holding exactly the offsets ``[base, end)`` (read through the
    tier's reader: each verified, whether the local log holds them too or not)."""
    remote = plog.remote_tier
    assert remote is not None
    out = bytearray()
    off = base
    while off < end:
        got = remote.read_batches(off, end - off, 8 << 20, upto=end)
        if not got.data or got.next_offset <= off:
            raise RepairError(f"the archive holds no batches at offset {off}")
        if batch_header(got.data)[0] != off:
            raise RepairError(f"the archived batch holding offset {off} does not begin there")
        out += got.data
        off = got.next_offset
    return bytes(out)


def local_batches(plog: TieredLog, base: int, end: int) -> bytes | None:
    """This replica's local batches holding exactly the offsets ``[base, end)``, each
    verified; None when the local log does not hold them all (or they are damaged).
    What a repair takes from this replica, here or asked by another node."""
    out = bytearray()
    off = base
    for seg in plog.local_segments():
        if seg.next_offset <= off or seg.base_offset >= end:
            continue
        try:  # one read of the segment, verified as it is walked
            with open(seg.store_path, "rb") as f:
                data = os.pread(f.fileno(), seg.size, 0)
        except FileNotFoundError:
            return None
        batches, _ = batch_table(data, seg.base_offset)
        wanted = [b for b in batches if b.base_offset >= off and b.next_offset <= end]
        if not wanted or wanted[0].base_offset != off:
            return None
        first, last = wanted[0], wanted[-1]
        out += memoryview(data)[first.position : last.position + last.size]
        off = last.next_offset
        if off >= end:
            break
    return bytes(out) if off == end else None


def _repair_copy(plog: TieredLog, dmg: Damage, peers: PeerBatches | None) -> None:
    """Mend a damaged archived copy from this leader's local batches or another
    replica's (the data object), or from its data object (the manifest); see the module
    docstring. The good batches are gathered before the tier's lock is taken."""
    remote = plog.remote_tier
    seg_id = dmg.segment_id
    if remote is None or seg_id is None:
        return
    if NOT_REPAIRABLE & set(dmg.kinds):
        dmg.unrepaired = "no copy of the batches mends this (see the problems)"
        return
    if {"manifest", "data_missing"} <= set(dmg.kinds):
        dmg.unrepaired = (
            "both objects of the copy are missing: the manifest is made from the data "
            "object and the data object by its manifest's entries"
        )
        log.error("scrub: archived copy %s not repaired: %s", dmg.object_key, dmg.unrepaired)
        return
    storage = remote.storage
    rli_key = naming.segment_object_key(plog.log_id, dmg.base_offset, seg_id, naming.RLI_SUFFIX)
    end = dmg.next_offset if dmg.next_offset is not None else dmg.base_offset
    good: bytes | None = None
    how = "from its data object"
    why: list[str] = []
    try:
        if set(dmg.kinds) != {"manifest"}:
            good, how = local_batches(plog, dmg.base_offset, end), "from the local log"
            if good is None:
                why.append("they are no longer on this node's disk")
                peer = next(_peer_copy(peers, dmg.base_offset, end, why), None)
                if peer is not None:
                    how, good = peer
            if good is None:
                dmg.unrepaired = f"no good copy of offsets [{dmg.base_offset}, {end}): " + (
                    "; ".join(why)
                )
                log.error(
                    "scrub: archived copy %s not repaired: %s", dmg.object_key, dmg.unrepaired
                )
                return
        with remote.lock:
            if remote.fence is not None and not remote.fence():
                dmg.unrepaired = "this node no longer leads the partition"
                return
            if not any(s.id == seg_id for s in remote.finished_segments):
                dmg.unrepaired = "not a copy the partition serves (left to archive reconcile)"
                return
            if good is None:
                repair_manifest(
                    storage,
                    rli_key,
                    remote.config.chunk_bytes,
                    data_key=remote.data_keys.get(naming.data_key_of(rli_key)),
                    ring=remote.config.key_ring,
                )
            else:
                rebuild_data_object(
                    storage, rli_key, good, remote.config.key_ring, remote.config.storage_class
                )
        again = scrub_log_copies(
            storage,
            remote.config.key_ring,
            plog.log_id,
            ScrubReport(),
            RateLimiter(None),
            in_flight_grace_ms=0,
            only=(dmg.base_offset, seg_id),
        )
        if again:
            raise RepairError(f"still damaged after the repair: {'; '.join(again[0].problems)}")
    except (TieredLogError, OSError) as exc:
        dmg.unrepaired = _reason(exc)
        log.error("scrub: archived copy %s not repaired: %s", dmg.object_key, dmg.unrepaired)
        return
    dmg.repaired = how
    log.warning("scrub: archived copy %s repaired %s", dmg.object_key, how)


__all__ = ["NOT_REPAIRABLE", "PeerBatches", "local_batches", "scrub_partition"]
