"""Strict readers of the fields of a stored JSON object (the cluster's metadata values,
a topic's metadata): each returns the value or raises
:class:`~tiered_log.errors.InvalidArgumentError` with one line naming the field and
showing (a short form of) what was found instead.

What it is for: a value written by one node and read by another (through etcd, a bucket
or a file) is decoded field by field with the same rules everywhere, so a missing field,
a wrong type (``true`` is not an integer) or another format version is reported the same
way. No I/O; pure functions, safe from any thread.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .errors import InvalidArgumentError

FORMAT_VERSION = 1
"""The ``version`` every stored metadata object carries (:func:`check_version`)."""


def int_field(value: object, what: str, *, minimum: int = 0) -> int:
    """``value`` if it is an integer (not a bool) >= ``minimum``."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidArgumentError(f"{what} must be an integer, not {shown(value)}")
    if value < minimum:
        raise InvalidArgumentError(f"{what} must be >= {minimum}, not {value}")
    return value


def str_field(value: object, what: str) -> str:
    """``value`` if it is a string."""
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{what} must be a string, not {shown(value)}")
    return value


def shown(value: object) -> str:
    """A short form of ``value`` for an error message (JSON for a scalar, else its type)."""
    text = (
        json.dumps(value)
        if isinstance(value, (str, int, float, bool, type(None)))
        else type(value).__name__
    )
    return text if len(text) <= 40 else text[:37] + "..."


def decode(data: str | bytes, what: str) -> Mapping[str, Any]:
    """The JSON object ``data`` holds."""
    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidArgumentError(f"{what} is not JSON: {exc}") from None
    return mapping(obj, what)


def mapping(obj: object, what: str) -> Mapping[str, Any]:
    """``obj`` if it is a JSON object."""
    if not isinstance(obj, Mapping):
        raise InvalidArgumentError(f"{what} must be a JSON object, not {shown(obj)}")
    return obj


def required(d: Mapping[str, Any], key: str, what: str) -> Any:
    """``d[key]``; an error naming ``key`` when it is missing."""
    if key not in d:
        raise InvalidArgumentError(f"{what} has no {key!r}")
    return d[key]


def check_version(d: Mapping[str, Any], what: str) -> None:
    """Refuse an object whose ``version`` is not :data:`FORMAT_VERSION`."""
    version = required(d, "version", what)
    if version != FORMAT_VERSION or isinstance(version, bool):
        raise InvalidArgumentError(
            f"{what} has version {shown(version)}, expected {FORMAT_VERSION}"
        )


def dumps(d: Mapping[str, Any]) -> str:
    """Compact JSON of ``d`` (NaN and infinities refused)."""
    return json.dumps(d, separators=(",", ":"), allow_nan=False)


__all__ = [
    "FORMAT_VERSION",
    "check_version",
    "decode",
    "dumps",
    "int_field",
    "mapping",
    "required",
    "shown",
    "str_field",
]
