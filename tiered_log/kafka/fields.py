"""What the Kafka codec needs to know of kio's generated classes and of the flexible
versions' varints, shared by the frame codec (:mod:`tiered_log.kafka.messages`), the
tolerant request reader (:mod:`tiered_log.kafka.tagged`) and the follower's hand-written
Fetch codec (:mod:`tiered_log.cluster.kafka_fetch`).

Unsigned varint (flexible versions' lengths, counts and tags): base 128, low group first,
the high bit of each byte set when another byte follows.

:func:`fields_of` reads a kio dataclass's fields once (name, Kafka type, nested entity,
array or not, default, tag number for a tagged field) and caches them; the cache is a
dict filled on first use, safe from any thread (a race computes the same tuple twice).
"""

from __future__ import annotations

import types
import typing
from dataclasses import MISSING, dataclass, fields
from typing import Any


def read_uvarint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """The unsigned varint at ``pos`` of ``buf`` and the position after it (IndexError
    when ``buf`` ends inside it)."""
    n = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        if b < 0x80:
            return n, pos
        shift += 7


def uvarint(n: int) -> bytes:
    """``n`` as an unsigned base-128 varint (the flexible versions' length fields)."""
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a kio entity: its name, Kafka type (kio's ``kafka_type`` metadata),
    the nested entity class if it holds one (or an array of them), whether it is an
    array, its default (``MISSING`` when required) and its tag (None: not tagged)."""

    name: str
    kafka_type: str | None
    nested: type[Any] | None
    array: bool
    default: Any
    tag: int | None


_FIELDS: dict[type[Any], tuple[Field, ...]] = {}


def fields_of(cls: type[Any]) -> tuple[Field, ...]:
    """The fields of kio's dataclass ``cls``, in order (cached)."""
    got = _FIELDS.get(cls)
    if got is None:
        got = _FIELDS[cls] = _scan_fields(cls)
    return got


def _scan_fields(cls: type[Any]) -> tuple[Field, ...]:
    hints = typing.get_type_hints(cls)
    out = []
    for f in fields(cls):
        hint = hints[f.name]
        if typing.get_origin(hint) in (typing.Union, types.UnionType):  # X | None
            hint = next(a for a in typing.get_args(hint) if a is not type(None))
        nested: type[Any] | None = None
        array = False
        if typing.get_origin(hint) is tuple:
            array = True
            inner = typing.get_args(hint)[0]
            if hasattr(inner, "__dataclass_fields__"):
                nested = inner
        elif hasattr(hint, "__dataclass_fields__"):
            nested = hint
        if f.default is not MISSING:
            default = f.default
        elif f.default_factory is not MISSING:
            default = f.default_factory()
        else:
            default = MISSING
        kafka_type, tag = f.metadata.get("kafka_type"), f.metadata.get("tag")
        out.append(Field(f.name, kafka_type, nested, array, default, tag))
    return tuple(out)


__all__ = ["Field", "fields_of", "read_uvarint", "uvarint"]
