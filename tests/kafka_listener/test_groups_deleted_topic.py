"""A group's committed offsets of a deleted topic are gone with it, as in Kafka (whose
coordinator drops the offsets of deleted partitions): a topic created again under the
same name is read by the group from its start, not from the old topic's offsets, also
after a restart (the commit records name the topic by id). And ``groups list`` names a
group's coordinator as ``groups describe`` does. Real server, real clients."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
from service.conftest import ServerProcess

from .conftest import TIMEOUT_S, create_topic, kafka_server
from .test_groups import group_consumer, poll_until, produce_n
from .test_groups_cli import cli


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from kafka_server(tmp_path_factory, "groups-deleted")


def committed(server: ServerProcess, group: str, topic: str) -> int:
    c = group_consumer(server, group)
    try:
        got = c.committed([TopicPartition(topic, 0)], timeout=TIMEOUT_S)
        return int(got[0].offset)
    finally:
        c.close()


def offsets_shown(server: ServerProcess, group: str) -> list[tuple[str, int, int]]:
    r = httpx.get(f"{server.url}/v1/groups/{group}", timeout=TIMEOUT_S)
    if r.status_code == 404:
        return []
    assert r.status_code == 200, r.text
    return [(o["topic"], o["partition"], o["committed_offset"]) for o in r.json()["offsets"]]


def test_a_topic_created_again_is_read_from_its_start(server: ServerProcess) -> None:
    topic, group, other = "grp-gone", "g-gone", "grp-kept"
    create_topic(server, topic)
    create_topic(server, other)
    produce_n(server, topic, 1, 5)
    c = group_consumer(server, group)
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        done = c.commit(
            offsets=[TopicPartition(topic, 0, 5), TopicPartition(other, 0, 0)],
            asynchronous=False,
        )
        assert all(tp.error is None for tp in done)
    finally:
        c.close()
    assert committed(server, group, topic) == 5

    admin = AdminClient({"bootstrap.servers": server.kafka_bootstrap})
    admin.delete_topics([topic])[topic].result(TIMEOUT_S)
    assert committed(server, group, topic) < 0  # no offset: librdkafka's INVALID (-1001)
    assert offsets_shown(server, group) == [(other, 0, 0)]

    create_topic(server, topic)
    produce_n(server, topic, 1, 2)
    for restarted in (False, True):
        if restarted:
            server.stop()
            server.start()
        assert committed(server, group, topic) < 0
        assert offsets_shown(server, group) == [(other, 0, 0)]
    c = group_consumer(server, group)
    try:
        c.subscribe([topic])
        got = poll_until([c], lambda g: len(g[0]) == 2, 30, "the new topic's 2 records")
        assert sorted(got[0]) == [(0, 0), (0, 1)]
        c.commit(asynchronous=False)
    finally:
        c.close()
    assert committed(server, group, topic) == 2


def test_groups_list_names_the_coordinator_as_describe_does(server: ServerProcess) -> None:
    """On a single node too: both say the node id Kafka clients are told (0)."""
    topic, group = "grp-coord", "g-coord"
    create_topic(server, topic)
    c = group_consumer(server, group)
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        c.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    finally:
        c.close()
    listed = httpx.get(f"{server.url}/v1/groups", timeout=TIMEOUT_S).json()["groups"]
    described = httpx.get(f"{server.url}/v1/groups/{group}", timeout=TIMEOUT_S).json()
    assert described["coordinator"] == 0
    assert [g["coordinator"] for g in listed if g["group"] == group] == [0]
    out = cli(server, "groups", "list")
    assert out.returncode == 0, out.stderr
    rows = [line.split() for line in out.stdout.splitlines()]
    assert rows[0] == ["GROUP", "STATE", "MEMBERS", "COORDINATOR"]
    assert [r[3] for r in rows if r[0] == group] == ["0"]
