"""MetaStore against a real etcd: create-if-absent, compare-and-swap on mod_revision
(exactly one of concurrent writers wins; a read-modify-CAS loop loses no update),
fenced writes, prefixes, leases, polling, and the error contract."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from tiered_log.cluster.etcd import Fence, MetaStore, Versioned
from tiered_log.cluster.etcd_process import EtcdProcess
from tiered_log.errors import LeaseNotFoundError, MetadataUnavailableError

from .conftest import new_store
from .helpers import wait_until

pytestmark = pytest.mark.timeout(30)


def test_create_only_if_absent(store: MetaStore) -> None:
    assert store.get("topics/a") is None
    assert store.create("topics/a", {"partitions": 3})
    assert not store.create("topics/a", {"partitions": 5})
    v = store.get("topics/a")
    assert v is not None
    assert v.key == "topics/a" and v.value == {"partitions": 3}
    assert v.create_revision == v.mod_revision > 0 and v.version == 1 and v.lease == 0


def test_put_if_compares_mod_revision(store: MetaStore) -> None:
    assert not store.put_if("k", {"n": 1}, 12345)  # absent: mod_revision is 0
    assert store.put_if("k", {"n": 1}, 0)  # 0: only if absent
    assert not store.put_if("k", {"n": 9}, 0)
    v1 = store.get("k")
    assert v1 is not None
    assert store.put_if("k", {"n": 2}, v1.mod_revision)
    assert not store.put_if("k", {"n": 3}, v1.mod_revision)  # stale: lost the race
    v2 = store.get("k")
    assert v2 is not None and v2.value == {"n": 2}
    assert v2.mod_revision > v1.mod_revision and v2.create_revision == v1.create_revision
    assert v2.version == 2


def test_concurrent_put_if_exactly_one_wins(store: MetaStore) -> None:
    assert store.create("leader/p0", {"leader": None})
    v = store.get("leader/p0")
    assert v is not None
    n = 8
    barrier = threading.Barrier(n)
    results: dict[int, bool] = {}

    def attempt(i: int) -> None:
        barrier.wait()
        results[i] = store.put_if("leader/p0", {"leader": i}, v.mod_revision)

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    winners = [i for i, won in results.items() if won]
    assert len(results) == n and len(winners) == 1
    now = store.get("leader/p0")
    assert now is not None and now.value == {"leader": winners[0]}


def test_read_modify_cas_loses_no_update(store: MetaStore) -> None:
    assert store.create("counter", {"n": 0})
    threads_n, per_thread = 4, 15
    conflicts = [0]

    def bump() -> None:
        for _ in range(per_thread):
            while True:
                v = store.get("counter")
                assert v is not None
                if store.put_if("counter", {"n": v.value["n"] + 1}, v.mod_revision):
                    break
                conflicts[0] += 1

    threads = [threading.Thread(target=bump) for _ in range(threads_n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    v = store.get("counter")
    assert v is not None and v.value == {"n": threads_n * per_thread}
    assert v.version == threads_n * per_thread + 1


def test_delete_if(store: MetaStore) -> None:
    assert not store.delete_if("k", 0)
    assert store.create("k", [1, 2])
    v = store.get("k")
    assert v is not None and v.value == [1, 2]
    assert not store.delete_if("k", v.mod_revision + 1000)
    assert store.delete_if("k", v.mod_revision)
    assert store.get("k") is None
    assert not store.delete_if("k", v.mod_revision)


def test_fence_refuses_writes_of_a_past_epoch(store: MetaStore) -> None:
    assert store.create("controller", {"node_id": 1})
    c1 = store.get("controller")
    assert c1 is not None
    fence1 = Fence("controller", c1.create_revision)
    assert store.put_if("assign/p0", {"leader": 1}, 0, fence=fence1)
    # controller 1 is deposed: its key goes, controller 2 creates its own
    assert store.delete_if("controller", c1.mod_revision)
    assert not store.create("assign/p1", {"leader": 1}, fence=fence1)  # no controller key
    assert store.create("controller", {"node_id": 2})
    c2 = store.get("controller")
    assert c2 is not None and c2.create_revision > c1.create_revision
    a = store.get("assign/p0")
    assert a is not None
    assert not store.put_if("assign/p0", {"leader": 1}, a.mod_revision, fence=fence1)
    assert not store.delete_if("assign/p0", a.mod_revision, fence=fence1)
    fence2 = Fence("controller", c2.create_revision)
    assert store.put_if("assign/p0", {"leader": 2}, a.mod_revision, fence=fence2)
    assert store.get("assign/p1") is None


def test_get_prefix_is_scoped(shared_etcd: EtcdProcess, store: MetaStore) -> None:
    for key in ("nodes/1", "nodes/2", "nodes2/x", "topics/a"):
        assert store.create(key, {"k": key})
    got = store.get_prefix("nodes/")
    assert sorted(got) == ["nodes/1", "nodes/2"]
    assert all(isinstance(v, Versioned) and v.value == {"k": k} for k, v in got.items())
    assert len(store.get_prefix("")) == 4
    with new_store(shared_etcd) as other:  # another cluster sees none of it
        assert other.get_prefix("") == {} and other.get("nodes/1") is None


def test_values_round_trip_as_json(store: MetaStore) -> None:
    value: dict[str, Any] = {"s": "é✓", "n": 2**62, "f": 1.5, "l": [None, True], "d": {}}
    assert store.create("v", value)
    v = store.get("v")
    assert v is not None and v.value == value


def test_lease_lifecycle(store: MetaStore) -> None:
    lease = store.grant(5)
    assert 0 < store.time_to_live(lease) <= 5
    short = store.grant(1)
    assert store.time_to_live(short) in (0, 1)  # whole seconds left: "0" is omitted
    assert store.revoke(short)
    store.put("eph", {"x": 1}, lease=lease)
    v = store.get("eph")
    assert v is not None and v.lease == lease
    assert store.keepalive(lease)
    assert store.revoke(lease)
    assert store.get("eph") is None
    assert store.time_to_live(lease) == -1
    assert not store.keepalive(lease)
    assert not store.revoke(lease)
    with pytest.raises(LeaseNotFoundError) as err:
        store.put("eph", {"x": 2}, lease=lease)
    assert isinstance(err.value, MetadataUnavailableError) and err.value.code == "lease_not_found"
    with pytest.raises(LeaseNotFoundError):
        store.create("eph2", {"x": 2}, lease=lease)
    assert store.get("eph2") is None


def test_lease_expiry_deletes_keys_and_keepalive_keeps_them(store: MetaStore) -> None:
    kept, left = store.grant(1), store.grant(1)
    store.put("kept", 1, lease=kept)
    store.put("left", 1, lease=left)
    t0 = time.monotonic()
    left_gone_at = None
    while time.monotonic() - t0 < 2.5:  # "kept" renewed every 0.25 s, "left" never
        assert store.keepalive(kept)
        assert store.get("kept") is not None
        if left_gone_at is None and store.get("left") is None:
            left_gone_at = time.monotonic() - t0
        time.sleep(0.25)
    assert left_gone_at is not None and 0.5 <= left_gone_at <= 2.0, left_gone_at
    assert not store.keepalive(left)
    assert store.revoke(kept)


def test_put_if_keeps_a_keys_lease(store: MetaStore) -> None:
    lease = store.grant(5)
    assert store.create("c", {"n": 1}, lease)
    v = store.get("c")
    assert v is not None
    assert store.put_if("c", {"n": 2}, v.mod_revision)
    v2 = store.get("c")
    assert v2 is not None and v2.lease == lease
    store.revoke(lease)
    assert store.get("c") is None


def test_poll_prefix_reports_changes(store: MetaStore) -> None:
    seen: list[dict[str, Any]] = []
    poller = store.poll_prefix(
        "nodes/", lambda snap: seen.append({k: v.value for k, v in snap.items()}), interval_s=0.05
    )
    try:
        wait_until(lambda: seen == [{}], 3, "the first snapshot")
        assert store.create("nodes/1", "a")
        wait_until(lambda: seen[-1] == {"nodes/1": "a"}, 3, "an added key")
        v = store.get("nodes/1")
        assert v is not None and store.put_if("nodes/1", "b", v.mod_revision)
        wait_until(lambda: seen[-1] == {"nodes/1": "b"}, 3, "a changed key")
        assert store.create("other", 1)
        v = store.get("nodes/1")
        assert v is not None and store.delete_if("nodes/1", v.mod_revision)
        wait_until(lambda: seen[-1] == {}, 3, "a removed key")
    finally:
        poller.stop()
    assert seen == [{}, {"nodes/1": "a"}, {"nodes/1": "b"}, {}]  # no repeats, no "other"


def test_closed_store_refuses(shared_etcd: EtcdProcess) -> None:
    store = new_store(shared_etcd)
    store.get("x")
    store.close()
    with pytest.raises(MetadataUnavailableError) as err:
        store.get("x")
    assert not err.value.retriable


def test_bad_endpoint() -> None:
    with pytest.raises(ValueError):
        MetaStore("127.0.0.1:2379", "c")
    with pytest.raises(ValueError):
        MetaStore("http://127.0.0.1:2379", "a/b")
