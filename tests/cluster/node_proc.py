"""A cluster node in a process of its own, for the tests to SIGKILL (a crash: no
revoke, no resign). Usage: ``python node_proc.py ENDPOINT CLUSTER NODE_ID TTL_S``.
Registers, campaigns once (then keeps campaigning), prints ``ready <is_controller>``
and runs until killed."""

from __future__ import annotations

import sys
import time

from tiered_log.cluster.etcd import MetaStore
from tiered_log.cluster.membership import ControllerElection, Membership


def main() -> None:
    endpoint, cluster, node_id, ttl = sys.argv[1:5]
    store = MetaStore(endpoint, cluster)
    membership = Membership(store, int(node_id), f"http://node{node_id}", lease_ttl_s=int(ttl))
    membership.start()
    election = ControllerElection(store, membership)
    won = election.campaign()
    election.start()
    print(f"ready {won}", flush=True)
    while True:
        time.sleep(1)


if __name__ == "__main__":
    main()
