"""A real three-node cluster through etcd outages (etcd SIGSTOPped past the lease TTL,
then SIGCONT): what live nodes must keep.

etcd expires every lease whose time ran out while it was paused, so every node's
registration (and the controller key) is gone when it wakes. The nodes register again
at once, and the controller gives them a lease TTL to do so before it treats any of
them as dead: no leader moves and no ISR shrinks because of the outage.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from tiered_log.client import Client
from tiered_log.cluster.dev import DevCluster, DevNode
from tiered_log.cluster.etcd import MetaStore
from tiered_log.cluster.etcd_process import EtcdProcess
from tiered_log.cluster.membership import ControllerElection, Membership
from tiered_log.cluster.metadata import ClusterMetadata
from tiered_log.errors import MetadataUnavailableError

from .conftest import dev_cluster, new_store
from .helpers import wait_until

pytestmark = pytest.mark.timeout(120)

LEASE_TTL_S = 2
PARTITIONS = 6
PAUSE_S = 2 * LEASE_TTL_S + 0.5
NODE_STALL_S = 1.2
"""Less than the lease TTL: a node stalled this long is alive."""
SETTINGS = {
    "TIERED_LOG_CLUSTER_LEASE_TTL_S": str(LEASE_TTL_S),
    # Above the node stall plus a parked fetch: the stalled leader's followers
    # are not late by its own clock (a leader stalled past this drops them, as
    # Kafka's does).
    "TIERED_LOG_REPLICA_LAG_TIME_MAX_MS": "4000",
    "TIERED_LOG_MAINTENANCE_INTERVAL_MS": "200",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    yield from dev_cluster(tmp_path_factory, SETTINGS)


def _etcd_view(c: DevCluster) -> tuple[MetaStore, ClusterMetadata]:
    store = MetaStore(c.etcd.client_url, "tiered-log", timeout_s=1.0)
    return store, ClusterMetadata(store)


def _live(store: MetaStore) -> set[int]:
    try:
        return set(Membership(store, 0, "").live_nodes())
    except MetadataUnavailableError:
        return set()


def _controller(store: MetaStore) -> int | None:
    try:
        return ControllerElection(store, Membership(store, 0, "")).controller_id()
    except MetadataUnavailableError:
        return None


def test_the_store_notes_when_etcd_stops_answering(etcd: EtcdProcess) -> None:
    """A request that gets no answer, or a late one, moves contact_since to its end; a
    refusal by etcd (a gone lease) is an answer."""
    store = new_store(etcd, timeout_s=0.5)
    store.slow_s = 0.3
    try:
        store.get("k")
        assert store.contact_since() == 0.0
        assert not store.keepalive(store.grant(5) + 12345)  # no such lease: an answer
        assert store.contact_since() == 0.0
        etcd.pause()
        try:
            before = time.monotonic()
            with pytest.raises(MetadataUnavailableError):
                store.get("k")
            assert store.contact_since() >= before + 0.5
        finally:
            etcd.resume()
        store.get("k")
        first = store.contact_since()
        etcd.pause()
        threading.Timer(0.4, etcd.resume).start()  # answered, but late
        store.get("k")
        assert store.contact_since() > first + 0.35
    finally:
        store.close()


def test_an_etcd_pause_past_the_lease_moves_no_leader_and_shrinks_no_isr(
    cluster: DevCluster,
) -> None:
    topic = "outage"
    r = httpx.post(
        cluster.nodes[1].url + "/v1/topics",
        timeout=15,
        json={"name": topic, "partitions": PARTITIONS, "replication_factor": 3},
    )
    assert r.status_code == 201, r.text
    store, meta = _etcd_view(cluster)
    try:
        wait_until(
            lambda: (
                all(len(st.isr) == 3 for st, _ in meta.partitions(topic).values())
                and len(meta.partitions(topic)) == PARTITIONS
            ),
            20,
            "every ISR full",
        )
        before = meta.partitions(topic)
        leaders = {k: st.leader for k, (st, _) in before.items()}
        assert len(set(leaders.values())) > 1, "leaders spread over the nodes"
        log_sizes = {i: n.log_path.stat().st_size for i, n in cluster.nodes.items()}
        changed: dict[str, str] = {}
        # Twice: etcd paused alone; then etcd paused and, as it wakes, one node stalled
        # for less than its lease (a GC pause): it learns of its lost lease last, after
        # the others have registered again and elected a controller.
        for stalled in (None, cluster.nodes[3]):
            cluster.etcd.pause()
            try:
                time.sleep(PAUSE_S - (NODE_STALL_S / 4 if stalled else 0))
                if stalled is not None:
                    stalled.pause()
                    time.sleep(NODE_STALL_S / 4)
            finally:
                cluster.etcd.resume()
                if stalled is not None:
                    time.sleep(NODE_STALL_S * 3 / 4)
                    stalled.resume()
            # The leases ran out during the pause: etcd drops them as it wakes, the
            # nodes register again and a controller is elected again.
            wait_until(
                lambda: _live(store) == set(cluster.nodes) and _controller(store) is not None,
                3 * LEASE_TTL_S,
                "every node registered, a controller",
            )
            # A lease TTL and more after that, nothing was written to any partition.
            deadline = time.monotonic() + LEASE_TTL_S + 1.5
            while time.monotonic() < deadline and not changed:
                changed = {
                    f"{k[0]}-{k[1]}": (
                        f"leader {before[k][0].leader}->{st.leader}, "
                        f"isr {list(before[k][0].isr)}->{list(st.isr)}"
                    )
                    for k, (st, rev) in meta.partitions(topic).items()
                    if rev != before[k][1]
                }
                time.sleep(0.1)
            assert not changed, (
                f"partition states changed after an etcd pause of {PAUSE_S}s"
                f"{' and a node stalled' if stalled else ''}: {changed}"
            )
        regone = [
            i
            for i, n in cluster.nodes.items()
            if b"is gone; registering again" in n.log_path.read_bytes()[log_sizes[i] :]
        ]
        assert regone, "the pauses outlived the leases (else this test checks nothing)"
        for i, n in cluster.nodes.items():
            assert n.alive, f"node {i} died: {n.log_tail()}"
    finally:
        store.close()


def test_while_etcd_is_down_the_cluster_view_is_served_stale_and_clients_route(
    cluster: DevCluster,
) -> None:
    """``GET /v1/cluster`` answers the last view read, marked stale with its age, and a
    client that starts during the outage finds every leader and produces acks=all."""
    topic = "stale-view"
    r = httpx.post(
        cluster.nodes[1].url + "/v1/topics",
        timeout=15,
        json={"name": topic, "partitions": 3, "replication_factor": 3},
    )
    assert r.status_code == 201, r.text
    store, meta = _etcd_view(cluster)
    try:
        wait_until(
            lambda: all(len(st.isr) == 3 for st, _ in meta.partitions(topic).values()),
            20,
            "every ISR full",
        )
        leaders = {p: st.leader for (_, p), (st, _) in meta.partitions(topic).items()}

        def view_of(n: DevNode) -> dict[int, int]:
            v = httpx.get(n.url + "/v1/cluster", timeout=5).json()
            return {p["partition"]: p["leader"] for p in v["partitions"] if p["topic"] == topic}

        # every node has read the topic's partitions before etcd goes (its last view)
        for n in cluster.nodes.values():

            def has_the_view(n: DevNode = n) -> bool:
                return view_of(n) == leaders

            wait_until(has_the_view, 20, f"node {n.node_id}'s view")
        cluster.etcd.pause()
        try:
            time.sleep(1.2)
            for n in cluster.nodes.values():
                started = time.monotonic()
                r = httpx.get(n.url + "/v1/cluster", timeout=5)
                assert r.status_code == 200, r.text
                # etcd's client gives up after 2 s: an answer before that did not wait
                assert time.monotonic() - started < 1.9, "it waited for etcd"
                view = r.json()
                assert view["stale"] is True and view["metadata_age_ms"] >= 1000, view
                assert view["controller_id"] is not None
                got = {
                    p["partition"]: p["leader"] for p in view["partitions"] if p["topic"] == topic
                }
                assert got == leaders
            with Client(cluster.urls, retry_timeout_s=10) as client:
                for p in leaders:
                    [offset] = client.produce(topic, p, [b"during the outage"], acks="all")
                    got_back = client.fetch(topic, p, offset)
                    assert [rec.value for rec in got_back.records] == [b"during the outage"]
        finally:
            cluster.etcd.resume()
        wait_until(
            lambda: (
                httpx.get(cluster.nodes[1].url + "/v1/cluster", timeout=5).json()["stale"] is False
            ),
            10,
            "a fresh view once etcd is back",
        )
        fresh = httpx.get(cluster.nodes[1].url + "/v1/cluster", timeout=5).json()
        assert fresh["metadata_age_ms"] < 1000
    finally:
        store.close()
