"""How ``tiered-log topics list`` and ``topics describe`` show topics to a person.

The service answers JSON (``--json`` prints it as is); by default these render it as
rpk does: ``list`` a table with a header (``no topics`` when there is none),
``describe`` a summary, the topic's configuration and one row per partition. Keys the
service adds later are shown too (extra summary lines, extra partition columns), so the
tables never hide a field of the JSON; a partition's ranges (``lost_offsets``,
``remote_damage``) are listed under the table when there are any.

Functions only, writing to the stream given; no state.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from typing import IO, Any

_SUMMARY_SKIP = ("name", "config", "partition_info")


def table(rows: Sequence[Sequence[str]], out: IO[str]) -> None:
    """Rows as columns aligned on two spaces (the first row is the header)."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        out.write("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n")


def cell(value: Any) -> str:
    """One value as a table cell: ``-`` for null, lists of scalars comma-joined."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list) and all(not isinstance(v, list | dict) for v in value):
        return ",".join(cell(v) for v in value) or "-"
    if isinstance(value, list | dict):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def _header(key: str) -> str:
    return key.upper().replace("_", "-")


def _when(ms: Any) -> str:
    if not isinstance(ms, int):
        return cell(ms)
    at = dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
    return f"{at:%Y-%m-%d %H:%M:%S} UTC ({ms})"


def print_topic_list(topics: list[dict[str, Any]], out: IO[str]) -> None:
    """``NAME PARTITIONS REPLICAS`` rows, sorted by name; ``no topics`` for none."""
    if not topics:
        out.write("no topics\n")
        return
    rows = [["NAME", "PARTITIONS", "REPLICAS"]]
    for t in sorted(topics, key=lambda t: str(t.get("name"))):
        rows.append(
            [cell(t.get("name")), cell(t.get("partitions")), cell(t.get("replication_factor"))]
        )
    table(rows, out)


def _is_range_list(value: Any) -> bool:
    return isinstance(value, list) and any(isinstance(v, list | dict) for v in value)


def print_topic(d: dict[str, Any], out: IO[str]) -> None:
    """A topic's description: summary, configuration, partitions (see the module doc)."""
    summary = [["NAME", cell(d.get("name"))]]
    for key, value in d.items():
        if key in _SUMMARY_SKIP:
            continue
        shown = _when(value) if key.endswith("_ms") and key.startswith("created") else cell(value)
        summary.append([_header(key), shown])
    table(summary, out)
    config = d.get("config") or {}
    if config:
        out.write("\nCONFIG\n")
        table([["KEY", "VALUE"], *([k, cell(v)] for k, v in config.items())], out)
    parts: list[dict[str, Any]] = d.get("partition_info") or []
    if not parts:
        return
    keys: list[str] = []
    for p in parts:
        keys.extend(k for k in p if k not in keys)
    ranges = [k for k in keys if any(_is_range_list(p.get(k)) for p in parts)]
    empty = [k for k in keys if all(p.get(k) == [] for p in parts)]
    columns = [k for k in keys if k not in ranges and k not in empty]
    out.write("\nPARTITIONS\n")
    table([[_header(c) for c in columns], *([cell(p.get(c)) for c in columns] for p in parts)], out)
    for p in parts:
        for key in ranges:
            if p.get(key):
                out.write(f"partition {p.get('partition')} {key}: {cell(p[key])}\n")


__all__ = ["cell", "print_topic", "print_topic_list", "table"]
