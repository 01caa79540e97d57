"""What ``tiered-log consume`` does: where it starts in each partition, how it prints a
record, and how it keeps reading through a server restart or a lost range.

- :func:`offset_spec`: kcat's ``-o`` forms: ``beginning``, ``end``, ``stored``, an
  absolute offset ``N``, ``-N`` (N records before the end), ``s@T`` (the first record at
  or after time T, milliseconds or ISO 8601).
- :class:`RecordFormat`: kcat's ``-f`` format string (``%t`` topic, ``%p`` partition,
  ``%o`` offset, ``%k`` key, ``%s`` value, ``%T`` timestamp in ms, ``%h`` headers as
  ``name=value`` comma-separated, ``%K``/``%S`` key/value size, ``%%``; ``\\n``,
  ``\\t``, ``\\r``, ``\\\\`` escapes; nothing added at the end), or the named forms
  ``value`` (the value and a newline) and ``json`` (one JSON object a line). A null key
  or value (a tombstone) prints as nothing, or as ``NULL`` with ``-Z`` (kcat's), and its
  size as -1; ``json`` shows it as ``null``.
- :class:`GroupPosition`: ``--group G`` with ``-p N``, ``-o stored``, ``-o N``, ``-N``
  or ``s@TIME``: a consumer group's committed offsets (where each partition starts when
  it has one) and the commits of what was printed, through the HTTP API
  (``/v1/groups/{group}``), as a consumer outside the group protocol (rpk and kcat
  commit their position the same way): refused while Kafka members hold the group.
  Without those, ``--group G`` joins the group as a member (:mod:`.consume_group`).
- :func:`partition_pages`: one partition's pages from a start offset on, which with
  ``follow`` waits out a server that cannot be reached (a restart) and goes on from the
  next offset not yet handed out, and with ``skip_lost`` steps over offsets lost in a
  restore (410 ``data_loss``) to the next readable one; without it the error names that
  offset.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import httpx

from ..client import Client, FetchResult
from ..errors import ConnectionFailedError, DataLossError, TieredLogError
from ..format.record_json import record_to_json
from ..format.records import Record
from .registry import UsageError, timestamp_ms

RECONNECT_FIRST_S = 0.2
"""The first wait before trying a server that could not be reached again; it doubles."""
RECONNECT_MAX_S = 2.0
"""The longest wait between two tries."""


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """Where to start in each partition: ``kind`` is ``beginning``, ``end``, ``stored``,
    ``offset`` (``value`` itself), ``tail`` (``value`` records before the end) or
    ``timestamp`` (``value`` in ms)."""

    kind: str
    value: int = 0


def offset_spec(text: str) -> OffsetSpec:
    """argparse type for ``-o``/``--offset``: kcat's forms (see the module docstring)."""
    t = text.strip()
    if t in ("beginning", "earliest", "oldest"):
        return OffsetSpec("beginning")
    if t in ("end", "latest", "newest"):
        return OffsetSpec("end")
    if t == "stored":
        return OffsetSpec("stored")
    if t.startswith("s@"):
        try:
            return OffsetSpec("timestamp", timestamp_ms(t[2:]))
        except argparse.ArgumentTypeError as exc:
            raise argparse.ArgumentTypeError(f"s@: {exc}") from None
    if re.fullmatch(r"-\d+", t):
        return OffsetSpec("tail", int(t[1:]))
    if re.fullmatch(r"\d+", t):
        return OffsetSpec("offset", int(t))
    raise argparse.ArgumentTypeError(
        f"expected beginning, end, stored, an offset N, -N (N before the end) or s@TIME "
        f"(ms or ISO 8601), got {text!r}"
    )


def start_offset(c: Client, topic: str, partition: int, spec: OffsetSpec) -> int:
    """The first offset to read of ``partition`` for ``spec``."""
    if spec.kind == "stored":
        raise UsageError(
            "-o stored reads a consumer group's committed offsets: name the group with "
            "--group G (or use beginning, end, N, -N or s@TIME)"
        )
    if spec.kind == "offset":
        return spec.value
    if spec.kind == "timestamp":
        found = c.offset_for_timestamp(topic, partition, spec.value)
        if found is not None:
            return found
    b = c.bounds(topic, partition)
    if spec.kind == "beginning":
        return b.log_start_offset
    if spec.kind == "tail":
        return max(b.log_start_offset, b.next_offset - spec.value)
    return b.next_offset  # end, or a timestamp after every record


class GroupPosition:
    """A consumer group's committed offsets of one topic over the HTTP API (see the
    module docstring). ``urls``: the service's nodes (a group is answered by its
    coordinator: each is asked in turn). Not thread-safe: the consuming thread only."""

    def __init__(
        self, urls: list[str], token: str | None, verify: bool | str, group: str, topic: str
    ) -> None:
        self.group = group
        self.topic = topic
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(timeout=30, headers=headers, verify=verify)
        self._urls = self._nodes([u.rstrip("/") for u in urls])
        self.committed_offsets: dict[int, int] = {}

    def _nodes(self, urls: list[str]) -> list[str]:
        """``urls`` and, in a cluster, every live node's URL."""
        out = list(urls)
        for url in urls:
            try:
                r = self._http.get(url + "/v1/cluster")
            except httpx.HTTPError:
                continue
            if r.status_code == 200:
                for n in r.json().get("nodes", ()):
                    if n.get("alive") and n.get("url") and n["url"].rstrip("/") not in out:
                        out.append(n["url"].rstrip("/"))
                break
        return out

    def _call(self, method: str, path: str, body: object = None) -> httpx.Response:
        """The coordinator's answer (421 from the others: the next node is asked)."""
        last: httpx.Response | None = None
        for url in self._urls:
            try:
                r = self._http.request(method, url + path, json=body)
            except httpx.HTTPError:
                continue
            if r.status_code != 421:
                return r
            last = r
        if last is None:
            raise ConnectionFailedError(f"no node of {', '.join(self._urls)} answered")
        return last

    @staticmethod
    def _fail(r: httpx.Response) -> TieredLogError:
        try:
            err = r.json()["error"]
            exc = TieredLogError(str(err["message"]))
            exc.code = str(err["code"])  # the server's code, as the one-line error shows it
            return exc
        except (ValueError, KeyError, TypeError):
            return TieredLogError(f"HTTP {r.status_code}: {r.text[:200]}")

    def load(self) -> dict[int, int]:
        """The group's committed offsets of the topic (partition -> next offset)."""
        r = self._call("GET", f"/v1/groups/{self.group}")
        if r.status_code == 404:
            self.committed_offsets = {}
        elif r.status_code != 200:
            raise self._fail(r)
        else:
            members = r.json()["members"]
            if members:
                exc = TieredLogError(
                    f"group {self.group!r} has {len(members)} member(s) consuming through the "
                    "Kafka protocol: only they commit its offsets now"
                )
                exc.code = "group_has_members"
                raise exc
            self.committed_offsets = {
                int(o["partition"]): int(o["committed_offset"])
                for o in r.json()["offsets"]
                if o["topic"] == self.topic
            }
        return dict(self.committed_offsets)

    def commit(self, offsets: dict[int, int]) -> None:
        """Commit the partitions of ``offsets`` that moved since the last commit."""
        moved = {p: o for p, o in offsets.items() if self.committed_offsets.get(p) != o}
        if not moved:
            return
        body = {
            "offsets": [
                {"topic": self.topic, "partition": p, "offset": o} for p, o in sorted(moved.items())
            ]
        }
        r = self._call("POST", f"/v1/groups/{self.group}/offsets", body)
        if r.status_code != 204:
            raise self._fail(r)
        self.committed_offsets.update(moved)

    def close(self) -> None:
        self._http.close()


_DIRECTIVE = re.compile(rb"%[tpokKsSTh%]|\\[ntr\\]")
_ESCAPES = {b"\\n": b"\n", b"\\t": b"\t", b"\\r": b"\r", b"\\\\": b"\\"}


class RecordFormat:
    """How ``consume`` prints a record: ``value``, ``json`` or a kcat format string (see
    the module docstring); ``null``: what a null key or value prints as."""

    def __init__(self, fmt: str, topic: str, null: bytes = b"") -> None:
        self.fmt = fmt
        self.topic = topic
        self.null = null
        self._parts: list[bytes] = []
        if fmt not in ("value", "json"):
            if "%" not in fmt:
                raise argparse.ArgumentTypeError(
                    f"--format takes value, json or a format string with %-directives "
                    f"(%t %p %o %k %s %T %h), got {fmt!r}"
                )
            raw = fmt.encode("utf-8")
            pos = 0
            for m in _DIRECTIVE.finditer(raw):
                self._parts.append(raw[pos : m.start()])
                self._parts.append(m.group())
                pos = m.end()
            self._parts.append(raw[pos:])
            bad = re.search(
                rb"%[^tpokKsSTh%]|%$",
                b"".join(p for p in self._parts if not _DIRECTIVE.fullmatch(p)),
            )
            if bad:
                raise argparse.ArgumentTypeError(
                    f"unknown directive {bad.group().decode(errors='replace')!r} in --format "
                    "(known: %t %p %o %k %s %T %h %K %S %%)"
                )

    def render(self, partition: int, rec: Record) -> bytes:
        """The bytes printed for ``rec`` of ``partition``."""
        if self.fmt == "value":
            return (self.null if rec.value is None else rec.value) + b"\n"
        if self.fmt == "json":
            return (
                json.dumps(
                    {"topic": self.topic, "partition": partition, **record_to_json(rec)}
                ).encode()
                + b"\n"
            )
        out = bytearray()
        for i, part in enumerate(self._parts):
            if i % 2 == 0:
                out += part
            else:
                out += self._directive(part, partition, rec)
        return bytes(out)

    def _directive(self, d: bytes, partition: int, rec: Record) -> bytes:
        if d in _ESCAPES:
            return _ESCAPES[d]
        match d[1:2]:
            case b"t":
                return self.topic.encode("utf-8")
            case b"p":
                return str(partition).encode()
            case b"o":
                return str(rec.offset).encode()
            case b"k":
                return self.null if rec.key is None else rec.key
            case b"K":
                return str(-1 if rec.key is None else len(rec.key)).encode()
            case b"s":
                return self.null if rec.value is None else rec.value
            case b"S":
                return str(-1 if rec.value is None else len(rec.value)).encode()
            case b"T":
                return str(rec.timestamp).encode()
            case b"h":
                return b",".join(
                    name.encode("utf-8") + b"=" + (v or b"") for name, v in rec.headers
                )
        return b"%"


def next_readable(c: Client, topic: str, partition: int, offset: int) -> int | None:
    """The first offset at or after ``offset`` that is not in a lost range (the topic's
    ``lost_offsets``), or the local start when ``offset`` is below it; None if neither
    says."""
    info = c.describe_topic(topic).get("partition_info", [])
    for p in info:
        if p.get("partition") != partition:
            continue
        for first, end in p.get("lost_offsets") or []:
            if first <= offset < end:
                return int(end)
        local = int(p.get("local_start_offset", offset))
        return local if local > offset else None
    return None


Note = Callable[[str], None]


def _stderr_note(message: str) -> None:
    print(f"tiered-log: {message}", file=sys.stderr, flush=True)


def partition_pages(
    c: Client,
    topic: str,
    partition: int,
    offset: int,
    *,
    end_offset: int | None,
    follow: bool,
    skip_lost: bool,
    stop: threading.Event,
    note: Note = _stderr_note,
) -> Iterator[FetchResult]:
    """The pages of ``partition`` from ``offset`` (see the module docstring); ends at the
    end of the log (or ``end_offset``), or with ``follow`` once ``stop`` is set."""
    delay = RECONNECT_FIRST_S
    down = False
    while not stop.is_set():
        try:
            for page in c.consume(topic, partition, offset, follow=follow, end_offset=end_offset):
                if down:
                    note(f"partition {partition}: reconnected, going on at offset {offset}")
                    down, delay = False, RECONNECT_FIRST_S
                yield page
                offset = page.next_offset
                if stop.is_set():
                    return
            return
        except DataLossError as exc:
            nxt = next_readable(c, topic, partition, offset)
            if nxt is None:
                raise
            if not skip_lost:
                raise DataLossError(
                    f"{exc.message}; the next readable offset of partition "
                    f"{partition} is {nxt} (--skip-lost goes on there, or "
                    f"-o {nxt} with -p {partition})"
                ) from None
            note(f"partition {partition}: offsets {offset}..{nxt - 1} are lost; skipped")
            offset = nxt
        except TieredLogError as exc:
            if not follow or not (isinstance(exc, ConnectionFailedError) or exc.retriable):
                raise
            if not down:
                note(f"partition {partition}: {exc.code}: {exc.message}; retrying")
                down = True
            stop.wait(delay)
            delay = min(delay * 2, RECONNECT_MAX_S)


__all__ = [
    "GroupPosition",
    "OffsetSpec",
    "RecordFormat",
    "next_readable",
    "offset_spec",
    "partition_pages",
    "start_offset",
]
