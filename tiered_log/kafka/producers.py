"""The producer APIs: InitProducerId (API key 22, versions 0-4), a producer id for an
idempotent producer, and DescribeProducers (61, v0), the producers a partition knows.

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

DescribeProducers (Kafka's ``kafka-transactions describe-producers``, kafka-python's
``describe_producers``) answers, per partition named, at its leader (else
NOT_LEADER_OR_FOLLOWER, as any read), every idempotent producer the partition's state
knows (:meth:`~tiered_log.partition.log.PartitionLog.producers`): id, epoch, last
sequence, the max timestamp of its last batch; coordinator epoch and transaction start
offset -1 (there are no transactions). An unknown topic or partition:
UNKNOWN_TOPIC_OR_PARTITION.

Concurrency: the handlers are coroutines of the listener's loop; the id reservation
(a fsync, or etcd) and the read of a partition's producer state (under its lock, which
an append holds across its write) run in worker threads.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from kio.schema.errors import ErrorCode

from ..errors import TieredLogError
from .backend import Backend
from .errors import error_code, error_message
from .messages import Request
from .producer_ids import ProducerIds, etcd_reserver, file_reserver

log = logging.getLogger("tiered_log.kafka")

INIT_PRODUCER_ID = 22
DESCRIBE_PRODUCERS = 61
PRODUCER_APIS: dict[int, tuple[str, int, int]] = {
    INIT_PRODUCER_ID: ("init_producer_id", 0, 4),
    DESCRIBE_PRODUCERS: ("describe_producers", 0, 0),
}
"""The producer APIs served: key -> (kio's module name, first and last version)."""


class ProducerHandlers:
    """InitProducerId and DescribeProducers over one backend (its settings' data
    directory, or its cluster's metadata store). Event-loop thread only; the ids are
    handed out thread-safely."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self._ids: ProducerIds | None = None

    def handlers(self) -> dict[int, Callable[[Request], Awaitable[dict[str, Any]]]]:
        """The handler of each producer API key."""
        return {
            INIT_PRODUCER_ID: self.init_producer_id,
            DESCRIBE_PRODUCERS: self.describe_producers,
        }

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

    async def describe_producers(self, req: Request) -> dict[str, Any]:
        broker = self.backend.state.broker
        topics = []
        for t in req.body.topics:
            rows = []
            for index in t.partition_indexes:
                row: dict[str, Any] = {
                    "partition_index": index,
                    "error_code": ErrorCode.none,
                    "error_message": None,
                    "active_producers": (),
                }
                try:
                    plog = await broker.fetch_log(t.name, int(index))
                    active = await asyncio.to_thread(plog.producers)
                except TieredLogError as exc:
                    row.update(error_code=error_code(exc), error_message=error_message(exc))
                else:
                    row["active_producers"] = [
                        {
                            "producer_id": a.producer_id,
                            "producer_epoch": a.epoch,
                            "last_sequence": a.last_sequence,
                            "last_timestamp": a.last_timestamp,
                            "coordinator_epoch": -1,
                            "current_txn_start_offset": -1,
                        }
                        for a in active
                    ]
                rows.append(row)
            topics.append({"name": t.name, "partitions": rows})
        return {"throttle_time": 0, "topics": topics}


__all__ = ["DESCRIBE_PRODUCERS", "INIT_PRODUCER_ID", "PRODUCER_APIS", "ProducerHandlers"]
