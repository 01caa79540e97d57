"""Authentication and authorization on the Kafka listener: SASL/PLAIN with the service's
bearer tokens as passwords, then the HTTP API's grants checked per request.

Authentication (only when the service has ``auth_tokens``; SASL_PLAINTEXT, or SASL_SSL
when the listener serves TLS):

- Before a connection has authenticated, only ApiVersions, SaslHandshake (17, v0-1) and
  SaslAuthenticate (36, v0-2) are answered; any other request closes the connection, as
  Kafka's broker does, and a frame is refused above :data:`PRE_AUTH_MAX_FRAME` bytes
  (Kafka's ``sasl.server.max.receive.size``).
- SaslHandshake names the mechanism: PLAIN is the one enabled; another is answered
  UNSUPPORTED_SASL_MECHANISM with the enabled ones, then the connection is closed.
- After a v1 handshake the client sends SaslAuthenticate, whose ``auth_bytes`` are
  PLAIN's message (RFC 4616)::

      [authzid] NUL authcid NUL passwd     (UTF-8; the username authcid is not checked)

  A v0 handshake (Kafka's original framing, still spoken by librdkafka against old
  brokers) is followed instead by the same message as a raw frame, ``int32 size |
  message`` with no request header; success answers an empty raw frame (``int32 0``),
  failure closes the connection without an answer.
- The password must be one of the service's tokens, checked by the HTTP service's
  :class:`~tiered_log.service.auth.Authenticator` (constant time, against digests);
  the token's grants are the connection's from then on. A wrong password answers
  SASL_AUTHENTICATION_FAILED with a message, then closes the connection.
- Without tokens, the SASL APIs answer ILLEGAL_SASL_STATE (as a Kafka PLAINTEXT
  listener does) and every request is served; so do they after authentication.

Authorization (:class:`KafkaGuard`): the grants of the HTTP API (``read``, ``write``,
``admin`` per topic pattern, admin implying the other two), checked by the same
function, :meth:`~tiered_log.service.auth.Authenticator.authorize`. The part of a
request the token may not do is answered with Kafka's error code and left out of what
the handler sees, so no byte of it is stored nor read:

- Produce: ``write`` on the topic, else TOPIC_AUTHORIZATION_FAILED per partition (an
  ``acks=0`` produce has no answer: the connection is closed, as Kafka's broker closes
  it on any error of such a produce; its granted partitions are appended).
- Fetch, ListOffsets, OffsetForLeaderEpoch: ``read`` (whichever tier holds the data);
  a follower's Fetch (``replica_id`` >= 0): ``admin``, as HTTP's replication route.
- Metadata: asked for every topic, it lists those the token has a grant on; a named topic
  without any grant answers TOPIC_AUTHORIZATION_FAILED; a missing named topic is
  auto-created only with ``admin`` on it, else TOPIC_AUTHORIZATION_FAILED (Kafka's
  answer without CREATE). CreateTopics and DeleteTopics need ``admin`` on each topic
  (HTTP's POST and DELETE; a topic deleted by id alone, ``admin`` on every topic);
  CreatePartitions ``admin`` on each topic (HTTP's PATCH); DeleteRecords ``admin`` on
  each topic (HTTP's delete-records).
- DescribeConfigs of a topic: ``read`` (HTTP's GET of a topic); IncrementalAlterConfigs
  and AlterConfigs of a topic: ``admin`` (HTTP's PATCH). DescribeCluster: any
  authenticated connection (it lists what Metadata lists to any token).
- DescribeLogDirs: ``admin`` on every topic (``*``), else CLUSTER_AUTHORIZATION_FAILED.
- Groups: the HTTP API has no group grants: listing and describing groups takes any
  valid token and committing offsets ``read`` on each topic. The same here: the
  membership APIs, ListGroups and DescribeGroups take any authenticated connection;
  OffsetCommit and OffsetFetch take ``read`` on each topic (TOPIC_AUTHORIZATION_FAILED
  per partition; OffsetFetch of every topic leaves out those the token may not read);
  DeleteGroups, which drops the group's offsets of every topic and has no HTTP
  counterpart, takes ``admin`` on every topic (the pattern ``*``, as the HTTP API's
  cluster-wide operations do), else GROUP_AUTHORIZATION_FAILED; OffsetDelete likewise.
- InitProducerId: a ``write`` grant on some pattern (Kafka: WRITE on any topic), else
  CLUSTER_AUTHORIZATION_FAILED.
- DescribeProducers: ``read`` on each topic (Kafka: READ), else
  TOPIC_AUTHORIZATION_FAILED per partition.
- DescribeAcls, CreateAcls, DeleteAcls: any token (the answer, SECURITY_DISABLED, grants
  nothing: access is by the tokens' grants, :mod:`tiered_log.kafka.acls`).
- Authorized operations asked for in Metadata, DescribeCluster or DescribeGroups are
  those the token's grants allow (:mod:`tiered_log.kafka.operations`).
- An API not listed here (one added later) takes ``admin`` on ``*``; another token's
  request of it closes the connection with a log line (never served unchecked).

Concurrency: event-loop thread only. A :class:`SaslSession` belongs to one connection;
:class:`KafkaGuard` is shared by the listener's connections and keeps no per-request
state.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import uuid
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from ..config import Grant
from ..errors import AuthenticationError, PermissionDeniedError, TopicNotFoundError
from ..service.auth import ANONYMOUS_ALL, Authenticator, Principal
from .acls import CREATE_ACLS, DELETE_ACLS, DESCRIBE_ACLS
from .admin import (
    CREATE_PARTITIONS,
    CREATE_TOPICS,
    DELETE_RECORDS,
    DELETE_TOPICS,
    DESCRIBE_CLUSTER,
    DESCRIBE_LOG_DIRS,
    OFFSET_FOR_LEADER_EPOCH,
)
from .configs import ALTER_CONFIGS, DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS
from .groups.handlers import (
    DELETE_GROUPS,
    DESCRIBE_GROUPS,
    FIND_COORDINATOR,
    HEARTBEAT,
    JOIN_GROUP,
    LEAVE_GROUP,
    LIST_GROUPS,
    OFFSET_COMMIT,
    OFFSET_DELETE,
    OFFSET_FETCH,
    SYNC_GROUP,
)
from .handlers import Handlers, no_records
from .messages import (
    API_VERSIONS,
    APIS,
    FETCH,
    LIST_OFFSETS,
    METADATA,
    PRODUCE,
    ApiSpec,
    BadFrame,
    Request,
)
from .operations import NOT_ASKED, cluster_operations, group_operations, topic_operations
from .producers import DESCRIBE_PRODUCERS, INIT_PRODUCER_ID

log = logging.getLogger("tiered_log.kafka")

SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36

SASL_APIS: dict[int, tuple[str, int, int]] = {
    SASL_HANDSHAKE: ("sasl_handshake", 0, 1),
    SASL_AUTHENTICATE: ("sasl_authenticate", 0, 2),
}
"""The SASL APIs served: key -> (kio's module name, first and last version)."""

APIS.update({k: ApiSpec(k, n, lo, hi, lo) for k, (n, lo, hi) in SASL_APIS.items()})

MECHANISMS = ("PLAIN",)
"""The SASL mechanisms enabled."""

PRE_AUTH_MAX_FRAME = 512 * 1024
"""The largest frame taken before a connection has authenticated (Kafka's
``sasl.server.max.receive.size`` default)."""

PRE_AUTH = frozenset({API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE})
"""The APIs answered before authentication."""

_RAW_OK = b"\x00\x00\x00\x00"
"""The answer to a raw (v0 handshake) PLAIN token that authenticated: an empty frame."""

_TOPIC_DENIED = ErrorCode.topic_authorization_failed
NO_TOPIC_ID = uuid.UUID(int=0)


def parse_plain(message: bytes) -> tuple[str, str]:
    """``(username, password)`` of a SASL/PLAIN message (see the module docstring);
    AuthenticationError when it is not one."""
    parts = message.split(b"\x00")
    if len(parts) != 3:
        raise AuthenticationError(
            "a SASL/PLAIN message is [authzid] NUL username NUL password, "
            f"this one has {len(parts) - 1} NUL bytes"
        )
    try:
        authzid, user, password = (p.decode("utf-8") for p in parts)
    except UnicodeDecodeError:
        raise AuthenticationError("a SASL/PLAIN message must be UTF-8") from None
    if authzid and authzid != user:
        raise AuthenticationError(
            "SASL/PLAIN: an authorization id other than the username is not supported"
        )
    return user, password


class SaslSession:
    """One connection's authentication state (see the module docstring): which
    requests it may send now, the principal once authenticated.

    ``closing`` is set (to the reason, for the log line) when the connection must
    close once the answer being written has gone out."""

    def __init__(self, guard: KafkaGuard) -> None:
        self.guard = guard
        self.principal: Principal | None = None if guard.enabled else ANONYMOUS_ALL
        self.user = ""
        self._mechanism_ok = False
        self.raw_expected = False
        """A v0 handshake chose PLAIN: the next frame is a raw token."""
        self.closing: str | None = None

    def frame_bounds(self, max_frame: int) -> tuple[int, int]:
        """The smallest and largest frame size taken now: a raw token may be shorter
        than a request header; before authentication frames are capped."""
        if self.principal is not None:
            return 8, max_frame
        return (1 if self.raw_expected else 8), min(max_frame, PRE_AUTH_MAX_FRAME)

    def admit(self, api_key: int) -> None:
        """BadFrame (the connection closes) for a request not answered before
        authentication."""
        if self.principal is None and api_key not in PRE_AUTH:
            spec = APIS.get(api_key)
            what = spec.name if spec else f"API key {api_key}"
            raise BadFrame(f"{what} before SASL authentication")

    def raw_token(self, frame: bytes | bytearray | memoryview) -> bytes | None:
        """The answer to a raw PLAIN token (after a v0 handshake); None, and
        ``closing`` set, when it does not authenticate."""
        self.raw_expected = False
        try:
            self._authenticate(bytes(frame))
        except AuthenticationError as exc:
            self.closing = f"SASL/PLAIN authentication failed: {exc.message}"
            return None
        return _RAW_OK

    def _authenticate(self, message: bytes) -> None:
        user, password = parse_plain(message)
        if not password or password != "".join(password.split()):  # tokens have none
            raise AuthenticationError("the password is empty or has whitespace")
        try:
            principal = self.guard.auth.authenticate(f"Bearer {password}")
        except AuthenticationError:
            raise AuthenticationError("the password is not one of the auth_tokens") from None
        self.principal, self.user = principal, user
        log.info("kafka connection authenticated: user %r, %s", user, principal.name)

    async def handle(self, req: Request) -> dict[str, Any] | None:
        """The answer to a request the connection may send now (see :meth:`admit`)."""
        if req.api_key == SASL_HANDSHAKE:
            return self._handshake(req)
        if req.api_key == SASL_AUTHENTICATE:
            return self._sasl_authenticate(req)
        principal = self.principal
        if principal is None or principal.grants is None:
            # ApiVersions before authentication (admit() let nothing else through), or a
            # principal with every grant (a service without tokens): nothing to refuse.
            return await self.guard.handlers.handle(req)
        return await self.guard.handle(principal, req)

    def _handshake(self, req: Request) -> dict[str, Any]:
        out: dict[str, Any] = {"error_code": ErrorCode.none, "mechanisms": MECHANISMS}
        if self.principal is not None or self._mechanism_ok:
            out["error_code"] = ErrorCode.illegal_sasl_state
            if self.principal is None:  # a second handshake instead of the token
                self.closing = "a second SaslHandshake before authenticating"
            return out
        mechanism = req.body.mechanism
        if mechanism not in MECHANISMS:
            out["error_code"] = ErrorCode.unsupported_sasl_mechanism
            self.closing = f"SASL mechanism {mechanism!r} asked (enabled: PLAIN)"
            return out
        self._mechanism_ok = True
        self.raw_expected = req.api_version == 0
        return out

    def _sasl_authenticate(self, req: Request) -> dict[str, Any]:
        out: dict[str, Any] = {
            "error_code": ErrorCode.none,
            "error_message": None,
            "auth_bytes": b"",
            "session_lifetime": 0,
        }
        if self.principal is not None:
            out["error_code"] = ErrorCode.illegal_sasl_state
            out["error_message"] = (
                "SaslAuthenticate after authentication"
                if self.guard.enabled
                else "this listener does not authenticate: the service has no auth_tokens"
            )
            return out
        if not self._mechanism_ok:
            out["error_code"] = ErrorCode.illegal_sasl_state
            out["error_message"] = "SaslAuthenticate before a SaslHandshake chose PLAIN"
            self.closing = out["error_message"]
            return out
        try:
            self._authenticate(bytes(req.body.auth_bytes))
        except AuthenticationError as exc:
            out["error_code"] = ErrorCode.sasl_authentication_failed
            out["error_message"] = (
                f"authentication failed: {exc.message} (SASL/PLAIN: any username, one of "
                "the service's tokens as the password)"
            )
            self.closing = f"SASL/PLAIN authentication failed: {exc.message}"
        return out


@dataclasses.dataclass(frozen=True, slots=True)
class _TopicRule:
    """Where a per-partition API names its topics and partitions, in the request and in
    the answer, and what a refused partition answers besides its index and code."""

    grant: Grant
    topics: str
    name: str
    partitions: str
    index: str
    out_topics: str
    out_name: str
    out_partitions: str
    out_index: str
    refused: Callable[[str], dict[str, Any]]


def _no_fields(_why: str) -> dict[str, Any]:
    return {}


_RULES: dict[int, _TopicRule] = {
    PRODUCE: _TopicRule(
        "write",
        "topic_data",
        "name",
        "partition_data",
        "index",
        "responses",
        "name",
        "partition_responses",
        "index",
        lambda why: {
            "base_offset": -1,
            "log_append_time": -1,
            "log_start_offset": -1,
            "record_errors": (),
            "error_message": why,
        },
    ),
    FETCH: _TopicRule(
        "read",
        "topics",
        "topic",
        "partitions",
        "partition",
        "responses",
        "topic",
        "partitions",
        "partition_index",
        lambda _why: no_records(),
    ),
    LIST_OFFSETS: _TopicRule(
        "read",
        "topics",
        "name",
        "partitions",
        "partition_index",
        "topics",
        "name",
        "partitions",
        "partition_index",
        lambda _why: {"timestamp": -1, "offset": -1, "leader_epoch": -1},
    ),
    OFFSET_FOR_LEADER_EPOCH: _TopicRule(
        "read",
        "topics",
        "topic",
        "partitions",
        "partition",
        "topics",
        "topic",
        "partitions",
        "partition",
        lambda _why: {"leader_epoch": -1, "end_offset": -1},
    ),
    DELETE_RECORDS: _TopicRule(
        "admin",
        "topics",
        "name",
        "partitions",
        "partition_index",
        "topics",
        "name",
        "partitions",
        "partition_index",
        lambda _why: {"low_watermark": -1},
    ),
    OFFSET_COMMIT: _TopicRule(
        "read",
        "topics",
        "name",
        "partitions",
        "partition_index",
        "topics",
        "name",
        "partitions",
        "partition_index",
        _no_fields,
    ),
}
"""The per-partition APIs and the grant each needs."""

_CARRY_OPERATIONS = frozenset({DESCRIBE_CLUSTER, DESCRIBE_GROUPS})
"""The APIs any token may call whose answers carry authorized operations (Metadata,
which carries them too, has its own path)."""

_ANY_TOKEN = frozenset(
    {
        CREATE_ACLS,
        DELETE_ACLS,
        DESCRIBE_ACLS,
        API_VERSIONS,
        DESCRIBE_CLUSTER,
        FIND_COORDINATOR,
        JOIN_GROUP,
        SYNC_GROUP,
        HEARTBEAT,
        LEAVE_GROUP,
        LIST_GROUPS,
        DESCRIBE_GROUPS,
    }
)
"""The APIs any authenticated connection may use (HTTP: any valid token)."""

Handler = Callable[[Principal, Request], Any]


class KafkaGuard:
    """Serves a request of an authenticated principal through ``handlers`` with the
    parts it may not do refused (see the module docstring). Shared by the listener's
    connections; event-loop thread only."""

    def __init__(self, auth: Authenticator, handlers: Handlers) -> None:
        self.auth = auth
        self.handlers = handlers
        self._special: dict[int, Handler] = {
            METADATA: self._metadata,
            CREATE_TOPICS: self._create_topics,
            DELETE_TOPICS: self._delete_topics,
            CREATE_PARTITIONS: self._create_partitions,
            DESCRIBE_CONFIGS: self._describe_configs,
            INCREMENTAL_ALTER_CONFIGS: self._alter_configs,
            ALTER_CONFIGS: self._alter_configs,
            OFFSET_FETCH: self._offset_fetch,
            DELETE_GROUPS: self._delete_groups,
            OFFSET_DELETE: self._offset_delete,
            INIT_PRODUCER_ID: self._init_producer_id,
            DESCRIBE_PRODUCERS: self._describe_producers,
            DESCRIBE_LOG_DIRS: self._describe_log_dirs,
        }

    @property
    def enabled(self) -> bool:
        """Whether connections must authenticate (the service has tokens)."""
        return self.auth.enabled

    def session(self) -> SaslSession:
        """A new connection's authentication state."""
        return SaslSession(self)

    def refusal(self, principal: Principal, topic: str, grant: Grant) -> str | None:
        """Why ``principal`` may not do ``grant`` on ``topic`` (None: it may), by the
        HTTP API's check."""
        try:
            self.auth.authorize(principal, topic, grant)
        except PermissionDeniedError as exc:
            return exc.message
        return None

    async def handle(self, principal: Principal, req: Request) -> dict[str, Any] | None:
        """The answer to ``req`` for ``principal``, a token's with its grants (None:
        none due)."""
        key = req.api_key
        if key in _ANY_TOKEN:
            served = await self.handlers.handle(req)
            if served is not None and key in _CARRY_OPERATIONS:
                self._narrow_operations(principal, served)
            return served
        rule = _RULES.get(key)
        if rule is not None:
            if key == FETCH and int(getattr(req.body, "replica_id", -1)) >= 0:
                rule = dataclasses.replace(rule, grant="admin")  # a follower's: HTTP's grant
            return await self._per_partition(rule, principal, req)
        special = self._special.get(key)
        if special is not None:
            answer: dict[str, Any] | None = await special(principal, req)
            return answer
        if self.refusal(principal, "*", "admin") is None:
            return await self.handlers.handle(req)
        raise BadFrame(f"{APIS[key].name} needs the admin grant on every topic ('*')")

    async def _per_partition(
        self, rule: _TopicRule, principal: Principal, req: Request
    ) -> dict[str, Any] | None:
        allowed, refused = [], []
        for t in getattr(req.body, rule.topics):
            why = self.refusal(principal, getattr(t, rule.name), rule.grant)
            if why is None:
                allowed.append(t)
            else:
                refused.append((t, why))
        if not refused:
            return await self.handlers.handle(req)
        body = dataclasses.replace(req.body, **{rule.topics: tuple(allowed)})
        answer = await self.handlers.handle(dataclasses.replace(req, body=body))
        if answer is None:  # an acks=0 produce: no answer to carry the code
            raise BadFrame("an acks=0 produce to a topic its token has no write grant on")
        rows = list(answer[rule.out_topics])
        for t, why in refused:
            parts = [
                rule.refused(why)
                | {rule.out_index: int(getattr(p, rule.index)), "error_code": _TOPIC_DENIED}
                for p in getattr(t, rule.partitions)
            ]
            rows.append({rule.out_name: getattr(t, rule.name), rule.out_partitions: parts})
        answer[rule.out_topics] = rows
        return answer

    # ---- topics ------------------------------------------------------------------------

    def _narrow_operations(self, principal: Principal, answer: dict[str, Any]) -> None:
        """The authorized operations an answer carries (when asked for), cut down from
        every supported one to what ``principal``'s grants allow (see
        :mod:`~tiered_log.kafka.operations`): a topic's in Metadata, the cluster's in
        Metadata and DescribeCluster, each group's in DescribeGroups."""
        admin_everywhere = self.refusal(principal, "*", "admin") is None
        if answer.get("cluster_authorized_operations", NOT_ASKED) != NOT_ASKED:
            writes = any(principal.allows(p, "write") for p, _ in principal.grants or ())
            answer["cluster_authorized_operations"] = cluster_operations(admin_everywhere, writes)
        for t in answer.get("topics", ()):
            if t.get("topic_authorized_operations", NOT_ASKED) != NOT_ASKED:
                allows = functools.partial(principal.allows, t["name"])
                t["topic_authorized_operations"] = topic_operations(allows)
        for g in answer.get("groups", ()):
            if g.get("authorized_operations", NOT_ASKED) != NOT_ASKED:
                g["authorized_operations"] = group_operations(admin_everywhere)

    async def _metadata(self, principal: Principal, req: Request) -> dict[str, Any]:
        answer = await self._metadata_rows(principal, req)
        self._narrow_operations(principal, answer)
        return answer

    async def _metadata_rows(self, principal: Principal, req: Request) -> dict[str, Any]:
        body = req.body
        if body.topics is None:
            answer = await self.handlers.handle(req)
            assert answer is not None
            answer["topics"] = [t for t in answer["topics"] if principal.allows_any(t["name"])]
            return answer
        names = [t.name for t in body.topics]
        hidden = {n for n in names if not principal.allows_any(n)}
        # A missing topic is created only with admin on it: look the others up first.
        auto = bool(getattr(body, "allow_auto_topic_creation", True))
        be = self.handlers.backend
        no_create = [n for n in names if n not in hidden and not principal.allows(n, "admin")]
        if auto and be.auto_create and no_create:
            for info in await be.topics(no_create, False):
                if isinstance(info.error, TopicNotFoundError):
                    hidden.add(info.name)
        if hidden:
            kept = tuple(t for t in body.topics if t.name not in hidden)
            req = dataclasses.replace(req, body=dataclasses.replace(body, topics=kept))
        answer = await self.handlers.handle(req)
        assert answer is not None
        if hidden:
            rows = list(answer["topics"])
            for name in dict.fromkeys(n for n in names if n in hidden):
                rows.append(
                    {
                        "error_code": _TOPIC_DENIED,
                        "name": name,
                        "topic_id": NO_TOPIC_ID,
                        "is_internal": False,
                        "partitions": [],
                        "topic_authorized_operations": NOT_ASKED,
                    }
                )
            answer["topics"] = rows
        return answer

    async def _admin_per_topic(
        self,
        principal: Principal,
        req: Request,
        out: str,
        refused_row: Callable[[Any, str], dict[str, Any]],
        grant: Grant = "admin",
    ) -> dict[str, Any]:
        """An API naming its topics in ``req.body.topics`` (each with a ``name``):
        ``grant`` (``admin`` for the admin APIs) on each; the refused ones are left out
        of the request and answered in the answer's list ``out`` with
        ``refused_row(topic, why)``."""
        allowed: list[Any] = []
        refused: list[tuple[Any, str]] = []
        for t in req.body.topics:
            why = self.refusal(principal, t.name, grant)
            if why is None:
                allowed.append(t)
            else:
                refused.append((t, why))
        if refused:
            body = dataclasses.replace(req.body, topics=tuple(allowed))
            req = dataclasses.replace(req, body=body)
        answer = await self.handlers.handle(req)
        assert answer is not None
        if refused:
            answer[out] = list(answer[out]) + [refused_row(t, why) for t, why in refused]
        return answer

    async def _create_topics(self, principal: Principal, req: Request) -> dict[str, Any]:
        return await self._admin_per_topic(
            principal,
            req,
            "topics",
            lambda t, why: {
                "name": t.name,
                "topic_id": NO_TOPIC_ID,
                "error_code": _TOPIC_DENIED,
                "error_message": why,
                "num_partitions": -1,
                "replication_factor": -1,
                "configs": None,
            },
        )

    async def _delete_topics(self, principal: Principal, req: Request) -> dict[str, Any]:
        """DeleteTopics: ``admin`` on each topic (HTTP's DELETE); a topic named only by
        its id (v6) takes ``admin`` on every topic, as its name is not known here."""
        body = req.body
        by_name = hasattr(body, "topic_names")
        entries = list(body.topic_names) if by_name else list(body.topics)
        allowed: list[Any] = []
        refused: list[tuple[Any, str]] = []
        for e in entries:
            name = e if by_name else e.name
            why = self.refusal(principal, "*" if name is None else name, "admin")
            if why is None:
                allowed.append(e)
            else:
                refused.append((e, why))
        if refused:
            field = "topic_names" if by_name else "topics"
            body = dataclasses.replace(body, **{field: tuple(allowed)})
            req = dataclasses.replace(req, body=body)
        answer = await self.handlers.handle(req)
        assert answer is not None
        if refused:
            answer["responses"] = list(answer["responses"]) + [
                {
                    "name": e if by_name else e.name,
                    "topic_id": NO_TOPIC_ID if by_name else e.topic_id,
                    "error_code": _TOPIC_DENIED,
                    "error_message": why,
                }
                for e, why in refused
            ]
        return answer

    async def _create_partitions(self, principal: Principal, req: Request) -> dict[str, Any]:
        """CreatePartitions: ``admin`` on each topic (HTTP's PATCH)."""
        return await self._admin_per_topic(
            principal,
            req,
            "results",
            lambda t, why: {"name": t.name, "error_code": _TOPIC_DENIED, "error_message": why},
        )

    async def _describe_configs(self, principal: Principal, req: Request) -> dict[str, Any]:
        return await self._resources(principal, req, "read", "results", {"configs": ()})

    async def _alter_configs(self, principal: Principal, req: Request) -> dict[str, Any]:
        return await self._resources(principal, req, "admin", "responses", {})

    async def _resources(
        self, principal: Principal, req: Request, grant: Grant, out: str, extra: dict[str, Any]
    ) -> dict[str, Any]:
        """The config APIs: a topic resource needs ``grant``; the others are left to the
        handler (the broker's configs are described to any token, altered by none)."""
        from .configs import TOPIC

        allowed: list[tuple[Any, str | None]] = []
        refused: list[tuple[Any, str | None]] = []
        for res in req.body.resources:
            why = None
            if res.resource_type == TOPIC:
                why = self.refusal(principal, res.resource_name, grant)
            (allowed if why is None else refused).append((res, why))
        if refused:
            body = dataclasses.replace(req.body, resources=tuple(r for r, _ in allowed))
            req = dataclasses.replace(req, body=body)
        answer = await self.handlers.handle(req)
        assert answer is not None
        if refused:
            answer[out] = list(answer[out]) + [
                {
                    "error_code": _TOPIC_DENIED,
                    "error_message": why,
                    "resource_type": res.resource_type,
                    "resource_name": res.resource_name,
                    **extra,
                }
                for res, why in refused
            ]
        return answer

    # ---- groups and producers ----------------------------------------------------------

    async def _offset_fetch(self, principal: Principal, req: Request) -> dict[str, Any]:
        body = req.body
        if req.api_version >= 8:
            groups = [(g, *self._readable(principal, g.topics)) for g in body.groups]
            if any(refused for _, _, refused in groups):
                kept = tuple(dataclasses.replace(g, topics=t) for g, t, _ in groups)
                req = dataclasses.replace(req, body=dataclasses.replace(body, groups=kept))
            answer = await self.handlers.handle(req)
            assert answer is not None
            rows = list(answer["groups"])
            for i, (_, _, refused) in enumerate(groups):
                rows[i] = dict(rows[i])
                rows[i]["topics"] = self._fetched(principal, rows[i]["topics"], refused)
            answer["groups"] = rows
            return answer
        topics, refused = self._readable(principal, body.topics)
        if refused:
            req = dataclasses.replace(req, body=dataclasses.replace(body, topics=topics))
        answer = await self.handlers.handle(req)
        assert answer is not None
        answer["topics"] = self._fetched(principal, answer["topics"], refused)
        return answer

    def _readable(self, principal: Principal, topics: Any) -> tuple[Any, list[Any]]:
        """OffsetFetch's topics split: those the token may read (None stays None: every
        topic, filtered in the answer) and those it may not."""
        if topics is None:
            return None, []
        kept: list[Any] = []
        refused: list[Any] = []
        for t in topics:
            (kept if principal.allows(t.name, "read") else refused).append(t)
        return tuple(kept), refused

    def _fetched(self, principal: Principal, rows: Any, refused: list[Any]) -> list[Any]:
        """OffsetFetch's answer topics: only readable ones, then the refused ones."""
        out = [r for r in rows if principal.allows(r["name"], "read")]
        for t in refused:
            out.append(
                {
                    "name": t.name,
                    "partitions": [
                        {
                            "partition_index": int(i),
                            "committed_offset": -1,
                            "committed_leader_epoch": -1,
                            "metadata": "",
                            "error_code": _TOPIC_DENIED,
                        }
                        for i in t.partition_indexes
                    ],
                }
            )
        return out

    async def _delete_groups(self, principal: Principal, req: Request) -> dict[str, Any]:
        refused = {
            "throttle_time": 0,
            "results": [
                {"group_id": g, "error_code": ErrorCode.group_authorization_failed}
                for g in req.body.groups_names
            ],
        }
        return await self._served_or(self.refusal(principal, "*", "admin") is None, req, refused)

    async def _offset_delete(self, principal: Principal, req: Request) -> dict[str, Any]:
        """OffsetDelete: as DeleteGroups, ``admin`` on every topic."""
        refused = {
            "error_code": ErrorCode.group_authorization_failed,
            "throttle_time": 0,
            "topics": [],
        }
        return await self._served_or(self.refusal(principal, "*", "admin") is None, req, refused)

    async def _init_producer_id(self, principal: Principal, req: Request) -> dict[str, Any]:
        grants = principal.grants or ()
        allowed = any(principal.allows(pattern, "write") for pattern, _ in grants)
        refused = {
            "throttle_time": 0,
            "error_code": ErrorCode.cluster_authorization_failed,
            "producer_id": -1,
            "producer_epoch": -1,
        }
        return await self._served_or(allowed, req, refused)

    async def _describe_log_dirs(self, principal: Principal, req: Request) -> dict[str, Any]:
        """DescribeLogDirs: ``admin`` on every topic (``*``, the HTTP API's cluster-wide
        grant), else no log directory and CLUSTER_AUTHORIZATION_FAILED (v3+), as Kafka
        answers one without DESCRIBE on the cluster."""
        refused = {
            "throttle_time": 0,
            "error_code": ErrorCode.cluster_authorization_failed,
            "results": [],
        }
        return await self._served_or(self.refusal(principal, "*", "admin") is None, req, refused)

    async def _describe_producers(self, principal: Principal, req: Request) -> dict[str, Any]:
        """DescribeProducers: ``read`` on each topic (Kafka: READ), else every partition
        of the topic named answers TOPIC_AUTHORIZATION_FAILED."""
        return await self._admin_per_topic(
            principal,
            req,
            "topics",
            lambda t, why: {
                "name": t.name,
                "partitions": [
                    {
                        "partition_index": index,
                        "error_code": _TOPIC_DENIED,
                        "error_message": why,
                        "active_producers": (),
                    }
                    for index in t.partition_indexes
                ],
            },
            grant="read",
        )

    async def _served_or(
        self, allowed: bool, req: Request, refused: dict[str, Any]
    ) -> dict[str, Any]:
        """The handler's answer to ``req`` when ``allowed``, else ``refused``."""
        if not allowed:
            return refused
        answer = await self.handlers.handle(req)
        assert answer is not None
        return answer


__all__ = [
    "MECHANISMS",
    "PRE_AUTH_MAX_FRAME",
    "SASL_APIS",
    "KafkaGuard",
    "SaslSession",
    "parse_plain",
]
