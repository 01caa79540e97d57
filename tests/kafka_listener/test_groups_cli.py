"""The groups at the command line against a real ``tiered-log serve``: ``consume
--group`` starts at the group's commits and commits what it printed (a second run goes
on where the first stopped; read outside the membership with ``-p`` or ``-o stored``,
refused while Kafka members hold the group), ``groups list``
and ``groups describe`` show the group, its members, offsets and lag as rpk does, and
``--json`` the HTTP API's answer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer
from service.conftest import ServerProcess

from .clients import Rec, confluent_produce
from .conftest import create_topic, kafka_server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from kafka_server(tmp_path_factory, "groups-cli")


def cli(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TIERED_LOG_URL": server.url}
    return subprocess.run(
        [sys.executable, "-m", "tiered_log.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_consume_group_resumes_and_groups_show_it(server: ServerProcess) -> None:
    topic = "cli-grp"
    create_topic(server, topic, partitions=2)
    recs: list[Rec] = [(i % 2, None, f"v{i}".encode(), []) for i in range(10)]
    assert confluent_produce(server.kafka_bootstrap, topic, recs) == [None] * 10
    first = cli(server, "consume", topic, "--group", "cli-g", "-n", "3", "-p", "0")
    assert first.returncode == 0, first.stderr
    assert first.stdout.split() == ["v0", "v2", "v4"]
    rest = cli(server, "consume", topic, "-G", "cli-g", "-f", "%p:%o %s\\n")
    assert rest.returncode == 0, rest.stderr
    assert sorted(rest.stdout.splitlines()) == sorted(
        [f"0:{o} v{2 * o}" for o in range(3, 5)] + [f"1:{o} v{2 * o + 1}" for o in range(5)]
    )
    again = cli(server, "consume", topic, "--group", "cli-g")
    assert again.returncode == 0 and again.stdout == ""

    described = cli(server, "groups", "describe", "cli-g")
    assert described.returncode == 0, described.stderr
    lines = described.stdout.splitlines()
    assert lines[0].split() == ["GROUP", "cli-g"] and lines[2].split() == ["STATE", "Empty"]
    assert lines[5].split() == ["TOTAL-LAG", "0"]
    table = [line.split() for line in lines[7:]]
    assert table[0][:5] == ["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG"]
    assert [row[:5] for row in table[1:]] == [
        [topic, "0", "5", "5", "0"],
        [topic, "1", "5", "5", "0"],
    ]
    as_json = json.loads(cli(server, "groups", "describe", "cli-g", "--json").stdout)
    assert [(o["partition"], o["committed_offset"]) for o in as_json["offsets"]] == [(0, 5), (1, 5)]

    c = Consumer(
        {
            "bootstrap.servers": server.kafka_bootstrap,
            "group.id": "cli-g",
            "session.timeout.ms": 6000,
            "client.id": "kafka-member",
            "enable.auto.commit": False,
        }
    )
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + 30
        while len(c.assignment()) < 2 and time.monotonic() < deadline:
            c.poll(0.2)
        listed = cli(server, "groups", "list")
        assert listed.returncode == 0, listed.stderr
        rows = [line.split() for line in listed.stdout.splitlines()]
        assert rows[0] == ["GROUP", "STATE", "MEMBERS", "COORDINATOR"]
        assert ["cli-g", "Stable", "1", "0"] in rows
        described = cli(server, "groups", "describe", "cli-g")
        assert "kafka-member" in described.stdout and "Stable" in described.stdout
        busy = cli(server, "consume", topic, "--group", "cli-g", "-o", "stored", "-n", "1")
        assert busy.returncode == 1 and busy.stdout == ""  # refused before reading
        assert (
            busy.stderr.strip().splitlines()[-1].startswith("tiered-log: group_has_members: group")
        )
    finally:
        c.close()
    missing = cli(server, "groups", "describe", "nope")
    assert missing.returncode == 1 and "group_not_found" in missing.stderr
    assert "Traceback" not in missing.stderr
