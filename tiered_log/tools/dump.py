"""What ``tiered-log dump`` prints: every batch, record and index entry of segment files.

Like Kafka's ``kafka-dump-log``: :func:`dump_file` prints one store (``.log``, or a
chunk or data object as the bucket stores it, framed chunks decoded: a line per Kafka
record batch with its header fields, named and ordered as ``kafka-dump-log`` prints them,
and whether it verifies, then a ``| offset: ...`` line per record of a batch that
verifies: timestamp, key and value sizes, sequence, header keys; with ``print_data`` its
key, payload and headers, ``null`` for a null key or value), offset index (``.index``) or time index
(``.timeindex``: each entry checked against the store next to it), and a summary line;
:func:`dump_manifest` prints a copied segment's manifest (``.rli``: the segment, its
index entries and remoteLogIndex entries, then the checks a rebuild makes on it:
checksum, header against the name, entries tiling offsets and bytes, and the data
object's size when the ``.log`` object is beside it, as in a local-directory remote
tier); :func:`dump_directory` prints every segment file of a log directory by base
offset, then its manifests.
:class:`DumpTotals` carries what one dump learns across files (damaged files, for the
exit status; store scans, shared by a segment's two index files). :func:`text_field` is
the one-line text form of a key or value (also used by ``tiered-log read``).

Read-only (files are read with ``Path.read_bytes``); a damaged file is reported, never
raised. One dump per :class:`DumpTotals`; not thread-safe.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from pathlib import Path
from typing import TextIO

from ..errors import CorruptIndexError, CorruptRecordError, RemoteCorruptionError
from ..format import naming
from ..format.index import OFFSET_ENTRY, OFFSET_ENTRY_SIZE, TIME_ENTRY, TIME_ENTRY_SIZE
from ..format.kafka.records import Record
from ..format.remote_index import decode_entries
from ..remote.manifest import BATCH_FORMAT, decode_manifest
from .index_check import check_offset_index, check_time_index, read_offset_index, read_time_index
from .store import BatchEntry, StoreDamage, StoreScan, iter_store, scan_store, unframe
from .verify import segment_file_kind


def text_field(b: bytes | None) -> str:
    """A key or value for one-line text output.

    The text itself when the bytes are UTF-8 with no control characters (and do not start
    with ``base64:``); otherwise ``base64:`` and the base64 of the bytes. None (a null
    key or value) prints as an empty field; an empty one as ``base64:``.
    """
    if b is None:
        return ""
    try:
        s = b.decode("utf-8")
    except UnicodeDecodeError:
        pass
    else:
        if s and s.isprintable() and not s.startswith("base64:"):
            return s
    return "base64:" + base64.b64encode(b).decode("ascii")


def plural(n: int, word: str, plural: str | None = None) -> str:
    """``"1 record"``, ``"2 records"``."""
    return f"{n:,} {word if n == 1 else (plural or word + 's')}"


def headers_text(headers: Iterable[tuple[str, bytes | None]]) -> str:
    return ",".join(f"{n}={'(null)' if v is None else text_field(v)}" for n, v in headers)


class DumpTotals:
    """State across the files of one dump: damaged files (for the exit status) and store
    scans, so that a segment's two index files share one scan of its store."""

    def __init__(self) -> None:
        self.damaged_files = 0
        self.scans: dict[Path, StoreScan | None] = {}


def _sealed(directory: Path, base: int | None) -> bool:
    """Whether the segment ``base`` in ``directory`` is sealed (a later segment exists)."""
    if base is None or not directory.is_dir():
        return False
    return any(b > base for b in naming.list_segment_bases(directory))


def data_text(b: bytes | None) -> str:
    """A key or payload in a dump's record line: ``null`` for a null one (a value that is
    the text ``null`` prints as base64, so the two never read alike), else
    :func:`text_field` (an empty one prints as ``base64:``)."""
    if b is None:
        return "null"
    return "base64:bnVsbA==" if b == b"null" else text_field(b)


def batch_line(item: BatchEntry) -> str:
    """A batch's line as Kafka's ``kafka-dump-log`` prints it (same fields, names and
    order), then ``isvalid`` with the reason when it does not verify."""
    h = item.header
    horizon = f"OptionalLong[{h.base_timestamp}]" if h.has_delete_horizon else "OptionalLong.empty"
    valid = "true" if item.valid else f"false ({item.error})"
    return (
        f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.records_count} "
        f"baseSequence: {h.base_sequence} lastSequence: {item.last_sequence} "
        f"producerId: {h.producer_id} producerEpoch: {h.producer_epoch} "
        f"partitionLeaderEpoch: {h.partition_leader_epoch} "
        f"isTransactional: {str(h.is_transactional).lower()} "
        f"isControl: {str(h.is_control).lower()} deleteHorizonMs: {horizon} "
        f"position: {h.position} {item.timestamp_type}: {h.max_timestamp} size: {h.size} "
        f"magic: {h.magic} compresscodec: {item.compression} crc: {h.crc} isvalid: {valid}"
    )


def record_line(item: BatchEntry, r: Record, print_data: bool) -> str:
    """A record's ``| offset: ...`` line as ``kafka-dump-log`` prints it; with
    ``print_data`` its key, payload (``null`` for null) and header values too."""
    h = item.header
    seq = -1 if h.base_sequence < 0 else (h.base_sequence + r.offset - h.base_offset) & 0x7FFFFFFF
    line = (
        f"| offset: {r.offset} {item.timestamp_type}: {r.timestamp} "
        f"keySize: {-1 if r.key is None else len(r.key)} "
        f"valueSize: {-1 if r.value is None else len(r.value)} sequence: {seq} "
        f"headerKeys: [{','.join(name for name, _ in r.headers)}]"
    )
    if print_data:
        line += f" key: {data_text(r.key)} payload: {data_text(r.value)}"
        if r.headers:
            line += f" headers: {headers_text(r.headers)}"
    return line


def _dump_store(
    path: Path, base: int | None, print_data: bool, out: TextIO, totals: DumpTotals
) -> None:
    """Print each batch's header line, then a ``| offset: ...`` line per record of a batch
    that verifies (with its key, payload and headers when ``print_data``), then a
    summary. A data object or chunk as the bucket stores it (framed chunks) is decoded
    first (:func:`~.store.unframe`)."""
    stored = path.read_bytes()
    data, frames, problem = unframe(stored)
    if base is None:
        parsed = naming.parse_segment_object_key(path.name)  # a bucket's <base>-<id>.log
        base = parsed[0] if parsed is not None else None
    what = (
        f"store, {len(data):,} bytes"
        if not frames and problem is None
        else f"remote data object, {len(stored):,} bytes stored, {plural(frames, 'framed chunk')} "
        f"decoded: {len(data):,} bytes of batches; positions are in those"
    )
    print(
        f"Dumping {path} ({what}{'' if base is None else f', segment base offset {base}'})",
        file=out,
    )
    if base is not None:
        print(f"Log starting offset: {base}", file=out)
    batches = records = bad = 0
    first = last = None
    damage: StoreDamage | None = None
    expect = base
    out_of_sequence = 0
    for item in iter_store(data, with_data=True):
        if isinstance(item, StoreDamage):
            damage = item
            print(
                f"DAMAGE at byte {item.position}: {item.reason}; the remaining "
                f"{item.unreadable_bytes:,} bytes are not readable batches",
                file=out,
            )
            break
        batches += 1
        note = ""
        if item.valid:
            if expect is not None and item.base_offset != expect:
                out_of_sequence += 1
                note = f" (expected base offset {expect})"
            records += item.count
            first = item.base_offset if first is None else first
            last = item.last_offset
            expect = item.next_offset
        else:
            bad += 1
            # The header cannot be trusted: go on by its count if that is plausible.
            n = item.plausible_count
            expect = expect + n if expect is not None and n else None
        print(batch_line(item) + note, file=out)
        for r in item.records:
            print(record_line(item, r, print_data), file=out)
    if problem is not None:
        print(f"NOT DECODED: {problem}", file=out)
    span = "" if first is None else f", offsets {first}..{last}"
    verdict = []
    if bad:
        verdict.append(f"{plural(bad, 'batch', 'batches')} failing their check")
    if out_of_sequence:
        verdict.append(f"{out_of_sequence} out of sequence")
    if damage is not None:
        verdict.append(f"damaged from byte {damage.position} ({damage.unreadable_bytes:,} bytes)")
    if problem is not None:
        verdict.append("stored chunks not decoded")
    if verdict:
        totals.damaged_files += 1
    print(
        f"Summary: {plural(batches, 'batch', 'batches')}, {plural(records, 'readable record')}"
        f"{span}, {len(data):,} bytes; "
        f"{'; '.join(verdict) if verdict else 'all batches verify'}",
        file=out,
    )


def _store_scan_for(path: Path, base: int | None, totals: DumpTotals) -> StoreScan | None:
    """A StoreScan of the store next to index file ``path`` (None if there is none)."""
    if base is None:
        return None
    store = naming.segment_path(path.parent, base, naming.LOG_SUFFIX)
    if store not in totals.scans:
        totals.scans[store] = scan_store(store, base) if store.is_file() else None
    return totals.scans[store]


def _dump_index(path: Path, base: int | None, kind: str, out: TextIO, totals: DumpTotals) -> None:
    """Print every entry of an index file; check each against the store next to it."""
    scan = _store_scan_for(path, base, totals)
    sealed = _sealed(path.parent, base)
    b = 0 if base is None else base
    lines: list[str] = []
    unchecked: set[int] = set()  # entries in the damaged part of the store
    found: list[tuple[int | None, str]] = []
    if kind == "index":
        what = "offset index"
        oentries, trailing = read_offset_index(path)
        if scan is not None:
            found = check_offset_index(oentries, trailing, scan, sealed=sealed)
        for e in oentries:
            lines.append(
                f"entry: {e.index} offset: {b + e.relative_offset} "
                f"relative_offset: {e.relative_offset} position: {e.position}"
            )
            if scan is not None and scan.damage is not None and e.position >= scan.damage.position:
                unchecked.add(e.index)
    else:
        what = "time index"
        tentries, trailing = read_time_index(path)
        if scan is not None:
            found = check_time_index(tentries, trailing, scan, sealed=sealed)
        for t in tentries:
            lines.append(
                f"entry: {t.index} max_timestamp: {t.max_timestamp} "
                f"offset: {b + t.relative_offset} relative_offset: {t.relative_offset}"
            )
            if (
                scan is not None
                and scan.damage is not None
                and b + t.relative_offset >= scan.next_offset
            ):
                unchecked.add(t.index)
    if scan is None and trailing:
        found = [(None, f"{trailing} trailing bytes: not a whole number of entries (truncated?)")]
    bad: dict[int, list[str]] = {}
    file_problems: list[str] = []
    for entry, message in found:
        if entry is None:
            file_problems.append(message)
        else:
            bad.setdefault(entry, []).append(message)
    print(
        f"Dumping {path} ({what}, {len(lines)} entries"
        f"{'' if base is None else f', segment base offset {base}'})",
        file=out,
    )
    for i, line in enumerate(lines):
        if scan is None:
            status = ""
        elif i in bad:
            status = " MISMATCH: " + "; ".join(bad[i])
        elif i in unchecked:
            status = " not checked (the store is damaged there)"
        else:
            status = " ok"
        print(line + status, file=out)
    for message in file_problems:
        print(f"PROBLEM: {message}", file=out)
    if scan is not None:
        checked = f"checked against {scan.path.name}"
    elif base is not None:
        checked = "not checked: no store file next to it"
    else:
        checked = "not checked: the file name does not give the segment's base offset"
    if found:
        totals.damaged_files += 1
    extra = f", {plural(len(file_problems), 'file problem')}" if file_problems else ""
    print(
        f"Summary: {plural(len(lines), 'entry', 'entries')}, {len(bad)} bad{extra}; {checked}",
        file=out,
    )


def _key_of(path: Path, blob: bytes) -> str:
    """The manifest's object key: the path's tail the entries' data key names (they
    carry it), else the file name."""
    head, _, rest = blob.partition(b"\n")
    try:
        fields = json.loads(head)
        skip = int(fields.get("index_bytes", 0)) + int(fields.get("timeindex_bytes", 0))
        entries = [e for _, e in decode_entries(memoryview(rest)[skip:])]
    except (ValueError, TypeError, AttributeError, CorruptIndexError):
        return path.name
    if not entries:
        return path.name
    data_key = entries[0].object_key
    key = naming.manifest_key_of(data_key)
    return key if str(path).endswith("/" + key) or path.name == key else path.name


def dump_manifest(path: Path, out: TextIO, totals: DumpTotals) -> None:
    """Print manifest ``path`` entry by entry and check it; a damaged one counts in
    ``totals.damaged_files``."""
    blob = path.read_bytes()
    key = _key_of(path, blob)
    data = path.with_name(naming.data_key_of(path.name))
    data_size = data.stat().st_size if data.is_file() else None
    print(f"Dumping {path} (remote segment manifest)", file=out)
    try:
        rs, entries, index, timeindex = decode_manifest(blob, key, data_size)
    except RemoteCorruptionError as exc:
        totals.damaged_files += 1
        print(f"PROBLEM: {exc.message}", file=out)
        print("Summary: damaged; nothing in it is believed (a rebuild makes it again)", file=out)
        return
    except CorruptRecordError as exc:  # whole, but of a batch format this version does not read
        totals.damaged_files += 1
        print(f"PROBLEM: {exc.message}", file=out)
        print("Summary: another batch format; a rebuild refuses it", file=out)
        return
    checksum = "checksum ok" if b'"checksum"' in blob.partition(b"\n")[0] else "no checksum"
    print(
        f"segment: id: {rs.id} base_offset: {rs.base_offset} next_offset: {rs.next_offset} "
        f"size: {rs.size} first_timestamp: {rs.first_timestamp} "
        f"max_timestamp: {rs.max_timestamp} chunks: {rs.chunks} "
        f"batch_format: {BATCH_FORMAT} ({checksum})",
        file=out,
    )
    whole = len(index) - len(index) % OFFSET_ENTRY_SIZE
    offsets = list(OFFSET_ENTRY.iter_unpack(index[:whole]))
    print(f"offset index: {plural(len(offsets), 'entry', 'entries')}", file=out)
    for i, (rel, pos) in enumerate(offsets):
        print(
            f"  entry: {i} offset: {rs.base_offset + rel} relative_offset: {rel} position: {pos}",
            file=out,
        )
    whole = len(timeindex) - len(timeindex) % TIME_ENTRY_SIZE
    times = list(TIME_ENTRY.iter_unpack(timeindex[:whole]))
    print(f"time index: {plural(len(times), 'entry', 'entries')}", file=out)
    for i, (ts, rel) in enumerate(times):
        print(
            f"  entry: {i} max_timestamp: {ts} offset: {rs.base_offset + rel} "
            f"relative_offset: {rel}",
            file=out,
        )
    print(f"remoteLogIndex: {plural(len(entries), 'entry', 'entries')}", file=out)
    for i, e in enumerate(entries):
        print(
            f"  chunk: {i} offsets: {e.first_offset}..{e.last_offset} timestamps: "
            f"{e.first_timestamp}..{e.last_timestamp} position: {e.position} "
            f"length: {e.data_length} object: {e.object_key}",
            file=out,
        )
    size = (
        f"data object {data.name}: {data_size:,} bytes, as it says"
        if data_size is not None
        else "data object not beside it: its size not checked"
    )
    print(
        f"Summary: offsets {rs.base_offset}..{rs.next_offset - 1} in "
        f"{plural(len(entries), 'chunk')}, consistent; {size}",
        file=out,
    )


def dump_file(
    path: Path, kind: str, base: int | None, print_data: bool, out: TextIO, totals: DumpTotals
) -> None:
    if kind == "log":
        _dump_store(path, base, print_data, out, totals)
    else:
        _dump_index(path, base, kind, out, totals)


def dump_directory(path: Path, print_data: bool, out: TextIO, totals: DumpTotals) -> None:
    """Dump every segment file of ``path``: by base offset, then store, index, time index;
    then every remote segment manifest (``.rli``, as a local-directory remote tier holds
    them). A file deleted after the listing (a running log's retention) is skipped with
    a line saying so."""
    order = ("log", "index", "timeindex")
    files: list[tuple[int, int, Path, str]] = []
    manifests: list[Path] = []
    for p in sorted(path.iterdir()):
        kind, base = segment_file_kind(p) or ("", None)
        if p.name.endswith(naming.RLI_SUFFIX) and p.is_file():
            manifests.append(p)
        elif base is not None and p.is_file():
            files.append((base, order.index(kind), p, kind))
        else:
            print(f"Skipping {p} (not a segment file)", file=out)
    files.sort()
    if not files and not manifests:
        print(f"No segment files in {path}", file=out)
    gone = 0
    for base, _, p, kind in files:
        try:
            dump_file(p, kind, base, print_data, out, totals)
        except FileNotFoundError:  # a running log's retention deleted the segment
            gone += 1
            print(f"Skipped {p}: deleted while this dump ran (the log's retention)", file=out)
        print(file=out)
    for p in manifests:
        try:
            dump_manifest(p, out, totals)
        except FileNotFoundError:
            gone += 1
            print(f"Skipped {p}: deleted while this dump ran", file=out)
        print(file=out)
    count = plural(len(files) + len(manifests) - gone, "file")
    deleted = f" ({plural(gone, 'file')} deleted meanwhile)" if gone else ""
    print(f"Dumped {count}{deleted}; {totals.damaged_files} with problems", file=out)


__all__ = [
    "DumpTotals",
    "dump_directory",
    "dump_file",
    "dump_manifest",
    "headers_text",
    "plural",
    "text_field",
]
