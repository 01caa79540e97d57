"""Bearer-token authentication and per-topic grants.

Tokens come from ``Settings.auth_tokens``: ``{token: {topic pattern: [grants]}}``. A
pattern is a topic name or a glob (``*``, ``orders.*``). Grants: ``read`` (fetch,
offsets, bounds, describe), ``write`` (append), ``admin`` (create, delete, truncate;
implies read and write). With no tokens configured authentication is off and every
request may do everything.

A request without a valid ``Authorization: Bearer <token>`` gets 401 (the message also
says how the ``tiered-log`` command sends one); a valid token without the grant gets 403
naming the grant and the topic asked for. Both are decided before any topic is looked
up, so the answer never reveals data, nor whether the topic exists.

Tokens are compared in constant time against their SHA-256 digests; the tokens
themselves are kept nowhere else and never logged. Immutable after construction: safe
from any thread or task.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..config import Grant, Settings
from ..errors import AuthenticationError, PermissionDeniedError

# AuthenticationError (401) and PermissionDeniedError (403) live in tiered_log.errors,
# with every other error; they are re-exported here for the callers that import them
# from this module.


def _implied(grants: Sequence[str]) -> frozenset[str]:
    out = set(grants)
    if "admin" in out:
        out |= {"read", "write"}
    return frozenset(out)


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the grants of one token (``None`` grants = auth disabled)."""

    name: str
    grants: tuple[tuple[str, frozenset[str]], ...] | None

    def allows(self, topic: str, grant: Grant) -> bool:
        """Whether this caller may do ``grant`` on ``topic``."""
        if self.grants is None:
            return True
        from fnmatch import fnmatchcase

        return any(
            grant in have and (pattern == topic or fnmatchcase(topic, pattern))
            for pattern, have in self.grants
        )

    def allows_any(self, topic: str) -> bool:
        """Whether this caller has any grant on ``topic`` (to list it)."""
        return any(self.allows(topic, g) for g in ("read", "write", "admin"))

    @property
    def is_authenticated(self) -> bool:
        return True


ANONYMOUS_ALL = Principal("anonymous", None)


SEND_TOKEN = (
    "send Authorization: Bearer <token> (tiered-log commands: --token TOKEN or "
    "$TIERED_LOG_TOKEN; the Python client: token=)"
)


class Authenticator:
    """Checks bearer tokens against the configured ones; see the module docstring."""

    def __init__(self, tokens: Mapping[str, Mapping[str, Sequence[str]]]) -> None:
        self._entries: list[tuple[bytes, Principal]] = []
        for i, (token, grants) in enumerate(tokens.items()):
            digest = hashlib.sha256(token.encode("utf-8")).digest()
            principal = Principal(
                f"token#{i + 1}",
                tuple((pattern, _implied(list(g))) for pattern, g in grants.items()),
            )
            self._entries.append((digest, principal))

    @classmethod
    def from_settings(cls, settings: Settings) -> Authenticator:
        return cls(settings.auth_tokens)

    @property
    def enabled(self) -> bool:
        return bool(self._entries)

    def authenticate(self, authorization: str | None) -> Principal:
        """The principal of an ``Authorization`` header value; AuthenticationError if none."""
        if not self._entries:
            return ANONYMOUS_ALL
        if not authorization:
            raise AuthenticationError(f"authentication required: {SEND_TOKEN}")
        scheme, _, token = authorization.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise AuthenticationError(f"authentication required: {SEND_TOKEN}")
        digest = hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()
        found: Principal | None = None
        for known, principal in self._entries:
            if hmac.compare_digest(known, digest):  # check all: no early exit on a match
                found = principal
        if found is None:
            raise AuthenticationError(
                "invalid bearer token: it is not one of the service's auth_tokens"
            )
        return found

    def authorize(self, principal: Principal, topic: str, grant: Grant) -> None:
        """Raise PermissionDeniedError unless ``principal`` has ``grant`` on ``topic``."""
        if not principal.allows(topic, grant):
            raise PermissionDeniedError(f"this token has no {grant!r} grant on topic {topic!r}")


__all__ = [
    "ANONYMOUS_ALL",
    "AuthenticationError",
    "Authenticator",
    "PermissionDeniedError",
    "Principal",
]
