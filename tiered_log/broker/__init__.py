"""The broker layer between the partition logs and the protocol front ends (Kafka's
``ReplicaManager`` and its purgatories): :class:`Broker` (produce, a consumer's fetch, a
follower's fetch, as async calls every front end awaits; its own executors) and
:mod:`~tiered_log.broker.parking` (where requests wait, keyed by partition).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_exports

if TYPE_CHECKING:
    from .broker import Acks, Broker, ProduceTarget
    from .parking import Channel, Parking

# Imported on first use: a module of the package (``topic_meta``'s names, which the HTTP
# models use) must not import the whole broker.
__getattr__, __dir__ = lazy_exports(
    __name__,
    globals(),
    {
        "Acks": ".broker",
        "Broker": ".broker",
        "ProduceTarget": ".broker",
        "Channel": ".parking",
        "Parking": ".parking",
    },
)

__all__ = ["Acks", "Broker", "Channel", "Parking", "ProduceTarget"]
