"""Re-wrapping every data key of a bucket with the key ring's active key
(``tiered-log archive rewrap``), so that an older key-encryption key can be retired.

Only manifests change (:func:`~tiered_log.remote.manifest.rewrap_manifest`: the data
key unwrapped with the key it names, wrapped again with the active one, the checksum
made again); no data object is read or written. Safe while services ship to the same
bucket: a manifest is written only after its copy committed, and nothing but a rewrap
rewrites a committed one (a damaged one is left as it is and reported); two rewraps of
one manifest both leave a valid wrapping of the same data key. A segment deleted by
retention while its manifest is rewrapped would leave the new manifest alone, so after
each put the data object is looked for and, when it is gone, the manifest deleted too.
A segment a service ships while the pass runs may still be wrapped with the key the
service had active then: passes repeat until one finds nothing left to do (services
re-read their key ring file when it changes, so after the ring's edit they wrap with
the new key).

Blocking I/O on the given store; one call at a time per store is enough (any thread).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import RemoteCorruptionError, RemoteObjectNotFoundError
from ..format import naming
from .crypto import KeyRing, KeyUnavailableError
from .manifest import manifest_encryption, rewrap_manifest
from .storage import RemoteStorage

log = logging.getLogger(__name__)

MAX_PASSES = 5
"""Passes over the bucket at most (each after the first only finds segments shipped
while the one before ran)."""


@dataclass
class RewrapReport:
    """What a rewrap did: counts of manifests, and the problems (one line each)."""

    active: str = ""
    rewrapped: int = 0
    already: int = 0
    unencrypted: int = 0
    passes: int = 0
    problems: list[str] = field(default_factory=list)
    by_key: dict[str, int] = field(default_factory=dict)
    """After the last pass: encrypted manifests per key id."""

    def to_json(self) -> dict[str, object]:
        return {
            "active_key": self.active,
            "rewrapped": self.rewrapped,
            "already_active": self.already,
            "unencrypted": self.unencrypted,
            "passes": self.passes,
            "manifests_by_key": dict(sorted(self.by_key.items())),
            "problems": list(self.problems),
        }


def _manifests(storage: RemoteStorage, prefix: str) -> list[str]:
    return sorted(
        o.key
        for o in storage.list(prefix)
        if o.key.endswith(naming.RLI_SUFFIX) and naming.parse_segment_object_key(o.key)
    )


def _one(storage: RemoteStorage, ring: KeyRing, key: str, report: RewrapReport) -> bool:
    """Rewrap one manifest; whether it was changed."""
    try:
        blob = storage.get(key)
    except RemoteObjectNotFoundError:
        return False  # deleted meanwhile (retention)
    new = rewrap_manifest(blob, key, ring)
    if new is None:
        return False
    storage.put(key, new)
    data_key = naming.data_key_of(key)
    try:
        storage.size(data_key)
    except RemoteObjectNotFoundError:
        storage.delete([key])  # retention deleted the segment while we rewrote it
        return False
    report.rewrapped += 1
    return True


def rewrap_bucket(
    storage: RemoteStorage,
    ring: KeyRing,
    prefix: str = "",
    progress: Callable[[str], None] | None = None,
) -> RewrapReport:
    """Rewrap every manifest under ``prefix`` with ``ring``'s active key (see the module
    docstring). A manifest that cannot be (damaged, or its key not in the ring) is a
    problem line and left as it is. RemoteStorageError if the bucket fails."""
    report = RewrapReport(active=ring.active_id)
    failed: set[str] = set()
    for n in range(1, MAX_PASSES + 1):
        report.passes = n
        changed = 0
        keys = _manifests(storage, prefix)
        for key in keys:
            if key in failed:
                continue
            try:
                changed += _one(storage, ring, key, report)
            except (KeyUnavailableError, RemoteCorruptionError) as exc:
                failed.add(key)
                report.problems.append(f"{key}: {exc.message}")
        if progress is not None:
            progress(f"pass {n}: {len(keys)} manifests, {changed} rewrapped")
        if not changed:
            break
    report.by_key, report.already, report.unencrypted = {}, 0, 0
    for key in _manifests(storage, prefix):
        try:
            found = manifest_encryption(storage.get(key), key)
        except RemoteObjectNotFoundError:
            continue
        except RemoteCorruptionError:
            continue  # already a problem line
        if found is None:
            report.unencrypted += 1
            continue
        report.by_key[found[0]] = report.by_key.get(found[0], 0) + 1
        if found[0] == report.active:
            report.already += 1
    report.already -= report.rewrapped
    return report


__all__ = ["MAX_PASSES", "RewrapReport", "rewrap_bucket"]
