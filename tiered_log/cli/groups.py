"""``tiered-log groups list`` and ``tiered-log groups describe GROUP``: the Kafka
listener's consumer groups, as rpk shows them.

::

    tiered-log groups list [--json] [--url URL,...]
    tiered-log groups describe GROUP [--json] [--url URL,...]

``list`` asks every node (a node lists the groups it coordinates) and prints one row a
group: ``GROUP STATE MEMBERS COORDINATOR``. ``describe`` asks the group's coordinator
and prints the group's summary (coordinator, state, balancer, members, total lag) and a
row per committed partition: ``TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG
MEMBER-ID CLIENT-ID``. ``--json`` prints the HTTP API's answer instead. One command per
process.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from ..errors import TieredLogError
from .registry import CommandGroup
from .service import _client_options, _guard, _try_get, _verify

if TYPE_CHECKING:
    import httpx  # imported by the commands: the others start without it


COMMANDS = CommandGroup()
"""``groups ...``."""

GROUPS = COMMANDS.group("groups", "consumer groups: members, committed offsets, lag")
"""``tiered-log groups ...``."""


def _list_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the groups as JSON")
    _client_options(p)


def _describe_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("group", help="the group to describe")
    p.add_argument("--json", action="store_true", help="print the description as JSON")
    _client_options(p)


def _nodes(http: httpx.Client, urls: list[str]) -> list[tuple[int | None, str]]:
    """``(node id, url)`` of every live node (a single node: the URLs given)."""
    for url in urls:
        r = _try_get(http, url + "/v1/cluster")
        if r is None:
            continue
        if r.status_code == 200:
            return [
                (n.get("node_id"), n["url"].rstrip("/"))
                for n in r.json().get("nodes", ())
                if n.get("alive") and n.get("url")
            ]
        return [(None, u) for u in urls]
    raise TieredLogError(f"no node of {', '.join(urls)} answered")


def _http(args: argparse.Namespace) -> httpx.Client:
    import httpx

    headers = {"Authorization": f"Bearer {args.token}"} if args.token else {}
    return httpx.Client(timeout=args.retry_timeout, headers=headers, verify=_verify(args))


def _error(r: httpx.Response) -> TieredLogError:
    try:
        err = r.json()["error"]
        exc = TieredLogError(str(err["message"]))
        exc.code = str(err["code"])  # the server's code, as the one-line error shows it
        return exc
    except (ValueError, KeyError, TypeError):
        return TieredLogError(f"HTTP {r.status_code}: {r.text[:200]}")


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
    )


@GROUPS.command("list", "every consumer group: state, members, coordinator", _list_args)
@_guard
def cmd_groups_list(args: argparse.Namespace) -> int:
    """Print every group (see the module docstring)."""
    urls = [u.rstrip("/") for u in args.url.split(",")]
    found: dict[str, dict[str, Any]] = {}
    with _http(args) as http:
        for node_id, url in _nodes(http, urls):
            r = _try_get(http, url + "/v1/groups")
            if r is None:
                continue
            if r.status_code != 200:
                raise _error(r)
            for g in r.json()["groups"]:
                found[g["group"]] = {"coordinator": node_id, **g}
    groups = [found[k] for k in sorted(found)]
    if args.json:
        print(json.dumps({"groups": groups}, indent=2))
        return 0
    if not groups:
        print("no consumer groups", file=sys.stderr)
        return 0
    rows = [["GROUP", "STATE", "MEMBERS", "COORDINATOR"]]
    for g in groups:
        coord = "-" if g["coordinator"] is None else str(g["coordinator"])
        rows.append([g["group"], g["state"], str(g["members"]), coord])
    print(_table(rows))
    return 0


@GROUPS.command(
    "describe", "a group's members, committed offsets and lag per partition", _describe_args
)
@_guard
def cmd_groups_describe(args: argparse.Namespace) -> int:
    """Print one group (see the module docstring)."""
    urls = [u.rstrip("/") for u in args.url.split(",")]
    got: httpx.Response | None = None
    with _http(args) as http:
        for _, url in _nodes(http, urls):
            r = _try_get(http, f"{url}/v1/groups/{args.group}")
            if r is None:
                continue
            got = r
            if r.status_code != 421:
                break
    if got is None:
        raise TieredLogError(f"no node of {', '.join(urls)} answered")
    if got.status_code != 200:
        raise _error(got)
    g = got.json()
    if args.json:
        print(json.dumps(g, indent=2))
        return 0
    owner: dict[tuple[str, int], tuple[str, str]] = {}
    for m in g["members"]:
        for topic, parts in m["assignment"].items():
            for p in parts:
                owner[(topic, p)] = (m["member_id"], m["client_id"])
    head = [
        ["GROUP", g["group"]],
        ["COORDINATOR", str(g["coordinator"])],
        ["STATE", g["state"]],
        ["BALANCER", g["protocol"] or "-"],
        ["MEMBERS", str(len(g["members"]))],
        ["TOTAL-LAG", str(g["total_lag"])],
    ]
    print(_table(head))
    rows = [
        ["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "MEMBER-ID", "CLIENT-ID"]
    ]
    seen = set()
    for o in g["offsets"]:
        key = (o["topic"], o["partition"])
        seen.add(key)
        member, client = owner.get(key, ("-", "-"))
        end = "-" if o["high_watermark"] is None else str(o["high_watermark"])
        lag = "-" if o["lag"] is None else str(o["lag"])
        rows.append(
            [o["topic"], str(o["partition"]), str(o["committed_offset"]), end, lag, member, client]
        )
    for (topic, p), (member, client) in sorted(owner.items()):
        if (topic, p) not in seen:  # assigned, nothing committed yet
            rows.append([topic, str(p), "-", "-", "-", member, client])
    if len(rows) > 1:
        print()
        print(_table(rows))
    return 0


__all__ = ["COMMANDS", "GROUPS"]
