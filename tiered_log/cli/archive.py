"""The archive's operations: ``tiered-log archive ...``.

::

    tiered-log archive rewrap --remote URL --key-file FILE [--endpoint-url URL]
                              [--region R] [--prefix P] [--json]
    tiered-log archive scrub --remote URL [--key-file FILE] [--topic T] [--rate MiB/s]
                             [--endpoint-url URL] [--region R] [--json]
    tiered-log archive scrub --url URL [--topic T] [--json]
    tiered-log archive reconcile --remote URL [--topic T] [--delete] [--min-age-s N]
                                 [--endpoint-url URL] [--region R] [--json]
    tiered-log archive restore --topic T --as NEW [--to-timestamp TS] [--to-offset O]
                               (--remote URL [--key-file FILE] | --url URL) [--json]

``rewrap`` re-wraps the data key of every encrypted segment in the bucket with the key
ring's active key (:mod:`tiered_log.remote.rewrap`), without reading or writing any data
object, so that an older key can then be removed from the ring. It works on the bucket
directly and is safe while services ship to it (give it the ring file the services use:
they re-read it when it changes). It prints what it did (or one JSON object) and exits
1 when a manifest could not be rewrapped (each named, with why) or some are still
wrapped with another key.

``scrub --remote`` reads every archived segment in the bucket back and verifies it
(:mod:`tiered_log.remote.scrub`), writing nothing; it prints each damaged segment and
exits 1 when there is any. ``scrub --url`` has every live node of a running service run
a pass now (``POST /v1/archive/scrub``: both tiers of the partitions each holds,
:mod:`tiered_log.partition.scrub`), which repairs what a good copy mends; it prints each
damaged segment with what its repair did and exits 1 when damage stays. ``reconcile``
lists the objects nothing references and the dangling references
(:mod:`tiered_log.remote.reconcile`), deletes the orphans past the grace period only with
``--delete``, and exits 1 when a reference dangles. Both are safe while services ship to
the bucket.

``restore`` makes a new topic holding a topic's records up to a time or an offset
(:mod:`tiered_log.broker.point_in_time`), from the bucket alone (``--remote``) or through
a running service (``--url``), which adds its unshipped records and serves the new topic.

Output goes to stdout, progress to stderr. One command per process; not thread-safe.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .registry import CommandGroup, UsageError, counted, timestamp_ms

if TYPE_CHECKING:
    from ..remote.crypto import KeyRing
    from ..remote.reconcile import LiveView
    from ..remote.storage import RemoteStorage

COMMANDS = CommandGroup()
"""``archive`` and its commands."""
ARCHIVE = COMMANDS.group(
    "archive", "operations on the archive in the bucket (rewrap, scrub, reconcile, restore)"
)


def _rewrap_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--remote",
        metavar="URL",
        required=True,
        help="the bucket the services ship to (s3://bucket/prefix, file:///dir or a "
        "directory: the services' remote_url)",
    )
    p.add_argument(
        "--key-file",
        metavar="FILE",
        required=True,
        type=Path,
        help="the key ring (the services' remote_encryption_key_file); its active key "
        "wraps every data key",
    )
    p.add_argument("--endpoint-url", metavar="URL", help="S3 endpoint (MinIO, moto, ...)")
    p.add_argument("--region", help="S3 region")
    p.add_argument(
        "--prefix", default="", help="only the objects under this key prefix (e.g. one log)"
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")


@ARCHIVE.command(
    "rewrap",
    "wrap every segment's data key with the key ring's active key (no data rewritten)",
    _rewrap_args,
)
def cmd_rewrap(args: argparse.Namespace) -> int:
    from ..remote.crypto import KeyRing
    from ..remote.rewrap import rewrap_bucket
    from ..remote.storage import open_storage

    ring = KeyRing(args.key_file)
    storage = open_storage(args.remote, endpoint_url=args.endpoint_url, region=args.region)
    try:
        report = rewrap_bucket(
            storage, ring, args.prefix, progress=lambda line: print(line, file=sys.stderr)
        )
    finally:
        close = getattr(storage, "close", None)
        if close is not None:
            close()
    others = {k: n for k, n in report.by_key.items() if k != report.active}
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print(
            f"rewrapped {counted(report.rewrapped, 'manifest')} with key {report.active!r} "
            f"({report.already} were already, {report.unencrypted} unencrypted); "
            + (
                "no manifest is wrapped with another key"
                if not others
                else "still wrapped with other keys: "
                + ", ".join(f"{k} {n}" for k, n in sorted(others.items()))
            )
        )
        for line in report.problems:
            print(f"PROBLEM {line}")
    return 1 if report.problems or others else 0


def _bucket_args(p: argparse.ArgumentParser, *, required: bool = True) -> None:
    """The options naming the bucket, as ``rewrap`` takes them (the key ring optional);
    ``required=False``: ``--remote`` may be left out (a command that also takes
    ``--url``)."""
    p.add_argument(
        "--remote",
        metavar="URL",
        required=required,
        help="the bucket the services ship to (s3://bucket/prefix, file:///dir or a "
        "directory: the services' remote_url)",
    )
    p.add_argument("--endpoint-url", metavar="URL", help="S3 endpoint (MinIO, moto, ...)")
    p.add_argument("--region", help="S3 region")
    p.add_argument("--topic", metavar="T", help="only this topic's segments")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def _mib_per_sec(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of MiB/s: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"the rate must be a positive number of MiB/s: {text!r}")
    return value


def _service_args(p: argparse.ArgumentParser, what: str) -> None:
    """``--url`` (a running service, any nodes of a cluster, comma-separated: ``what``
    it is for) and ``--token``."""
    p.add_argument(
        "--url", metavar="URL", help=f"a running service (any nodes of a cluster, {what}"
    )
    p.add_argument("--token", help="bearer token for --url (default $TIERED_LOG_TOKEN)")


def _scrub_args(p: argparse.ArgumentParser) -> None:
    _bucket_args(p, required=False)
    _service_args(p, "comma-separated), instead of --remote: a pass now on every node, repairing")
    p.add_argument(
        "--key-file",
        metavar="FILE",
        type=Path,
        help="the key ring (the services' remote_encryption_key_file), to verify encrypted "
        "segments' records; without it their stored checksums only",
    )
    p.add_argument(
        "--rate",
        metavar="MiB/s",
        type=_mib_per_sec,
        help="read at most this many MiB a second from the bucket (default: unlimited)",
    )


def _open_bucket(args: argparse.Namespace) -> RemoteStorage:
    from ..remote.storage import open_storage

    return open_storage(args.remote, endpoint_url=args.endpoint_url, region=args.region)


def _key_ring(args: argparse.Namespace) -> KeyRing | None:
    """The archive's key ring from ``--key-file``, or None without one."""
    from ..remote.crypto import KeyRing

    return KeyRing(args.key_file) if args.key_file is not None else None


def _check_topic(storage: RemoteStorage, topic: str | None, found: int) -> None:
    """InvalidArgumentError when ``--topic`` names a topic the bucket knows nothing of
    (no segment found and no ``topics/<name>.json``)."""
    from ..errors import InvalidArgumentError, RemoteObjectNotFoundError
    from ..format import naming

    if topic is None or found:
        return
    try:
        storage.size(naming.topic_object_key(topic))
    except (RemoteObjectNotFoundError, InvalidArgumentError):
        raise InvalidArgumentError(
            f"topic {topic!r} has no metadata and no archived segment in {storage.url}"
        ) from None


def _segment_progress(line: Callable[[Any], str]) -> Callable[[Any], None]:
    """A progress callback for a bucket-wide pass whose report counts
    ``segments_done`` / ``segments_total``: ``line(report)`` on stderr at most once a
    second, and at the last segment."""
    shown = [0.0]

    def progress(rep: Any) -> None:
        now = time.monotonic()
        if now - shown[0] >= 1.0 or rep.segments_done == rep.segments_total:
            shown[0] = now
            print(line(rep), file=sys.stderr, flush=True)

    return progress


@ARCHIVE.command(
    "scrub",
    "read every archived segment back and verify it; exit 1 when damage is found",
    _scrub_args,
)
def cmd_scrub(args: argparse.Namespace) -> int:
    from ..remote.scrub import ScrubReport, scrub_bucket

    if (args.url is None) == (args.remote is None):
        raise UsageError("give either --remote (scrub the bucket now) or --url (a service's)")
    if args.url is not None:
        return _service_scrub(args)
    ring = _key_ring(args)
    storage = _open_bucket(args)

    def line(rep: ScrubReport) -> str:
        return (
            f"scrub: {rep.segments_done}/{rep.segments_total} segments, "
            f"{rep.bytes_read / (1 << 20):.1f} MiB read, {len(rep.damaged)} damaged"
        )

    progress = _segment_progress(line)

    try:
        report = scrub_bucket(
            storage,
            ring,
            topic=args.topic,
            bytes_per_sec=None if args.rate is None else max(1, int(args.rate * (1 << 20))),
            progress=progress,
        )
        _check_topic(storage, args.topic, report.segments_total)
    finally:
        storage.close()
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        for d in report.damaged:
            print(f"DAMAGED {d.line()}")
        print(
            f"scrubbed {counted(report.segments_done, 'segment')} "
            f"({report.chunks_verified} chunks, {report.bytes_read} bytes read, "
            f"{report.segments_skipped} skipped): "
            + (
                "no damage found"
                if not report.damaged
                else f"{counted(len(report.damaged), 'damaged segment')}"
            )
            + (
                "; keys missing from the key ring: "
                + ", ".join(
                    f"{k} ({counted(n, 'segment')})" for k, n in report.missing_keys.items()
                )
                if report.missing_keys
                else ""
            )
        )
    return 1 if report.damaged else 0


def _service_scrub(args: argparse.Namespace) -> int:
    """``scrub --url``: one pass now on every live node of the service (each checks both
    tiers of its partitions and repairs what a good copy mends), its progress on stderr
    while it runs, each damaged segment printed as a pass of ``scrub --remote`` prints
    it, with what its repair did; exit 1 when any damage stays."""
    import os
    import threading

    from ..client import Client
    from ..errors import TieredLogError

    for flag, value in (
        ("--key-file", args.key_file),
        ("--rate", args.rate),
        ("--endpoint-url", args.endpoint_url),
        ("--region", args.region),
    ):
        if value is not None:
            raise UsageError(f"{flag} goes with --remote (the service scrubs with its own)")
    token = args.token if args.token is not None else os.environ.get("TIERED_LOG_TOKEN")
    done = threading.Event()
    with Client(args.url, token) as client, Client(args.url, token) as watcher:

        def watch() -> None:  # the pass under way, from the node's anomalies
            shown = ""
            while not done.wait(1.0):
                try:
                    cur = watcher.archive_anomalies(args.topic)["current_pass"]
                except TieredLogError:
                    continue
                if cur is not None:
                    line = (
                        f"scrub: {cur['segments_checked']}/{cur['segments_total']} segments, "
                        f"{cur['bytes_read'] / (1 << 20):.1f} MiB read, "
                        f"{cur['segments_damaged']} damaged"
                    )
                    if line != shown:
                        print(line, file=sys.stderr, flush=True)
                        shown = line

        thread = threading.Thread(target=watch, name="scrub-progress", daemon=True)
        thread.start()
        try:
            nodes = client.archive_scrub(args.topic)
        finally:
            done.set()
            thread.join(5)
    if args.json:
        print(json.dumps(nodes, indent=2))
    damaged = [d for n in nodes for d in n["report"]["damaged"]]
    left = [d for d in damaged if not d["repaired"]]
    if not args.json:
        for d in damaged:
            where = f"{d['topic']}/{d['partition']}" if d["partition"] >= 0 else d["log_id"]
            end = d["next_offset"]
            offsets = (
                f"[{d['base_offset']}, {end})" if end is not None else f"from {d['base_offset']}"
            )
            tier = "local segment" if d["tier"] == "local" else "archived copy"
            print(
                f"{'REPAIRED' if d['repaired'] else 'DAMAGED'} {where} offsets {offsets} "
                f"{tier} {d['object_key']}: {'; '.join(d['problems'])}"
                + (f" ({d['repair']})" if d["repair"] else "")
            )
        checked = sum(n["report"]["segments_checked"] for n in nodes)
        print(
            f"scrubbed {counted(checked, 'segment')} on {counted(len(nodes), 'node')}: "
            + (
                "no damage found"
                if not damaged
                else f"{counted(len(damaged), 'damaged segment')}, "
                f"{len(damaged) - len(left)} repaired"
            )
        )
    return 1 if left else 0


def _reconcile_args(p: argparse.ArgumentParser) -> None:
    _bucket_args(p)
    p.add_argument(
        "--delete",
        action="store_true",
        help="delete the orphans older than --min-age-s (without it: a dry run, printing "
        "what it would delete)",
    )
    p.add_argument(
        "--min-age-s",
        metavar="N",
        type=_non_negative_seconds,
        default=None,
        help="the grace period: orphans written less than N seconds ago are kept "
        "(default 3600: longer than any copy's upload)",
    )
    _service_args(
        p,
        "comma-separated) on this bucket: what it serves is never deleted, its topics "
        "are never taken for deleted ones",
    )


def _live_view(args: argparse.Namespace) -> LiveView:
    """What the service at ``--url`` serves: its topics' log ids and the objects of
    every partition's finished copies (each partition asked of its leader)."""
    import os

    from ..client import Client
    from ..format import naming
    from ..remote.reconcile import LiveView

    ids: set[str] = set()
    keys: set[str] = set()
    token = args.token if args.token is not None else os.environ.get("TIERED_LOG_TOKEN")
    with Client(args.url, token) as client:
        for t in client.list_topics():
            name, tid, parts = t["name"], t["topic_id"], int(t["partitions"])
            for p in range(parts):
                ids.add(f"{name}-{tid[:12]}-{p}")
                for seg in client.archived_segments(name, p)["segments"]:
                    data = seg["object_key"]
                    keys.update((data, naming.manifest_key_of(data)))
    return LiveView(frozenset(ids), frozenset(keys))


def _non_negative_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of seconds >= 0: {text!r}")
    return value


@ARCHIVE.command(
    "reconcile",
    "find objects nothing references (and delete them with --delete) and manifests whose "
    "data is missing",
    _reconcile_args,
)
def cmd_reconcile(args: argparse.Namespace) -> int:
    from ..remote.reconcile import DEFAULT_MIN_AGE_S, reconcile_bucket

    storage = _open_bucket(args)
    try:
        report = reconcile_bucket(
            storage,
            topic=args.topic,
            delete=args.delete,
            min_age_s=DEFAULT_MIN_AGE_S if args.min_age_s is None else args.min_age_s,
            progress=lambda line: print(line, file=sys.stderr, flush=True),
            live_view=None if args.url is None else lambda: _live_view(args),
        )
        _check_topic(storage, args.topic, report.referenced + len(report.findings))
    finally:
        storage.close()
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
        return 1 if report.dangling else 0
    verbs = {
        "delete": "would delete",
        "deleted": "deleted",
        "young": "kept (younger than the grace period)",
        "changed": "kept (changed since it was listed)",
        "served": "kept (the service serves it)",
    }
    for f in report.findings:
        head = verbs.get(f.action, f.kind.upper().replace("_", " "))
        keys = ", ".join(f.keys) if f.keys else "-"
        print(f"{head}: {keys} ({f.bytes} bytes): {f.reason}")
    done, done_bytes = report.count("deleted")
    would, would_bytes = report.count("delete")
    young, _ = report.count("young")
    print(
        f"{counted(report.objects, 'object')}, {report.referenced} referenced; orphans: "
        + (
            f"{done} deleted ({done_bytes} bytes)"
            if args.delete
            else f"{would} would be deleted ({would_bytes} bytes; dry run: --delete deletes)"
        )
        + f", {young} younger than {report.min_age_s:g} s kept; "
        + f"{counted(len(report.dangling), 'dangling reference')}"
    )
    return 1 if report.dangling else 0


def _restore_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--topic", metavar="T", required=True, help="the topic restored from")
    p.add_argument(
        "--as", dest="as_topic", metavar="NEW", required=True, help="the new topic (must not exist)"
    )
    p.add_argument(
        "--to-timestamp",
        metavar="TS",
        type=timestamp_ms,
        help="keep the records up to the last one at or before TS (ms since the epoch or "
        "ISO 8601, UTC if no zone)",
    )
    p.add_argument(
        "--to-offset",
        metavar="O",
        type=_non_negative_int,
        help="keep the records below offset O (each partition; with --to-timestamp: the "
        "smaller end)",
    )
    p.add_argument(
        "--remote",
        metavar="URL",
        help="restore from the bucket alone, no service needed (s3://bucket/prefix, "
        "file:///dir or a directory: the services' remote_url)",
    )
    p.add_argument(
        "--key-file",
        metavar="FILE",
        type=Path,
        help="with --remote: the key ring, to read (and cut) encrypted segments",
    )
    p.add_argument("--endpoint-url", metavar="URL", help="S3 endpoint (MinIO, moto, ...)")
    p.add_argument("--region", help="S3 region")
    _service_args(
        p,
        "comma-separated) on the bucket: it restores (its unshipped records too) and "
        "serves the new topic at once",
    )
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an offset: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {value}")
    return value


@ARCHIVE.command(
    "restore",
    "make a new topic holding a topic's records up to a time or an offset",
    _restore_args,
)
def cmd_restore(args: argparse.Namespace) -> int:
    """``--url``: ``POST /v1/archive/restore`` on the service; ``--remote``: the bucket
    alone (:func:`~tiered_log.broker.point_in_time.restore_point_in_time`), progress on
    stderr. Prints what each partition holds."""
    import os

    if (args.url is None) == (args.remote is None):
        raise UsageError("give either --remote (the bucket alone) or --url (a running service)")
    if args.to_timestamp is None and args.to_offset is None:
        raise UsageError("give --to-timestamp, --to-offset or both")
    if args.url is not None:
        if args.key_file is not None or args.endpoint_url is not None:
            raise UsageError(
                "--key-file and --endpoint-url go with --remote (the service has its own)"
            )
        from ..client import Client

        token = args.token if args.token is not None else os.environ.get("TIERED_LOG_TOKEN")
        with Client(args.url, token, timeout=3600.0) as client:
            report = client.restore_topic(
                args.topic,
                args.as_topic,
                to_timestamp=args.to_timestamp,
                to_offset=args.to_offset,
            )
    else:
        report = _restore_from_bucket(args)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    for part in report["partitions"]:
        print(
            f"{report['as_topic']}-{part['partition']}: offsets [{part['log_start_offset']}, "
            f"{part['end_offset']}) ({part['segments_copied']} segments copied, "
            f"{part['segments_rewritten']} cut, {part['tail_records']} records from the "
            "service's tail)"
        )
    print(
        f"restored {report['topic']} as {report['as_topic']}: "
        f"{counted(report['records'], 'record')} in {len(report['partitions'])} partition(s), "
        f"{report['bytes_copied']} bytes copied, {report['bytes_written']} bytes written"
    )
    return 0


def _restore_from_bucket(args: argparse.Namespace) -> dict[str, Any]:
    from ..broker.point_in_time import RestoreReport, restore_point_in_time

    ring = _key_ring(args)
    storage = _open_bucket(args)

    def line(rep: RestoreReport) -> str:
        return (
            f"restore: {rep.segments_done}/{rep.segments_total} segments, "
            f"{(rep.bytes_copied + rep.bytes_written) / (1 << 20):.1f} MiB written"
        )

    progress = _segment_progress(line)

    try:
        report, _ = restore_point_in_time(
            storage,
            args.topic,
            args.as_topic,
            to_timestamp=args.to_timestamp,
            to_offset=args.to_offset,
            ring=ring,
            progress=progress,
        )
    finally:
        storage.close()
    return report.to_json()
