"""Producer-id blocks reserved in a real etcd by compare-and-swap: reservers racing each
other (as the nodes of a cluster do, each with a store of its own) never get the same
block, and the blocks follow one another with no id left out of the record."""

from __future__ import annotations

import threading

from tiered_log.cluster.etcd import MetaStore
from tiered_log.kafka.producer_ids import ETCD_KEY, ProducerIds, etcd_reserver


def twin(store: MetaStore) -> MetaStore:
    """Another client of ``store``'s cluster (as another node has)."""
    return MetaStore(store.endpoint, store.prefix.rstrip("/").rsplit("/", 1)[1])


def test_racing_reservers_get_disjoint_blocks(store: MetaStore) -> None:
    stores = [store] + [twin(store) for _ in range(3)]
    firsts: list[list[int]] = [[] for _ in stores]

    def reserve(i: int) -> None:
        reserver = etcd_reserver(stores[i], attempts=100)
        for _ in range(10):
            firsts[i].append(reserver(7))

    threads = [threading.Thread(target=reserve, args=(i,)) for i in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    try:
        got = sorted(f for fs in firsts for f in fs)
        assert got == list(range(0, 7 * 40, 7))  # 40 blocks of 7, none twice, none lost
        value = store.get(ETCD_KEY)
        assert value is not None and value.value == {"next": 280}
    finally:
        for s in stores[1:]:
            s.close()


def test_ids_continue_after_the_last_reserved_block(store: MetaStore) -> None:
    """A node that starts again (a new ProducerIds) continues past every block reserved,
    also the rest of the block it was using: no id is handed out twice."""
    first = ProducerIds(etcd_reserver(store), block=10)
    assert [first.next_id() for _ in range(3)] == [0, 1, 2]
    other = twin(store)
    try:
        again = ProducerIds(etcd_reserver(other), block=10)
        assert again.next_id() == 10
        assert first.next_id() == 3  # the first goes on in its own block
    finally:
        other.close()
