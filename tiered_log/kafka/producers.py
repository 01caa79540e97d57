"""InitProducerId (API key 22, versions 0-4): a producer id for an idempotent producer.

A request with a null transactional id gets a new producer id (unique across the
service's life and, in a cluster, across nodes: :mod:`tiered_log.kafka.producer_ids`)
and epoch 0, as Kafka's broker answers an idempotent producer (versions 3+ may carry
the producer's current id and epoch: an idempotent producer gets a new id then too, as
in Kafka). The partitions check the batches' sequences
(:mod:`tiered_log.partition.producer_state`).

A transactional id (a transactional producer) is answered
TRANSACTIONAL_ID_AUTHORIZATION_FAILED: transactions are not supported. Why that code:
the response has no message field, and it is the one error both the Java client and
librdkafka treat as fatal at once, naming the transactional id (Java's
``TransactionalIdAuthorizationException``, librdkafka's "Failed to acquire
transactional PID from broker: Broker: Transactional Id authorization failed"), so a
transactional producer fails fast with a message pointing at its transactional id,
instead of retrying a retriable code (COORDINATOR_NOT_AVAILABLE) until its timeout or
reporting an "unexpected error" (INVALID_REQUEST). FindCoordinator for a transaction key
names the node asked (the group handlers), so the producer gets here.

Concurrency: the handler is a coroutine of the listener's loop; the id reservation
(a fsync, or etcd) runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from kio.schema.errors import ErrorCode

from ..errors import TieredLogError
from .backend import Backend
from .messages import Request
from .producer_ids import ProducerIds, etcd_reserver, file_reserver

log = logging.getLogger("tiered_log.kafka")

INIT_PRODUCER_ID = 22
PRODUCER_APIS: dict[int, tuple[str, int, int]] = {
    INIT_PRODUCER_ID: ("init_producer_id", 0, 4),
}
"""The producer APIs served: key -> (kio's module name, first and last version)."""


class ProducerHandlers:
    """InitProducerId over one backend (its settings' data directory, or its cluster's
    metadata store). Event-loop thread only; the ids are handed out thread-safely."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self._ids: ProducerIds | None = None

    def handlers(self) -> dict[int, Callable[[Request], Awaitable[dict[str, Any]]]]:
        """The handler of each producer API key."""
        return {INIT_PRODUCER_ID: self.init_producer_id}

    def ids(self) -> ProducerIds:
        """The id source: the cluster's metadata store in a cluster, else the data
        directory (created on first use, when the service has started)."""
        if self._ids is None:
            state = self.backend.state
            cluster = state.cluster
            if cluster is not None:
                self._ids = ProducerIds(etcd_reserver(cluster.store))
            else:
                self._ids = ProducerIds(file_reserver(state.settings.data_dir))
        return self._ids

    async def init_producer_id(self, req: Request) -> dict[str, Any]:
        out: dict[str, Any] = {
            "throttle_time": 0,
            "error_code": ErrorCode.none,
            "producer_id": -1,
            "producer_epoch": -1,
        }
        if req.body.transactional_id is not None:
            out["error_code"] = ErrorCode.transactional_id_authorization_failed
            log.info(
                "kafka InitProducerId for transactional id %r refused: transactions are "
                "not supported",
                req.body.transactional_id,
            )
            return out
        try:
            out["producer_id"] = await asyncio.to_thread(self.ids().next_id)
        except TieredLogError as exc:
            log.warning("kafka InitProducerId: no producer id: %s", exc.message)
            out["error_code"] = ErrorCode.coordinator_not_available
            return out
        out["producer_epoch"] = 0
        return out


__all__ = ["INIT_PRODUCER_ID", "PRODUCER_APIS", "ProducerHandlers"]
