"""The JSON shape of a record in an answer: what the HTTP API's JSON fetch answers and
``tiered-log read --json`` and ``consume --format json`` print.

Each byte field (value, key, header values) is text when its bytes are valid UTF-8 and
base64 otherwise: ``{"value": "hello", "value_b64": null}`` or ``{"value": null,
"value_b64": "/w=="}``, both null for a null value (a tombstone); an empty value is
``"value": ""``. Keys and header values follow the same rule.

Kept apart from the HTTP models (:mod:`tiered_log.service.wire`, which re-exports it) so
that the command line prints records without importing the service. Pure: safe from any
thread.
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .records import Record


def _text_or_b64(b: bytes | None) -> tuple[str | None, str | None]:
    if b is None:
        return None, None
    try:
        return b.decode("utf-8"), None
    except UnicodeDecodeError:
        return None, base64.b64encode(b).decode("ascii")


def record_to_json(rec: Record) -> dict[str, Any]:
    """One record in the response shape described in the module docstring."""
    key, key_b64 = _text_or_b64(rec.key)
    value, value_b64 = _text_or_b64(rec.value)
    headers = []
    for name, hv in rec.headers:
        t, b = _text_or_b64(hv)
        headers.append({"name": name, "value": t, "value_b64": b})
    return {
        "offset": rec.offset,
        "timestamp": rec.timestamp,
        "key": key,
        "key_b64": key_b64,
        "value": value,
        "value_b64": value_b64,
        "headers": headers,
    }


__all__ = ["record_to_json"]
