"""Kafka's consumer groups over the service's log: the coordinator of the classic group
protocol (:mod:`.coordinator`), the committed offsets in the internal topic
``__consumer_offsets`` (:mod:`.offsets`) and the Kafka APIs that reach them
(:mod:`.handlers`)."""

from .coordinator import GroupCoordinator, coordinator_of
from .offsets import OFFSETS_TOPIC, Committed, OffsetStore, is_internal

__all__ = [
    "OFFSETS_TOPIC",
    "Committed",
    "GroupCoordinator",
    "OffsetStore",
    "coordinator_of",
    "is_internal",
]
