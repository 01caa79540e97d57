"""The service's background scrubber: started with the app when ``scrub_interval_s`` is
set (and the service has a remote store), its figures exported in ``/metrics``.

A pass (:class:`~tiered_log.remote.scrub.Scrubber`) reads the whole bucket back at
``scrub_bytes_per_sec`` on a thread of its own, never on the event loop, and writes
nothing: it is safe beside shipping, reads and ``tiered-log archive`` commands, and on
every node of a cluster (each then reads the bucket: set it on one node). Damage is
logged as it is found and counted per topic in ``tiered_log_scrub_damaged_segments``.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..remote.crypto import KeyRing, key_ring
from ..remote.scrub import Scrubber
from .metrics import Family
from .state import ServiceState


def start_scrubber(state: ServiceState) -> Scrubber | None:
    """Start the background scrubber the settings ask for (None: off, or no store) and
    export its metrics. Call from the lifespan; stop it at shutdown (:meth:`Scrubber.stop`,
    blocking: from a worker thread)."""
    settings = state.settings
    storage = state.topics.storage
    if not settings.scrub_interval_s or storage is None:
        return None
    ring_file = settings.remote_encryption_key_file

    def ring() -> KeyRing | None:
        return None if ring_file is None else key_ring(ring_file)

    scrubber = Scrubber(storage, ring, settings.scrub_interval_s, settings.scrub_bytes_per_sec)

    def collect() -> Iterable[Family]:
        return [
            Family(name, kind, help, labels, tuple(samples))
            for name, kind, help, labels, samples in scrubber.samples()
        ]

    state.metrics.registry.add_collector(collect)
    state.scrubber = scrubber.start()
    return state.scrubber


__all__ = ["start_scrubber"]
