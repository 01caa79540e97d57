"""The archive's operations: ``tiered-log archive ...``.

::

    tiered-log archive rewrap --remote URL --key-file FILE [--endpoint-url URL]
                              [--region R] [--prefix P] [--json]

``rewrap`` re-wraps the data key of every encrypted segment in the bucket with the key
ring's active key (:mod:`tiered_log.remote.rewrap`), without reading or writing any data
object, so that an older key can then be removed from the ring. It works on the bucket
directly and is safe while services ship to it (give it the ring file the services use:
they re-read it when it changes). It prints what it did (or one JSON object) and exits
1 when a manifest could not be rewrapped (each named, with why) or some are still
wrapped with another key.

Output goes to stdout, progress to stderr. One command per process; not thread-safe.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .registry import CommandGroup, counted

COMMANDS = CommandGroup()
"""``archive`` and its commands."""
ARCHIVE = COMMANDS.group("archive", "operations on the archive in the bucket (rewrap)")


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
