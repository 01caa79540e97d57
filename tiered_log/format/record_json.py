"""The JSON shape of a record, both ways: what the HTTP API's JSON forms send and answer,
what ``tiered-log read --json`` and ``consume --format json`` print.

Each byte field (value, key, header values) is text when its bytes are valid UTF-8 and
base64 otherwise: in an answer ``{"value": "hello", "value_b64": null}`` or ``{"value":
null, "value_b64": "/w=="}``, both null for a null value (a tombstone); an empty value is
``"value": ""``. Keys and header values follow the same rule. A produce request gives
each field as text or as base64, never both.

Kept apart from the HTTP models (:mod:`tiered_log.service.wire`, which re-exports these)
so that the command line prints records without importing the service. Pure functions:
safe from any thread.
"""

from __future__ import annotations

import base64
from typing import Any

from .records import ProducerRecord, Record


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


def record_from_json(d: dict[str, Any]) -> Record:
    """Inverse of :func:`record_to_json` (for clients reading the JSON form)."""

    def get(text: str | None, b64: str | None) -> bytes | None:
        if b64 is not None:
            return base64.b64decode(b64)
        return None if text is None else text.encode("utf-8")

    value = get(d.get("value"), d.get("value_b64"))
    headers = tuple(
        (h["name"], get(h.get("value"), h.get("value_b64"))) for h in d.get("headers", ())
    )
    return Record(
        int(d["offset"]), int(d["timestamp"]), get(d.get("key"), d.get("key_b64")), value, headers
    )


def producer_record_to_json(rec: ProducerRecord | bytes | str | None) -> dict[str, Any]:
    """A record for a JSON produce request (text where possible, base64 otherwise; a
    null value, or a bare None, as ``"value": null``)."""
    if isinstance(rec, str):
        return {"value": rec}
    if rec is None or isinstance(rec, bytes | bytearray | memoryview):
        rec = ProducerRecord(None if rec is None else bytes(rec))
    out: dict[str, Any] = {}
    if rec.value is None:
        out["value"] = None
    else:
        v, vb = _text_or_b64(bytes(rec.value))
        if v is not None:
            out["value"] = v
        else:
            out["value_b64"] = vb
    if rec.key is not None:
        k, kb = _text_or_b64(bytes(rec.key))
        if k is not None:
            out["key"] = k
        else:
            out["key_b64"] = kb
    if rec.headers:
        hs: list[dict[str, Any]] = []
        for name, hv in rec.headers:
            if hv is None:
                hs.append({"name": name})
            else:
                hs.append({"name": name, "value_b64": base64.b64encode(bytes(hv)).decode("ascii")})
        out["headers"] = hs
    if rec.timestamp is not None:
        out["timestamp"] = rec.timestamp
    return out


__all__ = ["producer_record_to_json", "record_from_json", "record_to_json"]
