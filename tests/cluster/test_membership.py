"""Membership and ControllerElection against a real etcd: nodes appear and disappear
with their leases (a SIGKILLed node drops out within its TTL; a live one stays), a node
whose lease was lost in an etcd outage registers again, and the controller role passes
to another node when the controller's lease is revoked or expires, with a larger epoch
that fences the deposed controller's writes."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tiered_log.cluster.etcd import MetaStore
from tiered_log.cluster.etcd_process import EtcdProcess
from tiered_log.cluster.membership import ControllerElection, Membership

from .conftest import new_store
from .helpers import wait_until

pytestmark = pytest.mark.timeout(30)

NODE_PROC = Path(__file__).with_name("node_proc.py")


@contextmanager
def node_process(store: MetaStore, node_id: int, ttl_s: int) -> Iterator[subprocess.Popen[str]]:
    """A node (Membership + ControllerElection) in a child process, killed on exit."""
    cluster = store.prefix.rstrip("/").rsplit("/", 1)[1]
    proc = subprocess.Popen(
        [sys.executable, str(NODE_PROC), store.endpoint, cluster, str(node_id), str(ttl_s)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # bounded by the test's timeout
        assert line.startswith("ready"), line
        yield proc
    finally:
        proc.kill()
        proc.wait(10)


def test_nodes_register_and_leave(store: MetaStore) -> None:
    with Membership(store, 1, "http://a:1") as m1, Membership(store, 2, "http://b:2") as m2:
        assert m1.live_nodes() == {1: "http://a:1", 2: "http://b:2"}
        assert m1.holds_lease() and m1.lease_id != m2.lease_id
        v = store.get("nodes/2")
        assert v is not None and v.lease == m2.lease_id
    # close revoked the leases: gone at once, not after the TTL
    assert Membership(store, 3, "x").live_nodes() == {}


def test_keepalive_keeps_a_node(store: MetaStore) -> None:
    with Membership(store, 1, "http://a", lease_ttl_s=1) as m:
        lease = m.lease_id
        t0 = time.monotonic()
        while time.monotonic() - t0 < 3:  # three TTLs
            assert m.live_nodes() == {1: "http://a"}
            time.sleep(0.2)
        assert m.lease_id == lease and m.reregistrations == 0 and m.holds_lease()


def test_crashed_node_drops_out_within_its_ttl(store: MetaStore) -> None:
    with (
        Membership(store, 1, "http://a", lease_ttl_s=1) as m,
        node_process(store, 2, ttl_s=1) as child,
    ):
        wait_until(lambda: set(m.live_nodes()) == {1, 2}, 5, "the child registered")
        child.kill()
        took = wait_until(lambda: set(m.live_nodes()) == {1}, 5, "the killed node left")
        assert took < 3.5, took  # TTL 1 s + etcd's expiry check (0.5 s), with slack


def test_lease_lost_in_an_outage_registers_again(etcd: EtcdProcess) -> None:
    with (
        new_store(etcd, timeout_s=0.5) as store,
        Membership(store, 1, "http://a", lease_ttl_s=1) as m,
    ):
        first = m.lease_id
        etcd.pause()  # longer than the TTL: etcd expires the lease when it resumes
        try:
            wait_until(lambda: not m.holds_lease(), 3, "the node knows its lease may be gone")
            time.sleep(1.0)
        finally:
            etcd.resume()
        wait_until(lambda: m.reregistrations == 1, 5, "registered again")
        assert m.lease_id != first and m.holds_lease()
        wait_until(lambda: m.live_nodes() == {1: "http://a"}, 3, "listed again")
        v = store.get("nodes/1")
        assert v is not None and v.lease == m.lease_id


def test_membership_survives_an_etcd_restart(etcd: EtcdProcess) -> None:
    with new_store(etcd) as store, Membership(store, 1, "http://a", lease_ttl_s=2) as m:
        lease = m.lease_id
        etcd.restart()  # leases persist, and a new leader renews them all
        time.sleep(2.5)
        assert m.live_nodes() == {1: "http://a"}
        assert m.lease_id == lease and m.reregistrations == 0


def test_one_controller_and_failover_on_revoke(store: MetaStore) -> None:
    changes: list[tuple[int, bool, int | None]] = []
    with (
        Membership(store, 1, "a", lease_ttl_s=2) as m1,
        Membership(store, 2, "b", lease_ttl_s=2) as m2,
    ):
        e1 = ControllerElection(
            store, m1, interval_s=0.1, on_change=lambda c, e: changes.append((1, c, e))
        )
        e2 = ControllerElection(
            store, m2, interval_s=0.1, on_change=lambda c, e: changes.append((2, c, e))
        )
        assert e1.campaign() and not e2.campaign()
        with e1, e2:
            assert e1.is_controller and not e2.is_controller
            assert e1.controller_id() == e2.controller_id() == 1
            old = e1.fence
            v = store.get("controller")
            assert old is not None and v is not None and old.create_revision == v.create_revision
            assert store.create("assign/p0", {"leader": 1}, fence=old)
            lease1 = m1.lease_id
            assert lease1 is not None and store.revoke(lease1)  # node 1's lease ends
            wait_until(lambda: e2.is_controller, 3, "node 2 takes over")
            wait_until(lambda: not e1.is_controller, 3, "node 1 sees it lost")
            assert e1.controller_id() == 2
            new = e2.fence
            assert new is not None and new.create_revision > old.create_revision
            a = store.get("assign/p0")
            assert a is not None
            # the deposed controller's write is refused; the new one's passes
            assert not store.put_if("assign/p0", {"leader": 1}, a.mod_revision, fence=old)
            assert store.put_if("assign/p0", {"leader": 2}, a.mod_revision, fence=new)
            wait_until(lambda: m1.reregistrations == 1, 3, "node 1 registered again")
            time.sleep(0.3)
            assert not e1.is_controller and e2.is_controller  # no flapping back
    assert (1, True, old.create_revision) in changes and (2, True, new.create_revision) in changes
    assert (1, False, None) in changes


def test_controller_failover_when_it_crashes(store: MetaStore) -> None:
    with node_process(store, 9, ttl_s=1) as child, Membership(store, 1, "a", lease_ttl_s=1) as m:
        e = ControllerElection(store, m, interval_s=0.1)
        assert not e.campaign() and e.controller_id() == 9
        with e:
            time.sleep(0.5)
            assert not e.is_controller
            child.kill()
            took = wait_until(lambda: e.is_controller, 5, "node 1 takes over from node 9")
            assert took < 4.0, took  # TTL 1 s + expiry check + a campaign interval, slack
            assert e.controller_id() == 1


def test_resign_hands_over_at_once(store: MetaStore) -> None:
    with (
        Membership(store, 1, "a", lease_ttl_s=5) as m1,
        Membership(store, 2, "b", lease_ttl_s=5) as m2,
    ):
        e1 = ControllerElection(store, m1, interval_s=0.1)
        assert e1.campaign()
        with ControllerElection(store, m2, interval_s=0.1) as e2:
            e1.close()  # resigns: no wait for the 5 s lease
            assert not e1.is_controller
            took = wait_until(lambda: e2.is_controller, 2, "node 2 takes over")
            assert took < 1.0
        assert store.get("controller") is None  # e2 resigned on close


def test_a_restart_ends_its_dead_predecessors_registration(store: MetaStore) -> None:
    """A node restarted on the same host within its lease (its previous process
    SIGKILLed) ends that process's registration at once instead of waiting out the
    lease; a registration whose process still runs (the same id started twice) is left
    alone."""
    with node_process(store, 7, ttl_s=30) as child:
        wait_until(lambda: store.get("nodes/7") is not None, 5, "the child registered")
        again = Membership(store, 7, "http://n7", lease_ttl_s=30)
        assert not again.end_previous_incarnation()  # it lives: only its lease ends it
        assert store.get("nodes/7") is not None
        child.kill()
        child.wait(10)
    kept = store.get("nodes/7")
    assert kept is not None and kept.lease  # a 30 s lease outlives the process
    assert again.end_previous_incarnation()
    assert store.get("nodes/7") is None and store.get("controller") is None
    assert not again.end_previous_incarnation()  # nothing left to end
