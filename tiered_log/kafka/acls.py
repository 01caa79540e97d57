"""The ACL APIs of the Kafka listener: DescribeAcls (29), CreateAcls (30), DeleteAcls (31),
versions 1-3, answered SECURITY_DISABLED as Kafka's broker answers them when no
authorizer is configured.

There are no ACLs here to list, create or delete: without tokens every request is
served; with tokens (``auth_tokens``) access is by each token's grants (``read``,
``write``, ``admin`` per topic pattern, :mod:`tiered_log.kafka.auth`), set in the
service's settings, not over the protocol. So ``kafka-acls --list``, AdminClient's
``describe_acls``/``create_acls``/``delete_acls`` get Kafka's "security disabled" error
with a message saying where access is set, instead of an API the broker does not
advertise. Any connection may ask (the answer grants nothing).

Concurrency: coroutines of the listener's loop; no I/O.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from kio.schema.errors import ErrorCode

from .backend import Backend
from .messages import Request

DESCRIBE_ACLS = 29
CREATE_ACLS = 30
DELETE_ACLS = 31
ACL_APIS: dict[int, tuple[str, int, int]] = {
    DESCRIBE_ACLS: ("describe_acls", 1, 3),
    CREATE_ACLS: ("create_acls", 1, 3),
    DELETE_ACLS: ("delete_acls", 1, 3),
}
"""The ACL APIs served: key -> (kio's module name, first and last version)."""


def no_authorizer(backend: Backend) -> str:
    """The message every ACL answer carries: there is no authorizer, and what there is."""
    if backend.state.settings.auth_tokens:
        return (
            "No Authorizer is configured: access is by the service's tokens and their "
            "grants (auth_tokens), not by ACLs"
        )
    return "No Authorizer is configured: the service has no tokens, every request is served"


class AclHandlers:
    """DescribeAcls, CreateAcls and DeleteAcls over one backend (for its settings).
    Event-loop thread only."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def handlers(self) -> dict[int, Callable[[Request], Awaitable[dict[str, Any]]]]:
        """The handler of each ACL API key."""
        return {
            DESCRIBE_ACLS: self.describe_acls,
            CREATE_ACLS: self.create_acls,
            DELETE_ACLS: self.delete_acls,
        }

    async def describe_acls(self, req: Request) -> dict[str, Any]:
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.security_disabled,
            "error_message": no_authorizer(self.backend),
            "resources": [],
        }

    async def create_acls(self, req: Request) -> dict[str, Any]:
        why = no_authorizer(self.backend)
        return {
            "throttle_time": 0,
            "results": [
                {"error_code": ErrorCode.security_disabled, "error_message": why}
                for _ in req.body.creations
            ],
        }

    async def delete_acls(self, req: Request) -> dict[str, Any]:
        why = no_authorizer(self.backend)
        return {
            "throttle_time": 0,
            "filter_results": [
                {
                    "error_code": ErrorCode.security_disabled,
                    "error_message": why,
                    "matching_acls": [],
                }
                for _ in req.body.filters
            ],
        }


__all__ = ["ACL_APIS", "CREATE_ACLS", "DELETE_ACLS", "DESCRIBE_ACLS", "AclHandlers"]
