"""``tiered-log consume TOPIC --group G`` as a balanced member of consumer group G,
against a real ``tiered-log serve`` and with the CLI as a subprocess: two members split
a topic's partitions and print each record once between them, a member leaving hands
its partitions to the other, Ctrl-C commits, leaves and prints a summary, a second run
of the group prints nothing old, ``-c N`` commits exactly what it printed, ``-o end``
starts new partitions at their end, ``groups describe`` shows the members, a member of
an https service with tokens joins over SASL_SSL, and a service without a Kafka
listener (or one that cannot be reached) is one line."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator

import httpx
import pytest
from service.conftest import ServerProcess
from service.test_lifecycle import _self_signed

from .clients import Rec, confluent_produce
from .conftest import create_topic, kafka_server

WAIT_S = 30.0
"""The longest any step waits (a join, a rebalance, records arriving)."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from kafka_server(tmp_path_factory, "consume-group-cli")


def _env(server: ServerProcess) -> dict[str, str]:
    return {**os.environ, "TIERED_LOG_URL": server.url}


def cli(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tiered_log.cli", *args],
        env=_env(server),
        capture_output=True,
        text=True,
        timeout=60,
    )


class Member:
    """A ``tiered-log consume`` process whose stdout and stderr lines are collected as
    they come (by two reader threads)."""

    def __init__(self, server: ServerProcess, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tiered_log.cli", "consume", *args],
            env=_env(server),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.out: list[str] = []
        self.err: list[str] = []
        assert self.proc.stdout is not None and self.proc.stderr is not None
        for stream, lines in ((self.proc.stdout, self.out), (self.proc.stderr, self.err)):
            threading.Thread(target=self._read, args=(stream, lines), daemon=True).start()

    @staticmethod
    def _read(stream: object, lines: list[str]) -> None:
        for line in stream:  # type: ignore[attr-defined]
            lines.append(line.rstrip("\n"))

    def wait_for(self, what: str, ok: Callable[[], bool]) -> None:
        deadline = time.monotonic() + WAIT_S
        while not ok():
            if self.proc.poll() is not None and not ok():
                time.sleep(0.2)  # the readers may still be draining the pipes
                if ok():
                    return
                raise AssertionError(f"exited {self.proc.returncode} before {what}: {self.err}")
            assert time.monotonic() < deadline, f"no {what} in {WAIT_S} s: {self.err}"
            time.sleep(0.05)

    def assignment(self) -> set[int] | None:
        """The partitions of the last assignment noted on stderr (None before one)."""
        notes = [line for line in self.err if ": assigned " in line]
        if not notes:
            return None
        m = re.search(r"\[([\d, ]*)\]", notes[-1])
        return {int(p) for p in m.group(1).split(",") if p.strip()} if m else set()

    def interrupt(self) -> int:
        """Ctrl-C: SIGINT, then its exit status."""
        self.proc.send_signal(signal.SIGINT)
        code = self.proc.wait(WAIT_S)
        time.sleep(0.2)  # the readers drain the pipes
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def produce(server: ServerProcess, topic: str, partitions: int, start: int, n: int) -> list[str]:
    """``n`` records ``v{start}``.. spread over the partitions; the lines ``-f
    '%p %s\\n'`` prints for them."""
    recs: list[Rec] = [
        (i % partitions, None, f"v{i}".encode(), []) for i in range(start, start + n)
    ]
    assert confluent_produce(server.kafka_bootstrap, topic, recs) == [None] * n
    return [f"{p} {v.decode()}" for p, _, v, _ in recs if v is not None]


def test_two_members_split_hand_over_and_commit(server: ServerProcess) -> None:
    topic, group = "cg-split", "cg-split-g"
    create_topic(server, topic, partitions=4)
    a = Member(server, topic, "--group", group, "--follow", "-f", "%p %s\\n")
    b: Member | None = None
    try:
        a.wait_for("first assignment", lambda: a.assignment() == {0, 1, 2, 3})
        b = Member(server, topic, "-G", group, "--follow", "-f", "%p %s\\n")
        m = b
        a.wait_for("rebalance", lambda: len(a.assignment() or ()) == 2)
        m.wait_for("assignment", lambda: len(m.assignment() or ()) == 2)
        assert (a.assignment() or set()) | (m.assignment() or set()) == {0, 1, 2, 3}

        described = cli(server, "groups", "describe", group)
        assert described.returncode == 0, described.stderr
        assert re.search(r"^MEMBERS\s+2$", described.stdout, re.M), described.stdout
        rows = [line.split() for line in described.stdout.splitlines() if line.startswith(topic)]
        assert sorted(int(r[1]) for r in rows) == [0, 1, 2, 3]
        assert len({r[5] for r in rows}) == 2 and {r[6] for r in rows} == {"tiered-log-consume"}

        first = produce(server, topic, 4, 0, 40)
        a.wait_for("records", lambda: len(a.out) + len(m.out) >= 40)
        time.sleep(0.5)  # nothing more may come
        assert sorted(a.out + m.out) == sorted(first)  # each record once between them
        assert {int(line.split()[0]) for line in a.out} == a.assignment()
        assert {int(line.split()[0]) for line in m.out} == m.assignment()

        assert m.interrupt() == 0, m.err
        assert "Traceback" not in "\n".join(m.err)
        assert m.err[-1].startswith(f"tiered-log: consumed {len(m.out)} records in group {group}")
        a.wait_for("hand-over", lambda: a.assignment() == {0, 1, 2, 3})
        printed_by_a = len(a.out)
        second = produce(server, topic, 4, 40, 20)
        a.wait_for("records after the hand-over", lambda: len(a.out) >= printed_by_a + 20)
        time.sleep(0.5)
        assert sorted(a.out + m.out) == sorted(first + second)

        assert a.interrupt() == 0, a.err
        summary = a.err[-1]
        assert summary.startswith(f"tiered-log: consumed {len(a.out)} records in group {group}")
        assert all(f"{topic} [{p}] 15" in summary for p in range(4)), summary
    finally:
        a.kill()
        if b is not None:
            b.kill()

    again = cli(server, "consume", topic, "--group", group)
    assert again.returncode == 0, again.stderr
    assert again.stdout == ""  # every record was committed
    described = cli(server, "groups", "describe", group)
    assert re.search(r"^TOTAL-LAG\s+0$", described.stdout, re.M), described.stdout


def test_limit_commits_what_was_printed_and_exit_at_end(server: ServerProcess) -> None:
    topic, group = "cg-limit", "cg-limit-g"
    create_topic(server, topic, partitions=2)
    lines = produce(server, topic, 2, 0, 10)
    first = cli(server, "consume", topic, "--group", group, "-c", "3", "-f", "%p %s\\n")
    assert first.returncode == 0, first.stderr
    assert len(first.stdout.splitlines()) == 3
    rest = cli(server, "consume", topic, "--group", group, "-e", "-f", "%p %s\\n")
    assert rest.returncode == 0, rest.stderr
    assert sorted(first.stdout.splitlines() + rest.stdout.splitlines()) == sorted(lines)
    assert "committed next offsets: cg-limit [0] 5, cg-limit [1] 5" in rest.stderr
    assert cli(server, "consume", topic, "--group", group).stdout == ""

    # the same format options as without --group: key, offset, null value with -Z
    create_topic(server, "cg-fmt", partitions=1)
    assert confluent_produce(server.kafka_bootstrap, "cg-fmt", [(0, b"k", None, [])]) == [None]
    fmt = cli(server, "consume", "cg-fmt", "-G", "cg-fmt-g", "-Z", "-f", "%t %p %o %k=%s\\n")
    assert fmt.returncode == 0 and fmt.stdout == "cg-fmt 0 0 k=NULL\n", fmt.stderr


def test_offset_end_starts_new_partitions_at_their_end(server: ServerProcess) -> None:
    topic, group = "cg-end", "cg-end-g"
    create_topic(server, topic, partitions=2)
    produce(server, topic, 2, 0, 6)
    member = Member(server, topic, "--group", group, "-o", "end", "--follow", "-f", "%p %s\\n")
    try:
        member.wait_for("assignment", lambda: member.assignment() == {0, 1})
        time.sleep(1.5)  # the reset to the end happens after the assignment
        new = produce(server, topic, 2, 6, 4)
        member.wait_for("new records", lambda: len(member.out) >= 4)
        assert member.interrupt() == 0, member.err
        assert sorted(member.out) == sorted(new)
    finally:
        member.kill()


def test_two_topics_in_one_member(server: ServerProcess) -> None:
    for t in ("cg-two-a", "cg-two-b"):
        create_topic(server, t, partitions=1)
        assert confluent_produce(server.kafka_bootstrap, t, [(0, None, t.encode(), [])]) == [None]
    both = cli(server, "consume", "cg-two-a", "cg-two-b", "--group", "cg-two-g", "-f", "%t %s\\n")
    assert both.returncode == 0, both.stderr
    assert sorted(both.stdout.splitlines()) == ["cg-two-a cg-two-a", "cg-two-b cg-two-b"]
    alone = cli(server, "consume", "cg-two-a", "cg-two-b")
    assert alone.returncode == 2 and "--group" in alone.stderr


def test_stored_reads_commits_without_joining(server: ServerProcess) -> None:
    topic, group = "cg-stored", "cg-stored-g"
    create_topic(server, topic, partitions=1)
    produce(server, topic, 1, 0, 4)
    assert cli(server, "consume", topic, "--group", group, "-c", "1").stdout == "v0\n"
    stored = cli(server, "consume", topic, "--group", group, "-o", "stored", "-c", "2")
    assert stored.returncode == 0, stored.stderr
    assert stored.stdout == "v1\nv2\n" and "assigned" not in stored.stderr  # not a member
    assert cli(server, "consume", topic, "--group", group).stdout == "v3\n"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_listener_unreachable_is_one_line(server: ServerProcess) -> None:
    create_topic(server, "cg-unreachable", partitions=1)
    bad = f"127.0.0.1:{_free_port()}"
    r = cli(server, "consume", "cg-unreachable", "--group", "g", "--bootstrap", bad)
    assert r.returncode == 1 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("tiered-log: connection_failed: cannot reach the Kafka listener")
    assert bad in lines[0] and "--bootstrap" in lines[0]


def test_listener_off_is_one_line(tmp_path_factory: pytest.TempPathFactory) -> None:
    servers = kafka_server(tmp_path_factory, "consume-group-off", kafka_port="0")
    srv = next(servers)
    try:
        create_topic(srv, "cg-off", partitions=1)
        r = cli(srv, "consume", "cg-off", "--group", "g")
        assert r.returncode == 1 and r.stdout == ""
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1, r.stderr
        assert lines[0].startswith("tiered-log: no_kafka_listener: ")
        assert "kafka_port 0" in lines[0] and "--kafka-port" in lines[0]
        # reading the group's commits over HTTP needs no listener
        stored = cli(srv, "consume", "cg-off", "--group", "g", "-o", "stored")
        assert stored.returncode == 0, stored.stderr
    finally:
        servers.close()


def test_member_over_tls_with_a_token(tmp_path_factory: pytest.TempPathFactory) -> None:
    """An https service with tokens: the member speaks SASL_SSL with --token as the
    password and trusts --cacert, as the HTTP calls do."""
    cert, key = _self_signed(tmp_path_factory.mktemp("cg-certs"))
    tokens = {"adm-0123456789": {"*": ["admin"]}, "ro-0123456789": {"app.*": ["read"]}}
    root = tmp_path_factory.mktemp("cg-tls")
    settings = {
        "log_level": "info",
        "tls_certfile": str(cert),
        "tls_keyfile": str(key),
        "auth_tokens": json.dumps(tokens),
    }
    srv = ServerProcess(root / "data", root, settings, scheme="https")
    srv.start(verify=str(cert))
    try:
        trust = ssl.create_default_context(cafile=str(cert))
        admin = {"Authorization": "Bearer adm-0123456789"}
        with httpx.Client(base_url=srv.url, verify=trust, headers=admin) as c:
            assert c.post("/v1/topics", json={"name": "app.cg", "partitions": 2}).status_code == 201
            body = {"records": [{"value": f"s{i}", "partition": i % 2} for i in range(6)]}
            assert c.post("/v1/topics/app.cg/records", json=body).status_code == 200
        args = ("consume", "app.cg", "--group", "cg-tls-g", "--cacert", str(cert))
        env = {**_env(srv), "TIERED_LOG_TOKEN": "ro-0123456789"}
        run = subprocess.run(
            [sys.executable, "-m", "tiered_log.cli", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert run.returncode == 0, run.stderr
        assert sorted(run.stdout.split()) == [f"s{i}" for i in range(6)]
        assert "committed next offsets: app.cg [0] 3, app.cg [1] 3" in run.stderr
    finally:
        srv.stop()
