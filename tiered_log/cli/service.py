"""The service at the command line: ``tiered-log serve``, ``topics``, ``produce``, ``consume``.

::

    tiered-log serve [--data-dir D] [--port P] [--kafka-port K] ...  run the service
    tiered-log topics create orders --partitions 3 [--replication-factor 3]
    tiered-log topics list|describe|delete ...
    tiered-log topics alter orders --config retention_ms=86400000 [--delete-config K]
                                   [--partitions N]
    tiered-log topics delete-records orders [-p P] --before OFFSET|end
    tiered-log produce orders --file lines.txt
    tiered-log consume orders --offset 0 --follow
    tiered-log consume orders [more topics] --group G       a member of group G

``serve`` runs :mod:`tiered_log.service` (its options come from
:func:`tiered_log.service.server.add_serve_arguments`). The client commands talk to
``--url`` (default ``$TIERED_LOG_URL`` or ``http://127.0.0.1:8080``; several URLs,
comma-separated, name nodes of a cluster) with ``--token`` (default
``$TIERED_LOG_TOKEN``) through :class:`tiered_log.client.Client`, which follows
partition leaders and retries across a leader change for ``--retry-timeout`` seconds. A runner
returns the exit status (0 ok, 1 failed, 2 bad usage or settings); a library or
connection error is one line ``tiered-log: <code>: <message>`` on stderr and exit 1.
Long runs of ``produce``/``consume`` show progress on stderr (when it is a terminal, or
with ``--progress``). ``consume --follow`` stops cleanly on SIGTERM or Ctrl-C.
One command per process; not thread-safe.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import IO, TYPE_CHECKING, Any

from ..errors import TieredLogError
from .registry import (
    CommandGroup,
    Runner,
    UsageError,
    counted,
    non_negative_int,
    positive_int,
    timestamp_ms,
)
from .topics_view import print_topic, print_topic_list

if TYPE_CHECKING:
    import httpx

    from ..client import Client, FetchResult
    from ..format.records import ProducerRecord

# The client, the record codec and the consume and produce helpers are imported by the
# commands that use them: the other commands of the command line start without them.

COMMANDS = CommandGroup()
"""``serve``, ``topics ...``, ``produce``, ``consume``."""


def _fail(msg: str) -> int:
    print(f"tiered-log: {msg}", file=sys.stderr)
    return 1


def _client(args: argparse.Namespace) -> Client:
    from ..client import Client

    verify: bool | str = True
    if getattr(args, "cacert", None):
        verify = str(args.cacert)
    elif getattr(args, "insecure", False):
        verify = False
    return Client(
        args.url, token=args.token or None, verify=verify, retry_timeout_s=args.retry_timeout
    )


def _try_get(http: httpx.Client, url: str) -> httpx.Response | None:
    """GET ``url`` with ``http``; None when nothing answers (a dead node of a cluster:
    the caller asks the next one)."""
    import httpx

    try:
        return http.get(url)
    except httpx.HTTPError:
        return None


def _verify(args: argparse.Namespace) -> bool | str:
    if getattr(args, "cacert", None):
        return str(args.cacert)
    return not getattr(args, "insecure", False)


GROUP_COMMIT_S = 1.0
"""How often ``consume --group`` commits what it printed (and once more at exit)."""


def _client_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--url",
        default=os.environ.get("TIERED_LOG_URL", "http://127.0.0.1:8080"),
        help="service URL, or several comma-separated (any nodes of a cluster: "
        "requests follow the partition leaders) (default $TIERED_LOG_URL or "
        "http://127.0.0.1:8080)",
    )
    p.add_argument(
        "--retry-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="in a cluster, how long to retry a request across a leader change (default 30)",
    )
    p.add_argument(
        "--token",
        default=os.environ.get("TIERED_LOG_TOKEN"),
        help="bearer token (default $TIERED_LOG_TOKEN)",
    )
    p.add_argument("--cacert", help="CA bundle to verify the server's TLS certificate")
    p.add_argument("--insecure", action="store_true", help="do not verify TLS certificates")


class Progress:
    """A one-line progress report on stderr, at most every ``interval`` seconds, shown
    only once a run lasts longer than ``after`` seconds. Single-threaded use."""

    def __init__(
        self,
        verb: str,
        enabled: bool,
        *,
        after: float = 1.0,
        interval: float = 0.5,
        stream: IO[str] | None = None,
    ) -> None:
        self.verb = verb
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.start = time.monotonic()
        self.after = after
        self.interval = interval
        self.last = 0.0
        self.shown = False

    def update(self, count: int, extra: str = "") -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self.start < self.after or now - self.last < self.interval:
            return
        self.last = now
        rate = count / max(now - self.start, 1e-9)
        self.stream.write(f"\r{self.verb} {counted(count, 'record')} ({rate:,.0f}/s){extra}   ")
        self.stream.flush()
        self.shown = True

    def done(self) -> None:
        if self.shown:
            self.stream.write("\n")
            self.stream.flush()


def _progress_enabled(args: argparse.Namespace) -> bool:
    if args.progress is not None:
        return bool(args.progress)
    return sys.stderr.isatty()


# ---- arguments and errors ------------------------------------------------------------------


def _guard(fn: Runner) -> Runner:
    """Turn library and connection errors into one line on stderr and exit 1."""

    def run(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except TieredLogError as exc:
            return _fail(f"{exc.code}: {exc.message if hasattr(exc, 'message') else exc}")

    run.__name__ = fn.__name__
    run.__doc__ = fn.__doc__
    return run


def _serve_args(p: argparse.ArgumentParser) -> None:
    from ..service.server import add_serve_arguments

    add_serve_arguments(p)


def _topics_create_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", help="the topic's name")
    p.add_argument(
        "--partitions",
        type=positive_int,
        default=1,
        metavar="N",
        help="how many partitions the topic has (default: %(default)s)",
    )
    p.add_argument(
        "--replication-factor",
        type=int,
        metavar="N",
        help="copies of each partition (cluster; default min(3, live nodes))",
    )
    p.add_argument(
        "--min-insync-replicas",
        type=int,
        metavar="N",
        help="in-sync replicas an acks=all produce needs (cluster; default "
        "min(2, replication factor))",
    )
    p.add_argument(
        "--config",
        action="append",
        metavar="NAME=VALUE",
        help="override a topic default, e.g. flush_messages=100, retention_ms=null",
    )
    p.add_argument("--json", action="store_true", help="print the description as JSON")
    _client_options(p)


def _topics_list_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the list as JSON")
    _client_options(p)


def _topic_name_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", help="the topic's name")
    _client_options(p)


def _produce_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("topic", help="the topic to append to")
    p.add_argument(
        "-p",
        "--partition",
        type=non_negative_int,
        metavar="N",
        help="send every record to partition N (default: as Kafka's default "
        "partitioner: a keyed record to the partition of the murmur2 hash of its "
        "key, keyless records one partition per batch, in turn)",
    )
    keys = p.add_mutually_exclusive_group()
    keys.add_argument(
        "-K",
        "--key-separator",
        metavar="SEP",
        help="each line is KEY SEP VALUE, split at the first SEP (a line "
        "without SEP is a value without a key); default: no key",
    )
    keys.add_argument("--key", help="the key (UTF-8) of every record; default: no key")
    p.add_argument("-f", "--file", help="read lines from this file (default: stdin)")
    p.add_argument(
        "--batch-size",
        type=positive_int,
        default=500,
        metavar="N",
        help="most records per request (default: %(default)s)",
    )
    p.add_argument(
        "--linger-ms",
        type=non_negative_int,
        default=100,
        metavar="MS",
        help="send a batch at the latest this long after its first line was read, "
        "as Kafka's linger.ms (default: %(default)s)",
    )
    p.add_argument(
        "--acks",
        choices=["all", "1"],
        help="cluster: all (every in-sync replica has the records; the default "
        "with replicas) or 1 (the leader has them)",
    )
    p.add_argument(
        "-Z",
        "--null",
        action="store_true",
        help="send an empty value as a null value (a tombstone), as kcat's -Z "
        "(default: an empty value)",
    )
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show progress on stderr (default: when stderr is a terminal)",
    )
    _client_options(p)


def _consume_args(p: argparse.ArgumentParser) -> None:
    from .consume import offset_spec

    p.add_argument(
        "topic",
        nargs="+",
        help="the topic to read (several: as a member of --group G, which subscribes to them all)",
    )
    p.add_argument(
        "-p",
        "--partition",
        type=non_negative_int,
        metavar="N",
        help="read partition N only (default: every partition of the topic)",
    )
    start = p.add_mutually_exclusive_group()
    start.add_argument(
        "-o",
        "--offset",
        type=offset_spec,
        metavar="SPEC",
        help="where to start in each partition, as kcat's -o: beginning, end, "
        "N (that offset), -N (N records before the end), s@TIME (the first "
        "record at or after TIME, ms or ISO 8601), stored (--group's committed "
        "offsets, read without joining); a member of --group starts at the group's "
        "commits, and at beginning or end where it has none (default: beginning)",
    )
    start.add_argument(
        "--timestamp",
        type=timestamp_ms,
        metavar="TIME",
        help="start at the first record at or after TIME (ms since the epoch "
        "or ISO 8601, UTC if no zone), as -o s@TIME",
    )
    p.add_argument(
        "-G",
        "--group",
        metavar="GROUP",
        help="consume as a member of consumer group GROUP, as kcat -G: join it through the "
        "service's Kafka listener, print the partitions the group assigns, commit what was "
        "printed; with -p, -o stored, -o N, -N or s@TIME instead: start at GROUP's "
        "committed offsets (else there) without joining and commit over HTTP (refused "
        "while GROUP has members)",
    )
    p.add_argument(
        "--bootstrap",
        metavar="HOST:PORT",
        help="the Kafka listener a --group member joins through, as kcat's -b (default: "
        "the address the service at --url reports)",
    )
    ends = p.add_mutually_exclusive_group()
    ends.add_argument(
        "--follow",
        action="store_true",
        help="keep waiting for new records (through a server restart) until Ctrl-C or SIGTERM",
    )
    ends.add_argument(
        "-e",
        "--exit",
        action="store_true",
        help="stop at the end of the partitions, as kcat's -e (the default without --follow)",
    )
    p.add_argument(
        "-c",
        "-n",
        "--max-records",
        type=positive_int,
        metavar="N",
        help="stop after N records, as kcat's -c (default: no limit)",
    )
    p.add_argument(
        "-f",
        "--format",
        default="value",
        metavar="FORMAT",
        help="how to print a record: value (the value, one a line), json (one "
        "JSON object a line, with topic and partition) or a kcat -f format string: "
        "%%t topic, %%p partition, %%o offset, %%k key, %%s value, %%T timestamp "
        "(ms), %%h headers (name=value,...), %%K/%%S key/value size, \\n \\t "
        "(nothing is added at the end) (default: %(default)s)",
    )
    p.add_argument(
        "-Z",
        "--null",
        action="store_true",
        help="print a null key or value (a tombstone) as NULL, as kcat's -Z (default: as nothing)",
    )
    p.add_argument(
        "--skip-lost",
        action="store_true",
        help="go on past offsets lost in a restore (410 data_loss) instead of stopping there",
    )
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show progress on stderr (default: when stderr is a terminal)",
    )
    _client_options(p)


# ---- serve -----------------------------------------------------------------------------------


@COMMANDS.command("serve", "run the service (HTTP API and Kafka listener)", _serve_args)
def cmd_serve(args: argparse.Namespace) -> int:
    from ..service.server import serve_from_args

    return serve_from_args(args)


# ---- topics ----------------------------------------------------------------------------------

TOPICS = COMMANDS.group("topics", "create, list, describe, alter, delete topics")
"""``tiered-log topics create|list|describe|alter|delete``."""


def _parse_config_items(items: list[str], *, words: bool = False) -> dict[str, Any]:
    """``NAME=VALUE`` pairs (``--config``): an integer, true/false, null/none, and with
    ``words`` any other value as the word itself (``remote_compression=lz4``); without,
    ValueError for it. ValueError for an item that is not ``NAME=VALUE``."""
    out: dict[str, Any] = {}
    for item in items:
        name, sep, raw = item.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"--config takes NAME=VALUE, got {item!r}")
        low = raw.strip().lower()
        value: Any
        if low in ("null", "none"):
            value = None
        elif low in ("true", "false"):
            value = low == "true"
        else:
            try:
                value = int(raw)
            except ValueError:
                if not words:
                    raise ValueError(
                        f"--config {name}: {raw!r} is not an integer, true/false or null"
                    ) from None
                value = raw.strip()
        out[name.strip()] = value
    return out


@TOPICS.command("create", "create a topic", _topics_create_args)
@_guard
def cmd_topics_create(args: argparse.Namespace) -> int:
    try:
        config = _parse_config_items(args.config or [])
    except ValueError as exc:
        print(f"tiered-log: {exc}", file=sys.stderr)
        return 2
    with _client(args) as c:
        d = c.create_topic(
            args.name,
            args.partitions,
            config,
            replication_factor=args.replication_factor,
            min_insync_replicas=args.min_insync_replicas,
        )
    print(
        json.dumps(d, indent=2)
        if args.json
        else f"created topic {d['name']} with {d['partitions']} partition(s)"
    )
    return 0


@TOPICS.command("list", "list topics", _topics_list_args)
@_guard
def cmd_topics_list(args: argparse.Namespace) -> int:
    with _client(args) as c:
        topics = c.list_topics()
    if args.json:
        print(json.dumps(topics, indent=2))
    else:
        print_topic_list(topics, sys.stdout)
    return 0


def _topics_describe_args(p: argparse.ArgumentParser) -> None:
    _topic_name_args(p)
    p.add_argument("--json", action="store_true", help="print the service's JSON answer")


@TOPICS.command(
    "describe", "a topic's configuration and partitions (--json: JSON)", _topics_describe_args
)
@_guard
def cmd_topics_describe(args: argparse.Namespace) -> int:
    with _client(args) as c:
        d = c.describe_topic(args.name)
    if args.json:
        print(json.dumps(d, indent=2))
    else:
        print_topic(d, sys.stdout)
    return 0


def _topics_alter_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", help="the topic's name")
    p.add_argument(
        "--config",
        action="append",
        metavar="NAME=VALUE",
        help="a setting to change (repeatable), as topics create takes it: an integer, "
        "true/false, null or -1 (no limit), or a word (remote_compression=lz4)",
    )
    p.add_argument(
        "--delete-config",
        action="append",
        metavar="NAME",
        help="a setting set back to the server's default (repeatable)",
    )
    p.add_argument(
        "--remote-disable-policy",
        choices=("retain", "delete"),
        help="with --config remote_enabled=false: keep the remote data readable until "
        "retention removes it (retain) or delete it now (delete)",
    )
    p.add_argument(
        "--partitions",
        type=int,
        metavar="N",
        help="grow the topic to N partitions (the count only grows; keys hashed by "
        "producers may go to another partition from then on, as in Kafka)",
    )
    p.add_argument("--json", action="store_true", help="print the service's JSON answer")
    _client_options(p)


@TOPICS.command(
    "alter", "change a topic's settings or grow its partitions while it serves", _topics_alter_args
)
@_guard
def cmd_topics_alter(args: argparse.Namespace) -> int:
    try:
        config = _parse_config_items(args.config or [], words=True)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    reset = [n.strip() for n in args.delete_config or []]
    if not config and not reset and args.partitions is None:
        raise UsageError(
            "nothing to change: give --config NAME=VALUE, --delete-config NAME or --partitions N"
        )
    if args.partitions is not None and args.partitions < 1:
        raise UsageError(f"--partitions must be at least 1, not {args.partitions}")
    with _client(args) as c:
        d = c.alter_topic(
            args.name,
            config,
            delete_config=reset,
            remote_disable_policy=args.remote_disable_policy,
            partitions=args.partitions,
        )
    if args.json:
        print(json.dumps(d, indent=2))
    else:
        changed = [f"{k}={d['config'].get(k)}" for k in [*config, *reset]]
        if args.partitions is not None:
            changed.insert(0, f"partitions={d['partitions']}")
        print(f"altered topic {d['name']}: {', '.join(changed)}")
    return 0


def _delete_records_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", help="the topic's name")
    p.add_argument(
        "-p",
        "--partition",
        type=int,
        action="append",
        metavar="P",
        help="a partition (repeatable; default: every partition)",
    )
    p.add_argument(
        "--before",
        required=True,
        metavar="OFFSET",
        help="delete every record below this offset (the log start moves up to it), or "
        "'end': every committed record (Kafka's kafka-delete-records; -1 likewise)",
    )
    p.add_argument("--json", action="store_true", help="print each partition's new bounds")
    _client_options(p)


@TOPICS.command(
    "delete-records",
    "delete the records below an offset (the log start moves up to it)",
    _delete_records_args,
)
@_guard
def cmd_topics_delete_records(args: argparse.Namespace) -> int:
    before = -1 if args.before.strip().lower() in ("end", "-1") else None
    if before is None:
        if not args.before.strip().isdigit():
            raise UsageError(f"--before must be an offset >= 0 or 'end', not {args.before!r}")
        before = int(args.before)
    with _client(args) as c:
        parts = args.partition or list(range(c.partitions(args.name)))
        done = {p: c.delete_records(args.name, p, before) for p in parts}
    if args.json:
        print(json.dumps({str(p): b.as_dict() for p, b in done.items()}, indent=2))
    else:
        for p, b in done.items():
            print(
                f"{args.name}/{p}: log start {b.log_start_offset} "
                f"(records [{b.log_start_offset}, {b.next_offset}) remain)"
            )
    return 0


@TOPICS.command("delete", "delete a topic and its records", _topic_name_args)
@_guard
def cmd_topics_delete(args: argparse.Namespace) -> int:
    with _client(args) as c:
        c.delete_topic(args.name)
    print(f"deleted topic {args.name}")
    return 0


# ---- produce ---------------------------------------------------------------------------------


@COMMANDS.command("produce", "append lines (stdin or --file) as records", _produce_args)
@_guard
def cmd_produce(args: argparse.Namespace) -> int:
    """Send the input's lines in batches (see :mod:`.produce`); print on stderr what was
    acknowledged, on Ctrl-C too (exit 130)."""
    from .produce import Acknowledged, line_to_record, lines_with_linger

    if args.key_separator == "":
        raise UsageError("--key-separator must not be empty")
    separator = None if args.key_separator is None else args.key_separator.encode("utf-8")
    key = None if args.key is None else args.key.encode("utf-8")
    try:
        stream: IO[bytes] = open(args.file, "rb") if args.file else sys.stdin.buffer  # noqa: SIM115
    except OSError as exc:
        return _fail(f"cannot read {args.file}: {exc.strerror or exc}")
    progress = Progress("produced", _progress_enabled(args))
    acked = Acknowledged(args.topic)
    try:
        with _client(args) as c:
            for lines, _ in lines_with_linger(
                stream, batch_size=args.batch_size, linger_ms=args.linger_ms
            ):
                batch: list[ProducerRecord | bytes] = [
                    line_to_record(line, separator=separator, key=key, empty_is_null=args.null)
                    for line in lines
                ]
                if not batch:
                    continue
                acked.unsent = len(batch)
                groups = (
                    {args.partition: list(range(len(batch)))}
                    if args.partition is not None
                    else c.assign_partitions(args.topic, batch)
                )
                for p, idx in groups.items():
                    acked.unsent -= len(idx)
                    acked.in_flight = len(idx)
                    acked.add(p, c.produce(args.topic, p, [batch[i] for i in idx], acks=args.acks))
                    acked.in_flight = 0
                progress.update(acked.total)
    except KeyboardInterrupt:
        progress.done()
        print(f"tiered-log: {acked.summary(interrupted=True)}", file=sys.stderr)
        return 130
    except TieredLogError:
        if acked.total:  # what the service has, before the error line
            progress.done()
            print(acked.summary(), file=sys.stderr)
        raise
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()
        progress.done()
    print(acked.summary(), file=sys.stderr)
    return 0


# ---- consume ---------------------------------------------------------------------------------


_PUT_WAIT_S = 0.2
"""How often a partition's reader thread, with a full queue, looks whether to stop."""


def _put(
    q: queue.Queue[tuple[int, object]], item: tuple[int, object], stop: threading.Event
) -> None:
    while not stop.is_set():
        try:
            q.put(item, timeout=_PUT_WAIT_S)
            return
        except queue.Full:
            continue


def _merged(
    pages_of: Callable[[int], Iterator[FetchResult]], parts: list[int], stop: threading.Event
) -> Iterator[tuple[int, FetchResult]]:
    """The pages of every partition in ``parts`` as they come, each partition read by a
    daemon thread (``--follow`` over several partitions); an error of one is raised here."""
    from ..client import FetchResult

    q: queue.Queue[tuple[int, object]] = queue.Queue(maxsize=4 * len(parts))

    def pump(p: int) -> None:
        try:
            for page in pages_of(p):
                _put(q, (p, page), stop)
            _put(q, (p, None), stop)
        except BaseException as exc:  # raised by the consuming thread
            _put(q, (p, exc), stop)

    for p in parts:
        threading.Thread(target=pump, args=(p,), name=f"tl-consume-{p}", daemon=True).start()
    live = len(parts)
    while live and not stop.is_set():
        try:
            p, item = q.get(timeout=_PUT_WAIT_S)
        except queue.Empty:
            continue
        if item is None:
            live -= 1
        elif isinstance(item, BaseException):
            raise item
        else:
            assert isinstance(item, FetchResult)
            yield p, item


@COMMANDS.command("consume", "print records of every partition (values, one a line)", _consume_args)
@_guard
def cmd_consume(args: argparse.Namespace) -> int:
    """Print the records of the topic's partitions from the start ``-o`` says (see
    :mod:`.consume`); with ``--follow`` until Ctrl-C or SIGTERM. As a member of
    ``--group``: :mod:`.consume_group`."""
    from .consume import GroupPosition, OffsetSpec, RecordFormat, partition_pages, start_offset
    from .consume_group import consume_in_group, joins_group  # aiokafka: only here

    topics: list[str] = args.topic
    try:
        formats = {t: RecordFormat(args.format, t, b"NULL" if args.null else b"") for t in topics}
    except argparse.ArgumentTypeError as exc:
        raise UsageError(str(exc)) from None
    if joins_group(args):
        with _client(args) as c:
            for t in topics:
                c.partitions(t)  # a missing topic fails as it does without --group
        return consume_in_group(args, _verify(args), formats)
    if len(topics) > 1:
        raise UsageError(
            "several topics are read by a member of a group: --group G without -p and with "
            "-o beginning or end only"
        )
    args.topic = topics[0]
    fmt = formats[args.topic]
    spec = (
        OffsetSpec("timestamp", args.timestamp)
        if args.timestamp is not None
        else args.offset or OffsetSpec("beginning")
    )
    stop = threading.Event()

    def on_term(sig: int, frame: FrameType | None) -> None:
        stop.set()

    old = signal.signal(signal.SIGTERM, on_term)
    progress = Progress("consumed", _progress_enabled(args))
    out = sys.stdout.buffer
    count = 0
    limit = args.max_records
    next_offsets: dict[int, int] = {}
    group = (
        GroupPosition(args.url.split(","), args.token, _verify(args), args.group, args.topic)
        if args.group
        else None
    )
    committed_at = time.monotonic()
    try:
        with _client(args) as c:
            parts = (
                [args.partition]
                if args.partition is not None
                else list(range(c.partitions(args.topic)))
            )
            stored = group.load() if group is not None else {}
            if group is not None and spec.kind == "stored":
                spec = OffsetSpec("beginning")  # partitions without a commit
            elif args.offset is not None or args.timestamp is not None:
                stored = {}  # an explicit -o wins over the group's offsets
            next_offsets = {
                p: stored[p] if p in stored else start_offset(c, args.topic, p, spec) for p in parts
            }
            one = len(parts) == 1

            def pages_of(p: int) -> Iterator[FetchResult]:
                end = next_offsets[p] + limit if one and limit is not None else None
                return partition_pages(
                    c,
                    args.topic,
                    p,
                    next_offsets[p],
                    end_offset=end,
                    follow=args.follow,
                    skip_lost=args.skip_lost,
                    stop=stop,
                )

            stream = (
                _merged(pages_of, parts, stop)
                if args.follow and not one
                else ((p, page) for p in parts for page in pages_of(p))
            )
            for p, page in stream:
                for rec in page.records:
                    if limit is not None and count >= limit:
                        break
                    out.write(fmt.render(p, rec))
                    count += 1
                    next_offsets[p] = rec.offset + 1
                else:
                    next_offsets[p] = page.next_offset
                out.flush()
                progress.update(count, f", at offset {page.next_offset} of partition {p}")
                if group is not None and time.monotonic() - committed_at >= GROUP_COMMIT_S:
                    group.commit(next_offsets)
                    committed_at = time.monotonic()
                if stop.is_set() or (limit is not None and count >= limit):
                    break
            stop.set()
    except KeyboardInterrupt:
        stop.set()
    except BrokenPipeError:
        # The reader went away (``| head``): exit quietly, without a flush error at exit.
        stop.set()
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 0
    finally:
        stop.set()
        signal.signal(signal.SIGTERM, old)
        progress.done()
        if group is not None:
            try:
                group.commit(next_offsets)
            finally:
                group.close()
    if args.progress:
        where = ", ".join(f"{p}: {o}" for p, o in sorted(next_offsets.items()))
        print(
            f"consumed {counted(count, 'record')}, next offset{'s' if len(next_offsets) > 1 else ''} "
            f"{where if len(next_offsets) > 1 else next(iter(next_offsets.values()), 0)}",
            file=sys.stderr,
        )
    return 0


__all__ = ["COMMANDS", "TOPICS"]
