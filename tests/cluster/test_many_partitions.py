"""A node leading many partitions (real processes: etcd from the wheel, three ``tiered-log
serve`` nodes): its followers' fetches parked at the log end of idle partitions, and the
``acks=all`` produces waiting for their high watermark, wait on the event loop, not in
worker threads. Before, each held one of the server's few worker threads (six on two
cores) for up to ``replica_fetch_wait_max_ms``: with a dozen partitions an ``acks=all``
produce to one of them waited behind the parked fetches of the others (a defect: 21
acknowledgments in 8 s instead of ~370 with one producer and 12 partitions).

The followers here park for 4 s at a time; a produce, and its ``acks=all`` wait, must
not wait for them: each of 20 produces is answered within the client's 2 s timeout
(with the threads held it is answered only when a parked fetch returns)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tiered_log.client import Client
from tiered_log.cluster.dev import DevCluster

from .conftest import dev_cluster
from .helpers import wait_until

pytestmark = pytest.mark.timeout(180)

PARTITIONS = 12
SETTINGS = {
    "TIERED_LOG_CLUSTER_LEASE_TTL_S": "3",
    "TIERED_LOG_REPLICA_LAG_TIME_MAX_MS": "30000",
    "TIERED_LOG_REPLICA_FETCH_WAIT_MAX_MS": "4000",
    "TIERED_LOG_REPLICATION_TIMEOUT_MS": "20000",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    yield from dev_cluster(tmp_path_factory, SETTINGS)


def test_acks_all_is_not_held_behind_parked_follower_fetches(cluster: DevCluster) -> None:
    with Client(",".join(cluster.urls), retry_timeout_s=30) as admin:
        admin.create_topic("many", PARTITIONS, replication_factor=3)

        def full_isrs() -> bool:
            info = admin.cluster()
            assert info is not None
            parts = [p for p in info["partitions"] if p["topic"] == "many"]
            return len(parts) == PARTITIONS and all(len(p["isr"]) == 3 for p in parts)

        wait_until(full_isrs, 60, "every partition's full ISR")

    def leader_serves() -> bool:
        """Partition 0's leader has taken its role (the metadata names it first; an
        empty log's new leader reads the bucket before it leads)."""
        return any(
            httpx.get(f"{u}/v1/topics/many/partitions/0/bounds", timeout=5).status_code == 200
            for u in cluster.urls
        )

    wait_until(leader_serves, 60, "partition 0's leader serving")
    # Every partition's followers now park at their leader's log end for 4 s at a time.
    with Client(",".join(cluster.urls), timeout=2.0, retry_timeout_s=0) as c:
        offsets = [c.produce("many", 0, [f"r{i}".encode()], acks="all")[0] for i in range(20)]
        assert offsets == list(range(20))
        got = [(r.offset, r.value) for page in c.consume("many", 0, 0) for r in page.records]
    assert got == [(i, f"r{i}".encode()) for i in range(20)]
