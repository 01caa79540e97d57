"""Kafka's authorized operations (KIP-430): the bit set a Metadata (v8+), DescribeCluster
or DescribeGroups (v3+) answer carries when the client asks for it
(``include_topic_authorized_operations``, ``include_cluster_authorized_operations``,
``include_authorized_operations``); what admin clients show as a topic's, the cluster's or
a group's ``authorized_operations``.

Layout: an int32 whose bit ``1 << code`` is set for each operation allowed, with Kafka's
``AclOperation`` codes (READ 3, WRITE 4, CREATE 5, DELETE 6, ALTER 7, DESCRIBE 8,
CLUSTER_ACTION 9, DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11, IDEMPOTENT_WRITE 12); not asked
for, the field is INT32_MIN (:data:`NOT_ASKED`).

Which operations: a listener without tokens allows everything, so it answers every
operation the resource type supports, as Kafka's broker does without an authorizer.
With tokens, the HTTP API's grants map onto them (the same checks the listener makes,
see :mod:`tiered_log.kafka.auth`): on a topic, ``read`` allows READ, DESCRIBE and
DESCRIBE_CONFIGS, ``write`` WRITE and DESCRIBE, ``admin`` every topic operation; on the
cluster, ``admin`` on every topic (``*``) allows every cluster operation, a ``write``
grant on any pattern IDEMPOTENT_WRITE (InitProducerId), and any token DESCRIBE; on a
group, any token READ and DESCRIBE, ``admin`` on ``*`` DELETE too.

Pure functions over constants; safe from any thread.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from enum import IntEnum

NOT_ASKED = -(2**31)
"""Authorized operations not computed (Kafka's INT32_MIN)."""


class AclOperation(IntEnum):
    """Kafka's ``AclOperation`` codes (the bit positions of the set)."""

    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12


Op = AclOperation

TOPIC_OPERATIONS = frozenset(
    {
        Op.READ,
        Op.WRITE,
        Op.CREATE,
        Op.DELETE,
        Op.ALTER,
        Op.DESCRIBE,
        Op.DESCRIBE_CONFIGS,
        Op.ALTER_CONFIGS,
    }
)
"""What a topic supports (Kafka's ``AclEntry.supportedOperations(TOPIC)``)."""

GROUP_OPERATIONS = frozenset({Op.READ, Op.DESCRIBE, Op.DELETE})
"""What a consumer group supports."""

CLUSTER_OPERATIONS = frozenset(
    {
        Op.CREATE,
        Op.ALTER,
        Op.DESCRIBE,
        Op.CLUSTER_ACTION,
        Op.DESCRIBE_CONFIGS,
        Op.ALTER_CONFIGS,
        Op.IDEMPOTENT_WRITE,
    }
)
"""What the cluster supports."""

_TOPIC_GRANTS: dict[str, frozenset[AclOperation]] = {
    "read": frozenset({Op.READ, Op.DESCRIBE, Op.DESCRIBE_CONFIGS}),
    "write": frozenset({Op.WRITE, Op.DESCRIBE}),
    "admin": TOPIC_OPERATIONS,
}


def bits(ops: Iterable[AclOperation]) -> int:
    """The int32 bit set of ``ops``."""
    out = 0
    for op in ops:
        out |= 1 << int(op)
    return out


def when_asked(asked: object, supported: Iterable[AclOperation]) -> int:
    """What a handler answers: the bit set of every ``supported`` operation when the
    request's flag ``asked`` is set, else :data:`NOT_ASKED` (a token's grants cut it
    down afterwards, :class:`~tiered_log.kafka.auth.KafkaGuard`)."""
    return bits(supported) if asked else NOT_ASKED


def topic_operations(allows: Callable[[str], bool]) -> int:
    """A topic's set for a caller; ``allows(grant)`` says whether it holds ``grant``
    (``read``, ``write``, ``admin``) on the topic."""
    ops: set[AclOperation] = set()
    for grant, granted in _TOPIC_GRANTS.items():
        if allows(grant):
            ops |= granted
    return bits(ops)


def cluster_operations(admin_everywhere: bool, writes_somewhere: bool) -> int:
    """The cluster's set for a caller with (or without) ``admin`` on ``*`` and a
    ``write`` grant on some pattern."""
    if admin_everywhere:
        return bits(CLUSTER_OPERATIONS)
    return bits({Op.DESCRIBE, *((Op.IDEMPOTENT_WRITE,) if writes_somewhere else ())})


def group_operations(admin_everywhere: bool) -> int:
    """A group's set for a caller with (or without) ``admin`` on ``*``."""
    if admin_everywhere:
        return bits(GROUP_OPERATIONS)
    return bits({Op.READ, Op.DESCRIBE})


__all__ = [
    "CLUSTER_OPERATIONS",
    "GROUP_OPERATIONS",
    "NOT_ASKED",
    "TOPIC_OPERATIONS",
    "AclOperation",
    "bits",
    "cluster_operations",
    "group_operations",
    "topic_operations",
    "when_asked",
]
