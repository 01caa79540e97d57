"""The broker layer between the partition logs and the protocol front ends (Kafka's
``ReplicaManager`` and its purgatories): :class:`Broker` (produce, a consumer's fetch, a
follower's fetch, as async calls every front end awaits; its own executors) and
:mod:`~tiered_log.broker.parking` (where requests wait, keyed by partition).
"""

from .broker import Acks, Broker, ProduceTarget
from .parking import Channel, Parking

__all__ = ["Acks", "Broker", "Channel", "Parking", "ProduceTarget"]
