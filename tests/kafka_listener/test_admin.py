"""CreateTopics, DeleteTopics, OffsetForLeaderEpoch and ListOffsets' special timestamps
against a real server: librdkafka's AdminClient (confluent-kafka) and kafka-python's
KafkaAdminClient create and delete topics; raw requests check the exact answers; a
tiered topic (small segments, no local retention) answers -3, -4 and -5 from both tiers;
in a real three-node cluster any node creates and deletes, only the leader answers
OffsetForLeaderEpoch, and a confluent-kafka consumer keeps its position across a leader
change (librdkafka validates it with OffsetForLeaderEpoch)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from cluster.conftest import dev_cluster
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    NewPartitions,
    NewTopic,
)
from kio.schema.errors import ErrorCode
from service.conftest import ServerProcess

from tiered_log.cluster.dev import DevCluster
from tiered_log.kafka.admin import CREATE_TOPICS, DELETE_TOPICS, OFFSET_FOR_LEADER_EPOCH
from tiered_log.kafka.messages import LIST_OFFSETS, METADATA, PRODUCE

from .clients import Rec, confluent_consume, confluent_consumer, confluent_produce, poll_messages
from .conftest import KafkaWire, bounds, create_topic, kafka_server, wait_until
from .test_protocol import batch, produce_body

pytestmark = pytest.mark.timeout(180)

BASE_TS = 1_760_000_000_000


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A single node whose remote tier ships quickly."""
    bucket = tmp_path_factory.mktemp("admin-bucket")
    yield from kafka_server(
        tmp_path_factory, "kafka-admin", remote_url=str(bucket), ship_interval_ms="50"
    )


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10_000})


def _created(admin: AdminClient, *topics: NewTopic, validate_only: bool = False) -> dict[str, Any]:
    """Each topic's outcome: None (created) or its KafkaError."""
    return _outcomes(
        admin.create_topics(list(topics), validate_only=validate_only, request_timeout=20)
    )


def _outcomes(futures: dict[Any, Any]) -> dict[Any, Any]:
    """Each admin future's result, or the KafkaError it failed with, by its key."""
    out: dict[Any, Any] = {}
    for key, f in futures.items():
        try:
            out[key] = f.result(timeout=30)
        except KafkaException as exc:
            out[key] = exc.args[0]
    return out


def _deleted(admin: AdminClient, *names: str) -> dict[str, Any]:
    return _outcomes(admin.delete_topics(list(names), request_timeout=20))


def _http_topic(server_url: str, name: str) -> httpx.Response:
    return httpx.get(f"{server_url}/v1/topics/{name}", timeout=10)


def _listed(bootstrap: str) -> set[str]:
    """The topics a Metadata request for every topic lists."""
    body = {"topics": None, "allow_auto_topic_creation": False}
    with KafkaWire(bootstrap) as w:
        resp = w.call(METADATA, 12, body | {"include_topic_authorized_operations": False})
    return {t.name for t in resp.topics}


def create_body(
    name: str, partitions: int = -1, rf: int = -1, configs: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "topics": [
            {
                "name": name,
                "num_partitions": partitions,
                "replication_factor": rf,
                "assignments": [],
                "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
            }
        ],
        "timeout": 20_000,
        "validate_only": False,
    }


def epoch_body(topic: str, epoch: int, current: int = -1, partition: int = 0) -> dict[str, Any]:
    return {
        "replica_id": -1,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {"partition": partition, "current_leader_epoch": current, "leader_epoch": epoch}
                ],
            }
        ],
    }


def epoch_end(w: KafkaWire, *args: Any, version: int = 4, **kw: Any) -> tuple[int, int, int]:
    p = w.call(OFFSET_FOR_LEADER_EPOCH, version, epoch_body(*args, **kw)).topics[0].partitions[0]
    return p.error_code, p.leader_epoch, p.end_offset


def list_offset(w: KafkaWire, topic: str, ts: int, version: int = 9) -> tuple[int, int, int]:
    p = list_offsets_partition(w, topic, ts, version)
    return p.error_code, p.offset, p.timestamp


def list_offsets_partition(w: KafkaWire, topic: str, ts: int, version: int = 9) -> Any:
    """The answer for partition 0 of a raw ListOffsets of ``topic`` at ``ts``."""
    body = {
        "replica_id": -1,
        "isolation_level": 0,
        "topics": [
            {
                "name": topic,
                "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": ts}],
            }
        ],
        "timeout": 10_000,
    }
    return w.call(LIST_OFFSETS, version, body).topics[0].partitions[0]


# ---- CreateTopics / DeleteTopics on a single node ------------------------------------------


def test_confluent_admin_creates_topics_then_clients_use_them(server: ServerProcess) -> None:
    admin = _admin(server.kafka_bootstrap)
    got = _created(
        admin,
        NewTopic("adm-a", 3, 1, config={"retention.ms": "3600000", "segment.bytes": "1048576"}),
        NewTopic("adm-default", -1, -1),
    )
    assert got == {"adm-a": None, "adm-default": None}
    desc = _http_topic(server.url, "adm-a").json()
    assert desc["partitions"] == 3
    assert desc["config"]["retention_ms"] == 3_600_000
    assert desc["config"]["segment_bytes"] == 1 << 20
    assert _http_topic(server.url, "adm-default").json()["partitions"] == 1

    recs: list[Rec] = [(i % 3, b"k%d" % i, b"v%d" % i, []) for i in range(30)]
    assert confluent_produce(server.kafka_bootstrap, "adm-a", recs) == [None] * 30
    rows = confluent_consume(server.kafka_bootstrap, "adm-a", 3, 30)
    assert sorted((p, k, v) for p, _, k, v, _ in rows) == sorted((p, k, v) for p, k, v, _ in recs)


def test_confluent_admin_create_refusals_and_validate_only(server: ServerProcess) -> None:
    admin = _admin(server.kafka_bootstrap)
    assert _created(admin, NewTopic("adm-exists", 1, 1)) == {"adm-exists": None}
    got = _created(
        admin,
        NewTopic("adm-exists", 1, 1),
        NewTopic("bad/name", 1, 1),
        NewTopic("adm-rf", 1, 3),
        NewTopic("adm-compact", 1, 1, config={"cleanup.policy": "compact"}),
        NewTopic("adm-unknown-cfg", 1, 1, config={"no.such.config": "1"}),
        NewTopic("adm-bad-value", 1, 1, config={"retention.ms": "soon"}),
    )
    codes = {name: err.code() for name, err in got.items()}
    assert codes == {
        "adm-exists": KafkaError.TOPIC_ALREADY_EXISTS,
        "bad/name": KafkaError.TOPIC_EXCEPTION,
        "adm-rf": KafkaError.INVALID_REPLICATION_FACTOR,
        "adm-compact": KafkaError.INVALID_CONFIG,
        "adm-unknown-cfg": KafkaError.INVALID_CONFIG,
        "adm-bad-value": KafkaError.INVALID_CONFIG,
    }
    assert "retention.ms" in got["adm-bad-value"].str()
    assert "no.such.config" in got["adm-unknown-cfg"].str()

    # validate_only: checked (refusals as above), nothing created
    got = _created(
        admin, NewTopic("adm-dry", 2, 1), NewTopic("adm-exists", 1, 1), validate_only=True
    )
    assert got["adm-dry"] is None
    assert got["adm-exists"].code() == KafkaError.TOPIC_ALREADY_EXISTS
    assert _http_topic(server.url, "adm-dry").status_code == 404


def test_raw_create_topics_answers(server: ServerProcess) -> None:
    """v7 answers the partition count, replication factor, configs and topic id; v2 the
    error; bad partition counts, a duplicate name, manual assignments, the internal
    topic are refused with Kafka's codes."""
    with KafkaWire(server.kafka_bootstrap) as w:
        resp = w.call(CREATE_TOPICS, 7, create_body("adm-raw", 2, -1, {"retention.ms": "60000"}))
        (t,) = resp.topics
        assert (t.error_code, t.num_partitions, t.replication_factor) == (ErrorCode.none, 2, 1)
        configs = {c.name: c.value for c in t.configs}
        assert configs["retention.ms"] == "60000" and configs["segment.bytes"]
        assert t.topic_id == uuid.UUID(hex=_http_topic(server.url, "adm-raw").json()["topic_id"])

        for partitions, code in (
            (0, ErrorCode.invalid_partitions),
            (-5, ErrorCode.invalid_partitions),
        ):
            (t,) = w.call(CREATE_TOPICS, 7, create_body("adm-p", partitions)).topics
            assert t.error_code == code and t.error_message
        (t,) = w.call(CREATE_TOPICS, 2, create_body("adm-raw", 1)).topics
        assert t.error_code == ErrorCode.topic_already_exists
        body = create_body("adm-twice")
        body["topics"] = body["topics"] * 2
        assert [t.error_code for t in w.call(CREATE_TOPICS, 5, body).topics] == [
            ErrorCode.invalid_request
        ] * 2
        body = create_body("adm-assigned")
        body["topics"][0]["assignments"] = [{"partition_index": 0, "broker_ids": [0]}]
        (t,) = w.call(CREATE_TOPICS, 7, body).topics
        assert t.error_code == ErrorCode.invalid_request
        (t,) = w.call(CREATE_TOPICS, 7, create_body("__consumer_offsets")).topics
        assert t.error_code == ErrorCode.invalid_request
        (t,) = w.call(
            CREATE_TOPICS, 7, create_body("adm-isr", configs={"min.insync.replicas": "2"})
        ).topics
        assert t.error_code == ErrorCode.invalid_config
    for name in ("adm-p", "adm-twice", "adm-assigned", "adm-isr"):
        assert _http_topic(server.url, name).status_code == 404


def test_delete_topics_by_name_and_by_id(server: ServerProcess) -> None:
    admin = _admin(server.kafka_bootstrap)
    assert _created(admin, NewTopic("adm-del", 2, 1), NewTopic("adm-del-id", 1, 1)) == {
        "adm-del": None,
        "adm-del-id": None,
    }
    confluent_produce(server.kafka_bootstrap, "adm-del", [(0, None, b"x", [])])
    assert {"adm-del", "adm-del-id"} <= _listed(server.kafka_bootstrap)
    assert "adm-del" in admin.list_topics(timeout=10).topics  # librdkafka's own Metadata
    got = _deleted(admin, "adm-del", "adm-never-was")
    assert got["adm-del"] is None
    assert got["adm-never-was"].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert "adm-del" not in _listed(server.kafka_bootstrap)
    assert "adm-del" not in admin.list_topics(timeout=10).topics
    assert _http_topic(server.url, "adm-del").status_code == 404

    tid = uuid.UUID(hex=_http_topic(server.url, "adm-del-id").json()["topic_id"])
    with KafkaWire(server.kafka_bootstrap) as w:
        body = {"topics": [{"name": None, "topic_id": tid}], "timeout": 10_000}
        (r,) = w.call(DELETE_TOPICS, 6, body).responses
        assert (r.error_code, r.name, r.topic_id) == (ErrorCode.none, "adm-del-id", tid)
        (r,) = w.call(DELETE_TOPICS, 6, body).responses
        assert r.error_code == ErrorCode.unknown_topic_id
        body = {"topic_names": ["__consumer_offsets"], "timeout": 10_000}
        (r,) = w.call(DELETE_TOPICS, 1, body).responses
        assert r.error_code == ErrorCode.invalid_request
    assert "adm-del-id" not in _listed(server.kafka_bootstrap)


def test_kafka_python_admin_creates_and_deletes(server: ServerProcess) -> None:
    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewTopic as KpNewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = KafkaAdminClient(bootstrap_servers=server.kafka_bootstrap, request_timeout_ms=10_000)
    try:
        admin.create_topics(
            [KpNewTopic("adm-kp", 2, 1, topic_configs={"retention.bytes": "1000000"})],
            timeout_ms=10_000,
        )
        desc = _http_topic(server.url, "adm-kp").json()
        assert desc["partitions"] == 2 and desc["config"]["retention_bytes"] == 1_000_000
        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics([KpNewTopic("adm-kp", 1, 1)], timeout_ms=10_000)
        assert "adm-kp" in admin.list_topics()
        admin.delete_topics(["adm-kp"], timeout_ms=10_000)
        assert _http_topic(server.url, "adm-kp").status_code == 404
    finally:
        admin.close()


# ---- ListOffsets -3 / -4 / -5 --------------------------------------------------------------


def _grown(
    admin: AdminClient, *parts: NewPartitions, validate_only: bool = False
) -> dict[str, Any]:
    """Each topic's CreatePartitions outcome: None (done) or its KafkaError."""
    return _outcomes(
        admin.create_partitions(list(parts), validate_only=validate_only, request_timeout=20)
    )


def test_confluent_admin_adds_partitions_and_clients_use_them(
    server: ServerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    """CreatePartitions grows a topic (the old partitions keep their records, producers
    and consumers use the new ones), refuses a count that does not grow, an unknown
    topic and manual assignments with Kafka's codes, and checks only with
    validate_only; HTTP's PATCH and ``topics alter --partitions`` grow it likewise."""
    admin = _admin(server.kafka_bootstrap)
    assert _created(admin, NewTopic("adm-grow", 2, 1)) == {"adm-grow": None}
    before: list[Rec] = [(i % 2, b"k%d" % i, b"v%d" % i, []) for i in range(10)]
    assert confluent_produce(server.kafka_bootstrap, "adm-grow", before) == [None] * 10

    assert _grown(admin, NewPartitions("adm-grow", 5), validate_only=True) == {"adm-grow": None}
    assert _http_topic(server.url, "adm-grow").json()["partitions"] == 2
    assert _grown(admin, NewPartitions("adm-grow", 4)) == {"adm-grow": None}
    assert _http_topic(server.url, "adm-grow").json()["partitions"] == 4
    refused = _grown(
        admin,
        NewPartitions("adm-grow", 3),
        NewPartitions("adm-nope", 3),
    )
    assert refused["adm-grow"].code() == KafkaError.INVALID_PARTITIONS
    assert "can only grow" in refused["adm-grow"].str()
    assert refused["adm-nope"].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    manual = _grown(admin, NewPartitions("adm-grow", 6, replica_assignment=[[1], [1]]))
    assert manual["adm-grow"].code() == KafkaError.INVALID_REPLICA_ASSIGNMENT
    after: list[Rec] = [(p, b"n%d" % p, b"w%d" % p, []) for p in range(4)]
    assert confluent_produce(server.kafka_bootstrap, "adm-grow", after) == [None] * 4
    rows = confluent_consume(server.kafka_bootstrap, "adm-grow", 4, 14)
    assert sorted((p, k, v) for p, _, k, v, _ in rows) == sorted(
        (p, k, v) for p, k, v, _ in before + after
    )
    assert sorted((p, o) for p, o, k, _, _ in rows if k is not None and k.startswith(b"n")) == [
        (0, 5),
        (1, 5),
        (2, 0),
        (3, 0),
    ]

    # HTTP and the command line grow it the same way, and refuse alike.
    r = httpx.patch(f"{server.url}/v1/topics/adm-grow", json={"partitions": 5}, timeout=20)
    assert r.status_code == 200, r.text
    assert r.json()["partitions"] == 5 and len(r.json()["partition_info"]) == 5
    r = httpx.patch(f"{server.url}/v1/topics/adm-grow", json={"partitions": 2}, timeout=20)
    assert r.status_code == 400 and "can only grow" in r.json()["error"]["message"]
    from tiered_log.cli import main

    assert main(["topics", "alter", "adm-grow", "--partitions", "6", "--url", server.url]) == 0
    assert "altered topic adm-grow: partitions=6" in capsys.readouterr().out
    assert main(["topics", "alter", "adm-grow", "--partitions", "6", "--url", server.url]) != 0
    err = capsys.readouterr().err
    assert "can only grow" in err and len(err.strip().splitlines()) == 1
    # kafka-python's admin too (its own client library).
    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewPartitions as KpNewPartitions

    kp = KafkaAdminClient(bootstrap_servers=server.kafka_bootstrap, request_timeout_ms=20_000)
    try:
        kp.create_partitions({"adm-grow": KpNewPartitions(total_count=7)})
    finally:
        kp.close()
    assert _http_topic(server.url, "adm-grow").json()["partitions"] == 7
    md = admin.list_topics("adm-grow", timeout=10).topics["adm-grow"]
    assert sorted(md.partitions) == list(range(7))


def test_delete_records_with_confluent_admin_http_and_the_cli(
    server: ServerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    """DeleteRecords moves a partition's log start: a consumer from the beginning starts
    there, ListOffsets earliest answers it, a lower offset leaves it, an offset past the
    high watermark is OFFSET_OUT_OF_RANGE, -1 deletes every committed record; HTTP and
    ``topics delete-records`` do the same."""
    admin = _admin(server.kafka_bootstrap)
    assert _created(admin, NewTopic("adm-del", 2, 1)) == {"adm-del": None}
    recs: list[Rec] = [(i % 2, b"k%d" % i, b"v%d" % i, []) for i in range(40)]
    assert confluent_produce(server.kafka_bootstrap, "adm-del", recs) == [None] * 40

    def deleted(offsets: dict[int, int]) -> dict[int, Any]:
        got = _outcomes(
            admin.delete_records(
                [TopicPartition("adm-del", p, o) for p, o in offsets.items()], request_timeout=20
            )
        )
        return {
            tp.partition: r if isinstance(r, KafkaError) else r.low_watermark
            for tp, r in got.items()
        }

    assert deleted({0: 7, 1: 3}) == {0: 7, 1: 3}
    rows = confluent_consume(server.kafka_bootstrap, "adm-del", 2, 40 - 10)
    assert min(o for p, o, _, _, _ in rows if p == 0) == 7
    assert min(o for p, o, _, _, _ in rows if p == 1) == 3
    assert len(rows) == 30
    lo, _hi = confluent_consumer(server.kafka_bootstrap).get_watermark_offsets(
        TopicPartition("adm-del", 0), timeout=10
    )
    assert lo == 7
    assert deleted({0: 2}) == {0: 7}  # lower: nothing changes
    err = deleted({0: 21})[0]
    assert err.code() == KafkaError.OFFSET_OUT_OF_RANGE
    assert deleted({1: -1}) == {1: 20}  # -1: the high watermark, every committed record
    r = httpx.get(f"{server.url}/v1/topics/adm-del/partitions/0/records?offset=6", timeout=10)
    assert r.status_code == 416

    r = httpx.post(
        f"{server.url}/v1/topics/adm-del/partitions/0/delete-records",
        json={"before_offset": 10},
        timeout=20,
    )
    assert r.status_code == 200 and r.json()["log_start_offset"] == 10, r.text
    r = httpx.post(
        f"{server.url}/v1/topics/adm-del/partitions/0/delete-records",
        json={"before_offset": 99},
        timeout=20,
    )
    assert r.status_code == 416 and "high watermark" in r.json()["error"]["message"]
    from tiered_log.cli import main

    argv = ["topics", "delete-records", "adm-del", "-p", "0", "--before", "12"]
    assert main([*argv, "--url", server.url]) == 0
    assert "adm-del/0: log start 12 (records [12, 20) remain)" in capsys.readouterr().out
    assert main(["topics", "delete-records", "adm-del", "--before", "x", "--url", server.url]) == 2
    err_line = capsys.readouterr().err
    assert "--before" in err_line and len(err_line.strip().splitlines()) == 1


def test_list_offsets_max_timestamp_earliest_local_latest_tiered(server: ServerProcess) -> None:
    """A tiered topic whose first segments are only in the bucket: -3 finds the record
    with the largest timestamp there (and, once a larger one is appended, on local
    disk), -4 is the local start, -5 the last archived offset; each needs its version."""
    topic = "adm-tiered"
    create_topic(server, topic, segment_bytes=4096, local_retention_bytes=0)
    n, peak = 600, 100
    with KafkaWire(server.kafka_bootstrap) as w:
        assert list_offset(w, topic, -5) == (ErrorCode.none, -1, -1)  # nothing archived yet
        assert list_offset(w, topic, -3)[:2] == (ErrorCode.none, -1)  # no record yet
    p = Producer(
        {"bootstrap.servers": server.kafka_bootstrap, "linger.ms": 20, "batch.num.messages": 20}
    )
    for i in range(n):
        ts = BASE_TS + 10**6 if i == peak else BASE_TS + i
        p.produce(topic, value=b"r-%04d" % i + b"." * 60, partition=0, timestamp=ts)
    assert p.flush(30) == 0
    wait_until(
        lambda: bounds(server, topic)["local_start_offset"] > peak + 50, 60, "local retention"
    )
    segs = httpx.get(
        f"{server.url}/v1/topics/{topic}/partitions/0/remote-segments", timeout=10
    ).json()
    with KafkaWire(server.kafka_bootstrap) as w:
        b = bounds(server, topic)
        assert list_offset(w, topic, -3) == (ErrorCode.none, peak, BASE_TS + 10**6)
        local = list_offset(w, topic, -4)
        later = bounds(server, topic)  # local retention goes on meanwhile
        assert local[0] == ErrorCode.none
        assert b["local_start_offset"] <= local[1] <= later["local_start_offset"]
        tiered = list_offset(w, topic, -5)
        assert tiered[0] == ErrorCode.none
        assert segs["remote_end_offset"] - 1 <= tiered[1] < n
        assert tiered[1] >= b["local_start_offset"] - 1
        assert list_offset(w, topic, -4, version=7)[0] == ErrorCode.unsupported_version
        assert list_offset(w, topic, -5, version=8)[0] == ErrorCode.unsupported_version
        assert list_offset(w, topic, -3, version=7)[:2] == (ErrorCode.none, peak)
        w.call(PRODUCE, 9, produce_body(topic, batch(b"late")))  # timestamps 1.7e12: older
        assert list_offset(w, topic, -3)[1] == peak
    p.produce(topic, value=b"newest", partition=0, timestamp=BASE_TS + 10**7)
    assert p.flush(30) == 0
    with KafkaWire(server.kafka_bootstrap) as w:
        assert list_offset(w, topic, -3) == (ErrorCode.none, n + 1, BASE_TS + 10**7)


# ---- OffsetForLeaderEpoch on a single node -------------------------------------------------


def test_offset_for_leader_epoch_on_a_single_node(server: ServerProcess) -> None:
    """A single node leads in epoch 0 (its Metadata says so): epoch 0 ends at the log
    end; an epoch it never had is -1/-1; a newer current epoch is UNKNOWN_LEADER_EPOCH."""
    topic = "adm-epochs"
    create_topic(server, topic)
    with KafkaWire(server.kafka_bootstrap) as w:
        w.call(PRODUCE, 9, produce_body(topic, batch(b"a", b"b", b"c", b"d", b"e")))
        assert epoch_end(w, topic, 0) == (ErrorCode.none, 0, 5)
        assert epoch_end(w, topic, 0, current=0, version=2) == (ErrorCode.none, 0, 5)
        assert epoch_end(w, topic, 3) == (ErrorCode.none, -1, -1)
        assert epoch_end(w, topic, -1) == (ErrorCode.none, -1, -1)
        assert epoch_end(w, topic, 0, current=1)[0] == ErrorCode.unknown_leader_epoch
        assert epoch_end(w, topic, 0, partition=7)[0] == ErrorCode.unknown_topic_or_partition
        assert epoch_end(w, "adm-no-such", 0)[0] == ErrorCode.unknown_topic_or_partition


# ---- a cluster -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    yield from dev_cluster(tmp_path_factory, {"TIERED_LOG_CLUSTER_LEASE_TTL_S": "2"})


def _partition(cluster: DevCluster, topic: str) -> dict[str, Any]:
    url = next(n.url for n in cluster.nodes.values() if n.alive)
    r = httpx.get(f"{url}/v1/topics/{topic}", timeout=10)
    if r.status_code == 404:  # not applied on that node yet: nothing known (waits go on)
        return {"isr": [], "leader": None, "leader_epoch": -1, "replicas": []}
    r.raise_for_status()
    out: dict[str, Any] = r.json()["partition_info"][0]
    return out


def kill_leader(cluster: DevCluster, topic: str, leader: int, epoch: int) -> tuple[int, int]:
    """SIGKILL partition 0's ``leader`` (of ``epoch``); its successor and new epoch once
    the cluster has named them."""
    cluster.nodes[leader].kill()
    wait_until(
        lambda: _partition(cluster, topic)["leader"] not in (leader, None, -1),
        30,
        "a new leader",
    )
    part = _partition(cluster, topic)
    assert part["leader_epoch"] > epoch
    return part["leader"], part["leader_epoch"]


def test_cluster_any_node_creates_and_deletes(cluster: DevCluster) -> None:
    with KafkaWire(cluster.nodes[3].kafka_address) as w:
        body = create_body("adm-c", 2, 3, {"min.insync.replicas": "2"})
        (t,) = w.call(CREATE_TOPICS, 7, body).topics
        assert (t.error_code, t.num_partitions, t.replication_factor) == (ErrorCode.none, 2, 3)
        (t,) = w.call(CREATE_TOPICS, 7, create_body("adm-c5", 1, 5)).topics
        assert t.error_code == ErrorCode.invalid_replication_factor
        (t,) = w.call(CREATE_TOPICS, 7, create_body("adm-c", 1)).topics
        assert t.error_code == ErrorCode.topic_already_exists
    # Another node applies the new topic at its next metadata refresh: wait for it.
    wait_until(
        lambda: httpx.get(f"{cluster.urls[0]}/v1/topics/adm-c", timeout=10).status_code == 200,
        20,
        "the first node knows the topic",
    )
    r = httpx.get(f"{cluster.urls[0]}/v1/topics/adm-c", timeout=10).json()
    assert (r["replication_factor"], r["min_insync_replicas"], r["partitions"]) == (3, 2, 2)
    wait_until(
        lambda: all("adm-c" in _listed(n.kafka_address) for n in cluster.nodes.values()),
        20,
        "every node lists the topic",
    )
    got = _deleted(_admin(cluster.nodes[2].kafka_address), "adm-c")
    assert got == {"adm-c": None}
    wait_until(
        lambda: not any("adm-c" in _listed(n.kafka_address) for n in cluster.nodes.values()),
        20,
        "no node lists the topic",
    )


def test_cluster_adds_partitions_every_node_serves_them(cluster: DevCluster) -> None:
    """CreatePartitions at one node of a 3-node cluster: the new partitions get replicas
    over the live nodes, full ISRs and leaders; every node's Metadata lists them; an
    acks=all producer writes to each and a consumer reads every record back."""
    admin = _admin(cluster.nodes[1].kafka_address)
    got = _created(admin, NewTopic("adm-cgrow", 1, 3))
    assert got == {"adm-cgrow": None}
    assert _grown(admin, NewPartitions("adm-cgrow", 3)) == {"adm-cgrow": None}
    boot = ",".join(n.kafka_address for n in cluster.nodes.values())

    def served() -> bool:
        for n in cluster.nodes.values():
            md = _admin(n.kafka_address).list_topics("adm-cgrow", timeout=10).topics["adm-cgrow"]
            parts = md.partitions
            if sorted(parts) != [0, 1, 2]:
                return False
            if any(p.leader < 0 or len(p.isrs) != 3 for p in parts.values()):
                return False
        return True

    wait_until(served, 30, "every node to list 3 led partitions with full ISRs")
    recs: list[Rec] = [(i % 3, b"k%d" % i, b"v%d" % i, []) for i in range(30)]
    assert confluent_produce(boot, "adm-cgrow", recs, acks="all") == [None] * 30
    rows = confluent_consume(boot, "adm-cgrow", 3, 30)
    assert sorted((p, k, v) for p, _, k, v, _ in rows) == sorted((p, k, v) for p, k, v, _ in recs)
    refused = _grown(_admin(cluster.nodes[2].kafka_address), NewPartitions("adm-cgrow", 2))
    assert refused["adm-cgrow"].code() == KafkaError.INVALID_PARTITIONS


def test_cluster_delete_records_reaches_the_followers_and_survives_a_leader_kill(
    cluster: DevCluster,
) -> None:
    """DeleteRecords at the leader of a 3-replica partition is answered once every
    in-sync follower has the new log start (taken from its fetch answers), so after the
    leader is SIGKILLed its successor serves from there (a consumer from the beginning
    starts at it)."""
    admin = _admin(cluster.nodes[2].kafka_address)
    assert _created(admin, NewTopic("adm-cdel", 1, 3)) == {"adm-cdel": None}
    boot = ",".join(n.kafka_address for n in cluster.nodes.values() if n.alive)
    recs: list[Rec] = [(0, b"k%d" % i, b"v%d" % i, []) for i in range(30)]
    assert confluent_produce(boot, "adm-cdel", recs, acks="all") == [None] * 30
    [f] = admin.delete_records([TopicPartition("adm-cdel", 0, 12)], request_timeout=20).values()
    assert f.result(timeout=30).low_watermark == 12

    def starts() -> dict[int, int]:
        out = {}
        for n in cluster.nodes.values():
            r = httpx.get(f"{n.url}/v1/topics/adm-cdel", timeout=10)
            if r.status_code == 200:
                out[n.node_id] = r.json()["partition_info"][0]["log_start_offset"]
        return out

    # Answered once the in-sync followers have it (they took it from a fetch answer).
    assert starts() == {n: 12 for n in cluster.nodes}
    part = _partition(cluster, "adm-cdel")
    leader = part["leader"]
    kill_leader(cluster, "adm-cdel", leader, part["leader_epoch"])
    try:
        boot = ",".join(n.kafka_address for n in cluster.nodes.values() if n.alive)
        rows = confluent_consume(boot, "adm-cdel", 1, 18)
        assert [o for _, o, _, _, _ in rows] == list(range(12, 30))
    finally:
        cluster.nodes[leader].start()


def test_cluster_offset_for_leader_epoch_and_a_consumer_across_a_leader_change(
    cluster: DevCluster,
) -> None:
    """Only the leader answers; a stale current epoch is fenced, a newer one unknown. A
    consumer reading through a leader's SIGKILL keeps its position (librdkafka validates
    it with OffsetForLeaderEpoch at the new leader) and reads every record once."""
    topic = "adm-epoch-c"
    admin = _admin(cluster.bootstrap)
    assert _created(admin, NewTopic(topic, 1, 3)) == {topic: None}
    wait_until(lambda: len(_partition(cluster, topic)["isr"]) == 3, 30, "a full ISR")
    part = _partition(cluster, topic)
    leader, epoch = part["leader"], part["leader_epoch"]
    first: list[Rec] = [(0, None, b"first-%d" % i, []) for i in range(20)]
    confluent_produce(cluster.bootstrap, topic, first, acks="all")
    follower = next(n for n in part["replicas"] if n != leader)
    with KafkaWire(cluster.nodes[follower].kafka_address) as w:
        assert epoch_end(w, topic, epoch, current=epoch)[0] == ErrorCode.not_leader_or_follower
    with KafkaWire(cluster.nodes[leader].kafka_address) as w:
        assert epoch_end(w, topic, epoch, current=epoch) == (ErrorCode.none, epoch, 20)
        assert epoch_end(w, topic, epoch, current=epoch + 1)[0] == ErrorCode.unknown_leader_epoch

    lines: list[str] = []
    rdkafka_log = logging.getLogger("tests.admin.rdkafka")
    rdkafka_log.propagate = False
    rdkafka_log.setLevel(logging.DEBUG)
    rdkafka_log.addHandler(_Collect(lines))
    c = confluent_consumer(
        cluster.bootstrap,
        **{"topic.metadata.refresh.interval.ms": 500, "debug": "fetch,topic", "log_level": 7},
        logger=rdkafka_log,
    )
    victim = cluster.nodes[leader]
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        seen = _poll(c, 20)
        new_leader, new_epoch = kill_leader(cluster, topic, leader, epoch)
        with KafkaWire(cluster.nodes[new_leader].kafka_address) as w:

            def answers_for_its_epoch(w: KafkaWire = w) -> bool:
                return epoch_end(w, topic, epoch, current=new_epoch)[0] == ErrorCode.none

            # the new leader takes its role at its own next metadata round
            wait_until(answers_for_its_epoch, 15, "the new leader answers for its epoch")
            assert epoch_end(w, topic, epoch, current=new_epoch) == (ErrorCode.none, epoch, 20)
            assert epoch_end(w, topic, new_epoch, current=new_epoch) == (
                ErrorCode.none,
                new_epoch,
                20,
            )
            assert epoch_end(w, topic, epoch, current=epoch)[0] == ErrorCode.fenced_leader_epoch
        second: list[Rec] = [(0, None, b"second-%d" % i, []) for i in range(20)]
        confluent_produce(cluster.bootstrap, topic, second, acks="all")
        seen += _poll(c, 20)
    finally:
        c.close()
        victim.start(wait_s=90)  # other tests' load may slow its start down
    validated = [x for x in lines if "offset and epoch validation succeeded" in x]
    assert validated and "broker end offset 20" in validated[0], lines[-20:]
    assert seen == [(i, b"first-%d" % i) for i in range(20)] + [
        (20 + i, b"second-%d" % i) for i in range(20)
    ]


class _Collect(logging.Handler):
    """Keeps the messages logged (librdkafka's, handed over by the client's poll)."""

    def __init__(self, into: list[str]) -> None:
        super().__init__()
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        self.into.append(record.getMessage())


def _poll(c: Any, n: int, timeout_s: float = 40) -> list[tuple[int, bytes]]:
    """The next ``n`` records of an assigned consumer as ``(offset, value)``; a consumer
    error fails the test (a position reset by a failed validation shows up as records
    read twice)."""
    return [(m.offset(), m.value()) for m in poll_messages(c, n, timeout_s)]
