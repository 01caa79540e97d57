"""``tiered-log consume TOPIC [TOPIC...] --group G``: the command as a balanced member of
consumer group G, as ``kcat -G`` and ``kafka-console-consumer --group`` are.

The member is aiokafka's :class:`~aiokafka.AIOKafkaConsumer` speaking Kafka's classic
group protocol to the service's Kafka listener; the command runs it on an event loop of
its own (:func:`consume_in_group`).

- **Where it connects**: ``--bootstrap HOST:PORT[,...]``, else the address each
  ``--url`` node reports in ``GET /v1/groups`` (``kafka_address``: its listener as Kafka
  clients are told to reach it, ``kafka_advertised_host`` included). Asking the service
  keeps one setting, ``--url``, for every command, follows a non-default ``kafka_port``
  and tells a service without a listener (``kafka_port`` 0) from one that cannot be
  reached. With ``--token`` the member authenticates with SASL/PLAIN (the token as the
  password); an ``https`` URL means the listener speaks TLS (the service's certificate,
  checked with ``--cacert`` or not with ``--insecure``).
- **Which partitions**: the group's assignor (roundrobin, which librdkafka's and Kafka's
  consumers also offer) shares the topics' partitions among the members; each rebalance
  is noted on stderr (``group G: assigned T [0, 2]``).
- **Where each partition starts**: the group's committed offset; without one, where
  ``-o beginning`` or ``-o end`` says (the group's ``auto.offset.reset``; default
  beginning, as the command's default).
- **Commits**: the offsets after what was printed (nothing fetched and not printed is
  ever committed): every :data:`COMMIT_INTERVAL_S`, before this member's partitions are
  revoked in a rebalance (so their next owner starts right after what this one
  printed), and at exit: the end of the partitions, ``-c N`` records, Ctrl-C or SIGTERM.
  The exit then prints a summary on stderr (records printed, offsets committed).
- **When it stops**: without ``--follow``, once every partition assigned to it has been
  printed up to the end it had when assigned (kcat's ``-e``; a member assigned nothing
  stops at once); with ``--follow`` at Ctrl-C or SIGTERM; with ``-c N`` after N records.

Invariant: a committed offset never passes a record this member has not printed, and a
revocation waits for the batch being printed, so a rebalance hands a partition over at
exactly the offset printed up to (each record printed once across the members); a member
that dies without committing leaves its last second of records to be printed again by the
next owner (at least once, as Kafka's consumers).

Concurrency: one event loop in the command's thread; writing to stdout runs in a worker
thread (a slow reader must not stall the member's heartbeats) under a lock that the
revocation callback also takes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import ssl
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import IO, Any

import httpx
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import (
    CommitFailedError,
    IllegalStateError,
    KafkaConnectionError,
    KafkaError,
)

from ..errors import ConnectionFailedError, TieredLogError
from ..format.records import Record
from .consume import RecordFormat
from .registry import UsageError, counted

COMMIT_INTERVAL_S = 1.0
"""How often the member commits what it printed (and once more at exit)."""
POLL_MS = 500
"""How long one fetch waits for records before the loop looks whether it is done."""
SESSION_TIMEOUT_MS = 10_000
"""The member's session: a member that stops heartbeating (killed) loses its partitions
after this long; one that exits leaves the group at once."""
HEARTBEAT_INTERVAL_MS = 1_000
"""How often the member heartbeats (how soon it learns of a rebalance)."""
FINAL_S = 10.0
"""How long the commit at exit, and the leave after it, may take (a coordinator that
cannot be reached must not hold Ctrl-C up)."""
CLIENT_ID = "tiered-log-consume"
"""The member's client id (``groups describe`` shows it)."""

Note = Callable[[str], None]


def _stderr_note(message: str) -> None:
    print(f"tiered-log: {message}", file=sys.stderr, flush=True)


def joins_group(args: argparse.Namespace) -> bool:
    """Whether ``consume`` runs as a member of ``--group``: a group named, no ``-p``, and
    no start of its own but ``-o beginning|end``. ``-o stored``, ``-p N``, ``-o N``,
    ``-N``, ``s@TIME`` or ``--timestamp`` with ``--group`` read outside the membership
    (:class:`~.consume.GroupPosition`)."""
    if not args.group or args.partition is not None or args.timestamp is not None:
        return False
    return args.offset is None or args.offset.kind in ("beginning", "end")


@dataclass(frozen=True, slots=True)
class Connection:
    """How the member reaches the listener: ``bootstrap`` addresses and aiokafka's
    security keywords (protocol, TLS context, SASL/PLAIN credentials)."""

    bootstrap: list[str]
    security: dict[str, Any] = field(default_factory=dict)


def _tls_context(verify: bool | str) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=verify if isinstance(verify, str) else None)
    if verify is False:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _http_error(url: str, r: httpx.Response) -> TieredLogError:
    try:
        err = r.json()["error"]
        exc = TieredLogError(str(err["message"]))
        exc.code = str(err["code"])  # the server's code, as the one-line error shows it
        return exc
    except (ValueError, KeyError, TypeError):
        return TieredLogError(f"{url}: HTTP {r.status_code}: {r.text[:200]}")


def listener_addresses(urls: list[str], token: str | None, verify: bool | str) -> list[str]:
    """The Kafka listener addresses the service's nodes at ``urls`` report (``GET
    /v1/groups``); a TieredLogError naming what to set when none has a listener or none
    can be asked."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    found: list[str] = []
    answered: list[str] = []
    with httpx.Client(timeout=10, headers=headers, verify=verify) as http:
        for url in urls:
            try:
                r = http.get(url + "/v1/groups")
            except httpx.HTTPError:
                continue
            if r.status_code != 200:
                raise _http_error(url, r)
            answered.append(url)
            body = r.json()
            if "kafka_address" not in body:
                raise TieredLogError(
                    f"the service at {url} does not report its Kafka listener's address: "
                    "pass --bootstrap HOST:PORT"
                )
            if body["kafka_address"] and body["kafka_address"] not in found:
                found.append(str(body["kafka_address"]))
    if not answered:
        raise ConnectionFailedError(
            f"cannot reach the service at {', '.join(urls)} (set --url or $TIERED_LOG_URL)"
        )
    if not found:
        exc = TieredLogError(
            f"the service at {', '.join(answered)} has no Kafka listener (kafka_port 0), "
            "which a group member joins through: start it with --kafka-port PORT "
            "(TIERED_LOG_KAFKA_PORT), or pass --bootstrap HOST:PORT "
            "(-o stored reads the group's commits over HTTP without joining)"
        )
        exc.code = "no_kafka_listener"
        raise exc
    return found


def connection_of(args: argparse.Namespace, verify: bool | str) -> Connection:
    """Where and how ``consume --group`` connects (see the module docstring)."""
    urls = [u.strip().rstrip("/") for u in args.url.split(",") if u.strip()]
    if args.bootstrap:
        bootstrap = [b.strip() for b in args.bootstrap.split(",") if b.strip()]
        for b in bootstrap:
            host, _, port = b.rpartition(":")
            if not host or not port.isdigit():
                raise UsageError(f"--bootstrap takes HOST:PORT[,HOST:PORT...], got {b!r}")
    else:
        bootstrap = listener_addresses(urls, args.token or None, verify)
    tls = bool(urls) and urls[0].startswith("https://")
    security: dict[str, Any] = {}
    if tls:
        security["ssl_context"] = _tls_context(verify)
    if args.token:
        security.update(
            security_protocol="SASL_SSL" if tls else "SASL_PLAINTEXT",
            sasl_mechanism="PLAIN",
            sasl_plain_username="tiered-log",
            sasl_plain_password=args.token,
        )
    else:
        security["security_protocol"] = "SSL" if tls else "PLAINTEXT"
    return Connection(bootstrap, security)


@dataclass(slots=True)
class Outcome:
    """What a run did: ``count`` records printed, ``committed`` (topic, partition) ->
    the next offset committed by this run, ``failed_commit`` why the commit at exit failed
    (None when it did not), ``broken_pipe`` whether stdout's reader went away."""

    count: int = 0
    committed: dict[tuple[str, int], int] = field(default_factory=dict)
    failed_commit: str | None = None
    broken_pipe: bool = False

    def summary(self, group: str) -> str:
        """The line printed on stderr at exit."""
        done = ", ".join(f"{t} [{p}] {o}" for (t, p), o in sorted(self.committed.items()))
        line = f"consumed {counted(self.count, 'record')} in group {group}; "
        line += f"committed next offsets: {done}" if done else "nothing committed"
        if self.failed_commit:
            line += f"; the last commit failed ({self.failed_commit})"
        return line


def _write(out: IO[bytes], data: bytes) -> None:
    out.write(data)
    out.flush()


def _partitions(tps: Iterable[TopicPartition]) -> str:
    by_topic: dict[str, list[int]] = {}
    for tp in tps:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    if not by_topic:
        return "no partitions"
    return ", ".join(f"{t} {sorted(ps)}" for t, ps in sorted(by_topic.items()))


class GroupMember:
    """One run of ``consume --group`` (see the module docstring). ``formats``: topic ->
    its record format; ``limit``: stop after that many records; ``follow``: wait for new
    records instead of stopping at the end. Event-loop only; used once."""

    def __init__(
        self,
        conn: Connection,
        group: str,
        topics: list[str],
        formats: Mapping[str, RecordFormat],
        *,
        reset: str,
        follow: bool,
        limit: int | None,
        out: IO[bytes],
        note: Note = _stderr_note,
    ) -> None:
        self.conn = conn
        self.group = group
        self.topics = topics
        self.formats = formats
        self.reset = reset
        self.follow = follow
        self.limit = limit
        self.out = out
        self.note = note
        self.outcome = Outcome()
        self._lock = asyncio.Lock()  # held while a batch is printed and while committing
        self._printed: dict[TopicPartition, int] = {}  # next offset after what was printed
        self._committed: dict[TopicPartition, int] = {}
        self._assigned: set[TopicPartition] | None = None  # None: between rebalances
        self._ends: dict[TopicPartition, int] = {}  # where -e stops, per assigned partition
        self._consumer: Any = None

    # ---- rebalance callbacks (aiokafka awaits them in its coordinator task) ----

    async def on_revoked(self, revoked: set[TopicPartition]) -> None:
        """Commit what was printed of the revoked partitions (after the batch being
        printed, if any) and forget them."""
        self._assigned = None
        async with self._lock:
            await self._commit(set(revoked))
            for tp in revoked:
                self._printed.pop(tp, None)
                self._ends.pop(tp, None)

    async def on_assigned(self, assigned: set[TopicPartition]) -> None:
        """Note the new assignment; its ends are asked by the main loop."""
        self._assigned = set(assigned)
        self.note(f"group {self.group}: assigned {_partitions(assigned)}")

    # ---- commits ----

    async def _commit(self, only: set[TopicPartition] | None = None) -> str | None:
        """Commit the printed offsets that moved (of ``only``, else all); the caller
        holds the lock. A commit the group's rebalance refused is noted and returned
        (why), not raised: the partition's next owner then prints those records again."""
        offsets = {
            tp: o
            for tp, o in self._printed.items()
            if (only is None or tp in only) and self._committed.get(tp) != o
        }
        if not offsets:
            return None
        try:
            await self._consumer.commit(offsets)
        except (CommitFailedError, IllegalStateError) as exc:
            self.note(
                f"group {self.group}: commit of {_partitions(offsets)} failed (the group "
                "rebalanced); their next owner prints those records again"
            )
            return f"the group rebalanced: {exc}"
        self._committed.update(offsets)
        for tp, o in offsets.items():
            self.outcome.committed[(tp.topic, tp.partition)] = o
        return None

    # ---- the run ----

    async def run(self, stop: asyncio.Event) -> Outcome:
        """Join, print, commit until done (see the module docstring); then leave."""
        member = self

        class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
            async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
                await member.on_revoked(revoked)

            async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
                await member.on_assigned(assigned)

        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.conn.bootstrap,
            group_id=self.group,
            client_id=CLIENT_ID,
            enable_auto_commit=False,
            auto_offset_reset=self.reset,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
            request_timeout_ms=30_000,
            **self.conn.security,
        )
        self._consumer = consumer
        started = False
        try:
            finished, _ = await _until(consumer.start(), stop)
            if not finished:
                return self.outcome
            started = True
            consumer.subscribe(self.topics, listener=Listener())
            await self._loop(consumer, stop)
        except KafkaConnectionError as exc:
            raise ConnectionFailedError(
                f"cannot reach the Kafka listener at {', '.join(self.conn.bootstrap)} "
                f"({exc}): set --bootstrap HOST:PORT (or the service's "
                "kafka_advertised_host to an address this machine reaches)"
            ) from None
        except KafkaError as exc:
            raise TieredLogError(f"group {self.group}: {type(exc).__name__}: {exc}") from None
        finally:
            if started:
                try:
                    self.outcome.failed_commit = await asyncio.wait_for(
                        self._final_commit(), FINAL_S
                    )
                except TimeoutError:
                    self.outcome.failed_commit = f"no answer from the coordinator in {FINAL_S:g} s"
                except KafkaError as exc:
                    self.outcome.failed_commit = f"{type(exc).__name__}: {exc}"
            # leaving the group hands its partitions to the other members at once
            with contextlib.suppress(KafkaError, TimeoutError):
                await asyncio.wait_for(consumer.stop(), FINAL_S)
        return self.outcome

    async def _final_commit(self) -> str | None:
        async with self._lock:
            return await self._commit()

    async def _loop(self, consumer: Any, stop: asyncio.Event) -> None:
        committed_at = time.monotonic()
        while not stop.is_set():
            left = None if self.limit is None else self.limit - self.outcome.count
            if left is not None and left <= 0:
                return
            finished, batches = await _until(
                consumer.getmany(timeout_ms=POLL_MS, max_records=left), stop
            )
            if not finished:
                return
            async with self._lock:
                if batches and not await self._print(batches):
                    return
                if time.monotonic() - committed_at >= COMMIT_INTERVAL_S:
                    finished, _ = await _until(self._commit(), stop)
                    if not finished:
                        return
                    committed_at = time.monotonic()
            if not self.follow and await self._at_end(consumer):
                return

    async def _print(self, batches: Mapping[TopicPartition, list[Any]]) -> bool:
        """Print ``batches`` (the lock held) and move the printed offsets; False when
        stdout's reader went away."""
        chunks: list[bytes] = []
        moved: dict[TopicPartition, int] = {}
        for tp, msgs in batches.items():
            fmt = self.formats[tp.topic]
            for m in msgs:
                rec = Record(m.offset, m.timestamp, m.key, m.value, tuple(m.headers), 0, 0)
                chunks.append(fmt.render(tp.partition, rec))
                moved[tp] = m.offset + 1
        try:
            await asyncio.to_thread(_write, self.out, b"".join(chunks))
        except BrokenPipeError:
            self.outcome.broken_pipe = True
            return False
        self._printed.update(moved)
        self.outcome.count += len(chunks)
        return True

    async def _at_end(self, consumer: Any) -> bool:
        """Whether every partition assigned has been printed to the end it had when
        assigned (False between rebalances)."""
        assigned = self._assigned
        if assigned is None:
            return False
        try:
            new = [tp for tp in assigned if tp not in self._ends]
            if new:
                self._ends.update(await consumer.end_offsets(new))
            for tp in assigned:
                if await consumer.position(tp) < self._ends[tp]:
                    return False
        except IllegalStateError:  # a rebalance began meanwhile
            return False
        return self._assigned is assigned  # no rebalance meanwhile


async def _until(work: Any, stop: asyncio.Event) -> tuple[bool, Any]:
    """``(True, work's result)``, or ``(False, None)`` once ``stop`` is set first
    (``work`` cancelled)."""
    task = asyncio.ensure_future(work)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
    if task.done():
        return True, task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, KafkaError):
        await task
    return False, None


def consume_in_group(
    args: argparse.Namespace, verify: bool | str, formats: Mapping[str, RecordFormat]
) -> int:
    """Run ``consume --group`` as a member (see the module docstring); the exit status.
    Ctrl-C and SIGTERM end it cleanly (commit, leave, summary, exit 0)."""
    conn = connection_of(args, verify)
    member = GroupMember(
        conn,
        args.group,
        list(args.topic),
        formats,
        reset="latest" if args.offset is not None and args.offset.kind == "end" else "earliest",
        follow=args.follow,
        limit=args.max_records,
        out=sys.stdout.buffer,
    )

    async def main() -> Outcome:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            return await member.run(stop)
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)

    quiet = logging.NullHandler()
    kafka_log = logging.getLogger("aiokafka")
    if not os.environ.get("TIERED_LOG_DEBUG"):
        kafka_log.addHandler(quiet)  # its warnings would reach stderr through lastResort
        kafka_log.propagate = False
    try:
        outcome = asyncio.run(main())
    finally:
        kafka_log.removeHandler(quiet)
        kafka_log.propagate = True
    if outcome.broken_pipe:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    _stderr_note(outcome.summary(args.group))
    return 1 if outcome.failed_commit else 0


__all__ = [
    "COMMIT_INTERVAL_S",
    "Connection",
    "GroupMember",
    "Outcome",
    "connection_of",
    "consume_in_group",
    "joins_group",
    "listener_addresses",
]
