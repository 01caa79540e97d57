"""Schemathesis hooks for the API fuzz test (loaded through ``SCHEMATHESIS_HOOKS``).

Long polls are part of the API (``wait_ms`` up to 30 s at the end of a log); the fuzz
run clamps valid ``wait_ms`` values to 200 ms so a generated long poll is not mistaken
for a hang and the run stays short. Everything else is sent as generated (invalid
``wait_ms`` values too).
"""

from __future__ import annotations

from typing import Any

import schemathesis

MAX_WAIT_MS = 200


@schemathesis.hook
def before_call(ctx: Any, case: Any, **kwargs: Any) -> None:
    query = case.query
    if not isinstance(query, dict) or "wait_ms" not in query:
        return
    value = query["wait_ms"]
    if isinstance(value, int) and not isinstance(value, bool) and value > MAX_WAIT_MS:
        query["wait_ms"] = MAX_WAIT_MS
    elif isinstance(value, str) and value.strip().isdigit() and int(value) > MAX_WAIT_MS:
        query["wait_ms"] = str(MAX_WAIT_MS)
