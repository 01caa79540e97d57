"""Settings of the tiered_log service: environment, an optional config file, defaults.

Where a setting comes from, highest priority first:

1. explicit overrides (``tiered-log serve --host/--port/--data-dir``);
2. environment variables ``TIERED_LOG_<FIELD>`` (nested fields with ``__``, e.g.
   ``TIERED_LOG_TOPIC_DEFAULTS__FLUSH_MESSAGES=1``; mappings and lists as JSON, e.g.
   ``TIERED_LOG_AUTH_TOKENS='{"s3cret": {"*": ["admin"]}}'``);
3. a config file, TOML (``.toml``) or JSON (any other name), named by ``--config`` or
   ``TIERED_LOG_CONFIG_FILE``; its keys are the field names below;
4. the defaults below.

:func:`load_settings` turns every problem (a bad value, an unreadable file, unknown
keys) into a :class:`ConfigError` whose text is one line,
``invalid setting <name>: <why>``, that never contains a secret (bearer tokens and the
S3 secret key are kept out of error messages, ``repr`` and :meth:`Settings.redacted`).
The name says where the value came from: ``port (TIERED_LOG_PORT)``, ``port (in
FILE)``, ``port (--port)``. An unknown key is refused wherever it is: in the config file,
and as a ``TIERED_LOG_*`` environment variable that is neither a setting nor one of
:data:`OTHER_ENV` (a typo such as ``TIERED_LOG_REMOTE_CACH_BYTES`` would otherwise be
ignored); both errors name the closest valid setting.

The remote tier: ``remote_url`` is ``s3://bucket/prefix`` (with ``s3_endpoint_url``,
``s3_region``, ``s3_access_key``, ``s3_secret_key``, ``s3_path_style`` for S3-compatible
stores), ``file:///path`` or a plain directory path; unset means the local directory
``<data_dir>-remote`` beside the data directory (not inside it: losing the data directory
must not lose the archive). A data directory whose ``remote`` subdirectory exists (the
default of earlier versions) keeps using it, with a warning, until ``remote_url`` says
otherwise.

Relative paths (``data_dir``, a directory ``remote_url``, wherever they are set: the
command line, the environment or the config file) are relative to the working directory
of the process that loads the settings, and are made absolute when loaded, so the
settings line the server logs shows where its data really is.

Topic configuration (:class:`TopicConfig`, defined in :mod:`tiered_log.topic_config` and
re-exported here) is the per-topic set of log settings, the one configuration the local
log's and the remote tier's settings derive from; the service's ``topic_defaults``
supply every value a topic does not override. The node-level tier settings
(``remote_chunk_bytes``, ``remote_cache_bytes``, ``ship_interval_ms``,
``remote_copies_in_flight``, ``remote_fetch_max_wait_ms``, ``remote_worker_processes``,
``remote_worker_nice``)
default to the tier's own
defaults (:data:`~tiered_log.remote.tier_config.TIER_DEFAULTS`). The default
flush policy is ``flush_messages=1``: every append batch is fsynced before the service
acknowledges it, so an acknowledged record survives a machine crash. Raising it (or
using ``flush_ms``) trades that guarantee for throughput: acknowledged records then
survive a killed process (they reached the OS) but may be lost with the machine.

Settings objects are immutable pydantic models: safe to share between threads and tasks.
"""

from __future__ import annotations

import contextvars
import difflib
import fnmatch
import json
import logging
import os
import re
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from .errors import InvalidArgumentError
from .local.log import LogConfig
from .remote.tier_config import TIER_DEFAULTS
from .topic_config import MAX_INT, MAX_SEGMENT_BYTES, TOPIC_DEFAULTS, TopicConfig

Grant = Literal["read", "write", "admin"]
"""A permission on a topic: ``read`` (fetch, offsets, bounds, describe), ``write``
(append), ``admin`` (create, delete, truncate; implies read and write)."""

GRANTS: tuple[Grant, ...] = ("read", "write", "admin")
_log = logging.getLogger("tiered_log.config")
_TOPIC_PATTERN_RE = re.compile(r"^[A-Za-z0-9._*?-]{1,200}$")


class ConfigError(Exception):
    """Invalid settings. ``str(err)`` is one line: ``invalid setting <name>: <why>``."""

    def __init__(self, name: str, why: str) -> None:
        self.name = name
        self.why = why
        super().__init__(f"invalid setting {name}: {why}")


def _check_log_config(cfg: TopicConfig) -> TopicConfig:
    try:
        LogConfig.of(cfg)
    except InvalidArgumentError as exc:
        raise ValueError(str(exc)) from exc
    return cfg


BUCKET_RULE = (
    "S3 bucket names are 3-63 characters of lower-case letters, digits, '.' and '-', "
    "starting and ending with a letter or digit"
)


def bucket_name_problem(bucket: str) -> str | None:
    """Why ``bucket`` is not a valid S3 bucket name (one phrase and the rule), or None."""
    if not bucket:
        why = "the bucket name is missing"
    elif not 3 <= len(bucket) <= 63:
        why = f"bucket name {bucket!r} has {len(bucket)} characters"
    elif bucket != bucket.lower():
        why = f"bucket name {bucket!r} has upper-case letters"
    elif bad := sorted({c for c in bucket if not (c.isalnum() and c.isascii()) and c not in ".-"}):
        why = f"bucket name {bucket!r} has {''.join(bad)!r}"
    elif not (bucket[0].isalnum() and bucket[-1].isalnum()):
        why = f"bucket name {bucket!r} does not start and end with a letter or digit"
    else:
        return None
    return f"{why}; {BUCKET_RULE}"


def validate_topic_pattern(pattern: str) -> str:
    """A grant's topic pattern: a topic name, or a glob of topic-name characters and ``*?``."""
    if not _TOPIC_PATTERN_RE.match(pattern) or pattern in (".", ".."):
        raise ValueError("topic patterns are 1-200 letters, digits, '.', '_', '-', '*' or '?'")
    return pattern


# The config file's content for the Settings being built (set by load_settings).
_FILE_DATA: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "tiered_log_config_file_data", default=None
)


class _FileSource(PydanticBaseSettingsSource):
    """Values from the config file that :func:`load_settings` read (lower than env)."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        data = _FILE_DATA.get() or {}
        return data.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(_FILE_DATA.get() or {})


class Settings(BaseSettings):
    """Every setting of the service; see the module docstring for sources and priority."""

    model_config = SettingsConfigDict(
        env_prefix="TIERED_LOG_",
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
        validate_default=True,
    )

    data_dir: Path = Field(Path("./data"), description="Where topics and their logs live.")
    host: str = Field("127.0.0.1", min_length=1, description="Listen address.")
    port: int = Field(8080, ge=0, le=65535, description="Listen port (0: any free port).")
    kafka_port: int = Field(
        9092,
        ge=0,
        le=65535,
        description="Port of the Kafka-protocol listener, on the listen address (0: no "
        "Kafka listener).",
    )
    kafka_advertised_host: str | None = Field(
        None,
        min_length=1,
        description="Host name Kafka clients are told to connect to (Metadata); unset: "
        "the listen address (127.0.0.1 for a wildcard one).",
    )
    kafka_auto_create_topics: bool = Field(
        True,
        description="A Kafka client's Metadata or produce for a missing topic creates it "
        "with the default partition count (Kafka's auto.create.topics.enable).",
    )
    producer_id_expiration_ms: int = Field(
        24 * 3600 * 1000,
        ge=1,
        le=(1 << 31) - 1,
        description="A partition forgets an idempotent producer it has not stored a batch "
        "of for this long (Kafka's producer.id.expiration.ms).",
    )
    remote_url: str | None = Field(
        None,
        description="s3://bucket/prefix, file:///dir or a directory; unset: the directory "
        "<data_dir>-remote beside the data directory.",
    )
    s3_endpoint_url: str | None = None
    s3_region: str | None = None
    s3_access_key: SecretStr | None = None
    s3_secret_key: SecretStr | None = None
    s3_path_style: bool = True
    read_only_remote: bool = Field(
        False,
        description="Mount another cluster's archive read-only: serve every topic found "
        "in remote_url's bucket (HTTP and Kafka reads), follow what its owner ships, refuse "
        "every write (403 read_only; Kafka POLICY_VIOLATION) and never write or delete an "
        "object there. Needs remote_url; not with a cluster.",
    )
    remote_poll_interval_ms: int = Field(
        30_000,
        ge=50,
        le=3_600_000,
        description="How often a read-only mount looks for topics and segments its owner "
        "shipped (ms): two small requests per partition (its metadata and a listing of "
        "what came after the last segment known) and one listing of the topics.",
    )
    remote_cache_bytes: int = Field(
        TIER_DEFAULTS.cache_bytes, ge=0, description="Remote chunk cache size."
    )
    ship_interval_ms: int = Field(
        TIER_DEFAULTS.ship_interval_ms, ge=1, description="How often the shipper looks for work."
    )
    remote_upload_bytes_per_sec: int | None = Field(
        None,
        ge=1,
        description="Upload rate limit of the node, shared by its partitions "
        "(bytes/s, as Kafka's remote copy quota); null: unlimited.",
    )
    remote_fetch_bytes_per_sec: int | None = Field(
        None,
        ge=1,
        description="Remote fetch quota of the node, shared by its partitions "
        "(bytes/s read from the bucket, as Kafka's remote fetch quota); null: unlimited.",
    )
    remote_fetch_max_wait_ms: int = Field(
        TIER_DEFAULTS.fetch_max_wait_ms,
        ge=1,
        le=600_000,
        description="How long a read waits for the bucket (ms, as "
        "Kafka's remote.fetch.max.wait.ms): then it answers 503 remote_timeout, retriable, "
        "while the fetch goes on to be cached for the retry. Waits for the fetch quota do "
        "not count. S3 GET attempts get at least this long (and at least 5 s) each.",
    )
    remote_copies_in_flight: int = Field(
        TIER_DEFAULTS.copies_in_flight,
        ge=1,
        le=8,
        description="Segment copies a partition keeps under way at once (1: "
        "one after another; more ships faster, at some cost in producer latency).",
    )
    remote_worker_processes: int = Field(
        TIER_DEFAULTS.worker_processes,
        ge=0,
        le=16,
        description="Worker processes that upload and verify segments, so that shipping "
        "does not take the producers' interpreter (0: threads of the server process).",
    )
    remote_worker_nice: int = Field(
        TIER_DEFAULTS.worker_nice,
        ge=0,
        le=19,
        description="How much lower the tier workers' CPU priority is (nice; 0: the "
        "server's): on a busy machine producers and consumers get the CPU first.",
    )
    replica_catchup_retention_bytes: int = Field(
        TIER_DEFAULTS.catchup_retention_bytes,
        ge=0,
        le=1 << 50,
        description="How many bytes of shipped segments past local retention a partition's "
        "leader keeps on disk while a live follower still copies them (a rebuilt node "
        "catching up), so it is not sent back to the remote end again and again while "
        "producers move the local start (0: none).",
    )
    remote_chunk_bytes: int = Field(
        TIER_DEFAULTS.chunk_bytes,
        ge=4096,
        le=1 << 30,
        description="A shipped segment gets one remoteLogIndex entry per chunk of this size.",
    )
    remote_encryption_key_file: Path | None = Field(
        None,
        description='Key ring for the archive\'s envelope encryption: JSON {"active": "k2", '
        '"keys": {"k1": "<base64 of 32 bytes>", "k2": ...}}. Set: every segment shipped is '
        "encrypted (AES-256-GCM) with a data key of its own, wrapped with the active key; "
        "the file is read again when it changes. Unset: shipped unencrypted.",
    )
    scrub_interval_s: float = Field(
        0.0,
        ge=0,
        le=30 * 86400,
        description="The background scrubber reads both tiers of every partition this node "
        "holds back every this many seconds (its local segments; for the partitions it "
        "leads, their archived copies), verifying every batch and object, repairing damage "
        "from a good copy and counting what stays in /metrics. 0 (the default): passes run "
        "only when asked (`tiered-log archive scrub --url`), as a pass reads everything.",
    )
    scrub_bytes_per_sec: int = Field(
        4 << 20,
        ge=4096,
        le=1 << 34,
        description="The scrubber reads at most this many bytes a second (both tiers).",
    )
    topic_defaults: TopicConfig = Field(TOPIC_DEFAULTS)
    auth_tokens: dict[str, dict[str, list[Grant]]] = Field(
        default_factory=dict,
        repr=False,
        description='Bearer token -> {topic pattern -> grants}, e.g. {"t0k": {"*": ["admin"]}}. '
        "Empty: authentication is off. Also the Kafka listener's SASL/PLAIN passwords (any "
        "username), with the same grants.",
    )
    tls_certfile: Path | None = Field(
        None,
        description="Certificate (PEM) of HTTPS and of the Kafka listener's TLS (SSL; "
        "SASL_SSL with auth_tokens); with tls_keyfile.",
    )
    tls_keyfile: Path | None = Field(None, description="Private key (PEM) of tls_certfile.")
    max_request_bytes: int = Field(
        32 << 20, ge=1024, le=1 << 31, description="Largest request body accepted (bytes)."
    )
    max_fetch_bytes: int = Field(
        64 << 20, ge=1024, le=1 << 31, description="Cap on a fetch's max_bytes."
    )
    max_request_head_bytes: int = Field(
        64 << 10,
        ge=1024,
        le=16 << 20,
        description="Largest request head (request line and header fields, bytes), and "
        "largest trailer section of a chunked body; larger: 431 and the connection closed.",
    )
    header_timeout_s: float = Field(
        10.0,
        gt=0,
        le=3600,
        description="A request head must arrive within this (s) from the connection's "
        "opening or its first byte; else 408 and the connection closed.",
    )
    body_timeout_s: float = Field(
        20.0,
        gt=0,
        le=3600,
        description="Longest pause in a request body (s), and the grace before "
        "body_min_bytes_per_s applies; else 408 and the connection closed.",
    )
    body_min_bytes_per_s: int = Field(
        500,
        ge=0,
        le=1 << 30,
        description="Slowest average request body rate (bytes/s) accepted once "
        "body_timeout_s has passed; 0: no minimum.",
    )
    max_total_partitions: int = Field(
        10_000, ge=1, le=1_000_000, description="Partitions (over all topics) one server holds."
    )
    maintenance_interval_ms: int = Field(
        1000, ge=10, le=3_600_000, description="Time-based flush, roll and retention period."
    )
    shutdown_timeout_s: float = Field(
        30.0, gt=0, le=3600, description="How long SIGTERM waits for in-flight requests."
    )
    node_id: int | None = Field(
        None,
        ge=0,
        le=1_000_000,
        description="This node's id in a cluster (with "
        "advertised_url and cluster_etcd); unset: a single node, no etcd.",
    )
    advertised_url: str | None = Field(
        None, description="The URL other nodes and clients reach this node at (cluster)."
    )
    cluster_etcd: str | None = Field(
        None,
        description="etcd client URL holding the cluster's metadata, e.g. "
        "http://127.0.0.1:2379; unset: a single node.",
    )
    cluster_name: str = Field(
        "tiered-log",
        pattern=r"^[A-Za-z0-9._-]{1,100}$",
        description="Names the cluster's keys in etcd (several clusters may share one etcd).",
    )
    cluster_lease_ttl_s: int = Field(
        3,
        ge=1,
        le=300,
        description="A node's membership lease: a node silent this long "
        "is dead to the cluster and loses its leaderships.",
    )
    replica_lag_time_max_ms: int = Field(
        10_000,
        ge=100,
        le=3_600_000,
        description="A follower that has not caught up with "
        "its leader for this long leaves the in-sync replicas (Kafka's "
        "replica.lag.time.max.ms).",
    )
    replica_fetch_wait_max_ms: int = Field(
        300,
        ge=0,
        le=60_000,
        description="How long a follower's fetch waits at its leader "
        "for new records before it is answered empty (Kafka's replica.fetch.wait.max.ms); "
        "less than replica_lag_time_max_ms.",
    )
    replication_transport: Literal["auto", "http"] = Field(
        "auto",
        description="How a follower fetches from its leader: 'auto' over the "
        "leader's Kafka listener when it has one (Fetch with the replica id), else its "
        "HTTP replication route; 'http' always over HTTP.",
    )
    replication_timeout_ms: int = Field(
        30_000,
        ge=100,
        le=600_000,
        description="How long an acks=all produce waits for "
        "the in-sync replicas before answering 503 replication_timeout.",
    )
    unclean_leader_election: bool = Field(
        False,
        description="Elect a replica outside the ISR when no ISR member is alive "
        "(may lose acknowledged records; off as in Kafka).",
    )
    cluster_token: SecretStr | None = Field(
        None,
        repr=False,
        description="Bearer token the nodes send each other when auth "
        "is on (it needs admin on every topic).",
    )
    log_level: Literal["critical", "error", "warning", "info", "debug"] = "info"
    access_log: bool = True

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, _FileSource(settings_cls))

    @field_validator("topic_defaults")
    @classmethod
    def _topic_defaults_valid(cls, v: TopicConfig) -> TopicConfig:
        return _check_log_config(v)

    @field_validator("data_dir")
    @classmethod
    def _data_dir_absolute(cls, v: Path) -> Path:
        return Path(os.path.abspath(v.expanduser()))

    @field_validator("remote_url")
    @classmethod
    def _remote_url_valid(cls, v: str | None) -> str | None:
        if v is None or v == "":
            return None
        if v.startswith("s3://"):
            why = bucket_name_problem(v[5:].split("/", 1)[0])
            if why:
                raise ValueError(f"s3://bucket/prefix: {why}")
            return v
        if v.startswith("file://"):
            if not v[7:].startswith("/"):
                raise ValueError("file:// URLs need an absolute path (file:///dir)")
            return v
        if "://" in v:
            raise ValueError("must be s3://bucket/prefix, file:///dir or a directory path")
        return os.path.abspath(os.path.expanduser(v))

    @field_validator("remote_encryption_key_file")
    @classmethod
    def _key_ring_valid(cls, v: Path | None) -> Path | None:
        if v is None or str(v) == "":
            return None
        from .remote.crypto import key_ring

        p = Path(os.path.abspath(v.expanduser()))
        try:
            key_ring(p)
        except InvalidArgumentError as exc:
            raise ValueError(exc.message) from None
        return p

    @field_validator("auth_tokens")
    @classmethod
    def _tokens_valid(
        cls, v: dict[str, dict[str, list[Grant]]]
    ) -> dict[str, dict[str, list[Grant]]]:
        for i, (token, grants) in enumerate(v.items()):
            if not token or any(c.isspace() for c in token) or not token.isprintable():
                raise ValueError(f"token #{i + 1} is empty or has whitespace or control characters")
            for pattern in grants:
                try:
                    validate_topic_pattern(pattern)
                except ValueError as exc:
                    raise ValueError(f"token #{i + 1}: {exc}") from None
        return v

    @model_validator(mode="after")
    def _cluster_complete(self) -> Settings:
        given = [
            n for n in ("node_id", "advertised_url", "cluster_etcd") if getattr(self, n) is not None
        ]
        if given and len(given) != 3:
            missing = [n for n in ("node_id", "advertised_url", "cluster_etcd") if n not in given]
            raise ValueError(
                f"{missing[0]}: a cluster node needs node_id, advertised_url "
                "and cluster_etcd together"
            )
        for name in ("advertised_url", "cluster_etcd"):
            v = getattr(self, name)
            if v is not None and not re.fullmatch(r"https?://[^\s/]+(/\S*)?", v):
                raise ValueError(f"{name}: must be an http:// or https:// URL, got {v!r}")
        if self.replica_fetch_wait_max_ms >= self.replica_lag_time_max_ms:
            raise ValueError(
                "replica_fetch_wait_max_ms: must be less than "
                f"replica_lag_time_max_ms ({self.replica_lag_time_max_ms}): a "
                "follower waiting that long at its leader would leave the ISR"
            )
        return self

    @model_validator(mode="after")
    def _read_only_mount(self) -> Settings:
        if self.read_only_remote and not self.remote_url:
            raise ValueError(
                "read_only_remote: a read-only mount needs remote_url, the bucket of the "
                "cluster that owns the archive"
            )
        if self.read_only_remote and self.cluster_etcd is not None:
            raise ValueError(
                "read_only_remote: a read-only mount is a single node (unset cluster_etcd)"
            )
        return self

    @property
    def clustered(self) -> bool:
        """Whether this node is part of a cluster (else: the embedded single node)."""
        return self.cluster_etcd is not None

    @model_validator(mode="after")
    def _tls_pair(self) -> Settings:
        if (self.tls_certfile is None) != (self.tls_keyfile is None):
            raise ValueError("tls_keyfile: tls_certfile and tls_keyfile must be set together")
        for name in ("tls_certfile", "tls_keyfile"):
            p = getattr(self, name)
            if p is not None and not Path(p).is_file():
                raise ValueError(f"{name}: {p} is not a readable file")
        return self

    # ---- derived values ------------------------------------------------------------------

    @property
    def auth_enabled(self) -> bool:
        return bool(self.auth_tokens)

    @property
    def tls_enabled(self) -> bool:
        return self.tls_certfile is not None

    def remote_storage_url(self) -> str:
        """Where the remote tier lives: ``remote_url``, else ``file://<data_dir>-remote``
        (or the earlier default ``<data_dir>/remote`` when that directory exists, with a
        warning logged once that it goes with the data directory)."""
        if self.remote_url:
            return self.remote_url
        data = self.data_dir.resolve()
        inside = data / "remote"
        if inside.is_dir():
            if inside not in _WARNED_INSIDE:
                _WARNED_INSIDE.add(inside)
                _log.warning(
                    "the remote tier is %s, inside the data directory (the earlier default): "
                    "losing the data directory loses the archive too; move it out and set "
                    "remote_url (TIERED_LOG_REMOTE_URL) to where it went",
                    inside,
                )
            return inside.as_uri()
        return default_remote_dir(data).as_uri()

    def s3_options(self) -> dict[str, Any]:
        """Keyword arguments for the S3 backend (secrets revealed: pass them, never log)."""
        return {
            "endpoint_url": self.s3_endpoint_url,
            "region": self.s3_region,
            "access_key": self.s3_access_key.get_secret_value() if self.s3_access_key else None,
            "secret_key": self.s3_secret_key.get_secret_value() if self.s3_secret_key else None,
            "path_style": self.s3_path_style,
            # A GET a reader stopped waiting for may still bring the chunk for its retry:
            # give each attempt at least the readers' wait (S3Storage's default is 5 s).
            "get_timeout": max(5.0, self.remote_fetch_max_wait_ms / 1000),
        }

    def redacted(self) -> dict[str, Any]:
        """The settings as JSON-able data with every secret replaced, for logs; the
        remote tier as the store it resolves to."""
        out = self.model_dump(mode="json", exclude={"auth_tokens"})
        out["remote_url"] = self.remote_storage_url()
        for name in ("s3_access_key", "s3_secret_key", "cluster_token"):
            if out.get(name):
                out[name] = "**********"
        out["auth_tokens"] = f"<{len(self.auth_tokens)} token(s)>"
        return out

    def grants_match(self, pattern: str, topic: str) -> bool:
        """Whether a grant's topic pattern covers ``topic`` (exact name or glob)."""
        return pattern == topic or fnmatch.fnmatchcase(topic, pattern)


def default_remote_dir(data_dir: Path) -> Path:
    """The default remote tier of a data directory: ``<data_dir>-remote``, its sibling."""
    data = Path(os.path.abspath(data_dir))
    return data.parent / f"{data.name or 'data'}-remote"


_WARNED_INSIDE: set[Path] = set()
"""Remote tiers inside a data directory already warned about (once per process)."""


ENV_PREFIX = "TIERED_LOG_"

OTHER_ENV = frozenset({"CONFIG_FILE", "TOKEN", "URL", "ETCD_BIN", "DEBUG"})
"""``TIERED_LOG_*`` variables that are not settings: the config file, the CLI's service
URL and token, the etcd binary, the CLI's tracebacks (and ``TIERED_LOG_TEST_*``, the test
suite's)."""


def _closest(name: str, choices: list[str], spell: str = "{}") -> str:
    """`` (did you mean X?)`` for the closest of ``choices`` (written as ``spell``
    formats it; an environment variable's spelling is upper case), or ``""``."""
    near = difflib.get_close_matches(name, choices, n=1, cutoff=0.6)
    if not near:
        return ""
    written = spell.format(near[0])
    return f" (did you mean {written.upper() if spell.startswith(ENV_PREFIX) else written}?)"


def _model_of(field: str) -> type[BaseModel] | None:
    """The settings model a field holds (its nested keys), if it is one."""
    info = Settings.model_fields.get(field)
    ann = info.annotation if info is not None else None
    return ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None


def check_env_names(environ: dict[str, str]) -> None:
    """Refuse a ``TIERED_LOG_*`` variable that names no setting (nor a nested key of
    one, after ``__``), naming the closest valid variable. Names are case-insensitive,
    as the settings' environment source reads them."""
    fields = sorted(Settings.model_fields)
    for var in sorted(environ):
        upper = var.upper()
        if not upper.startswith(ENV_PREFIX):
            continue
        rest = upper[len(ENV_PREFIX) :]
        if rest in OTHER_ENV or rest.startswith("TEST_"):
            continue
        top, sep, sub = rest.lower().partition("__")
        if top not in Settings.model_fields:
            spell = ENV_PREFIX + "{}"
            raise ConfigError(var, "unknown setting" + _closest(top, fields, spell))
        model = _model_of(top)
        key = sub.split("__", 1)[0]
        if sep and model is not None and key not in model.model_fields:
            spell = f"{ENV_PREFIX}{top}__{{}}"
            near = _closest(key, sorted(model.model_fields), spell)
            raise ConfigError(var, f"unknown key of {top}" + near)


def _source_of(field: str, overrides: dict[str, Any], file: str | None) -> str:
    """Where ``field``'s value came from, as the user wrote it: ``--flag``, the
    ``TIERED_LOG_*`` variable, ``in FILE``; ``""`` for a default."""
    if field in overrides:
        return "--" + field.replace("_", "-")
    want = f"{ENV_PREFIX}{field.upper()}"
    for var in os.environ:
        if var.upper() == want or var.upper().startswith(want + "__"):
            return var
    data = _FILE_DATA.get() or {}
    if file is not None and field in data:
        return f"in {file}"
    return ""


def _read_config_file(path: Path) -> dict[str, Any]:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError("config_file", f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        if path.suffix.lower() == ".toml":
            data: Any = tomllib.loads(raw.decode("utf-8"))
        else:
            data = json.loads(raw)
    except (UnicodeDecodeError, tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        kind = "TOML" if path.suffix.lower() == ".toml" else "JSON"
        raise ConfigError("config_file", f"{path} is not valid {kind}: {msg}") from None
    if not isinstance(data, dict):
        raise ConfigError("config_file", f"{path} must hold a table/object of settings")
    return data


def _error_name(loc: tuple[int | str, ...]) -> str:
    parts: list[str] = []
    for i, p in enumerate(loc):
        if i == 1 and loc[0] == "auth_tokens":
            parts.append("<token>")  # never print a token, even a malformed one
        elif isinstance(p, int):
            parts.append(f"[{p}]")
        else:
            parts.append(str(p))
    return ".".join(parts).replace(".[", "[")


def _from_validation_error(
    exc: ValidationError, overrides: dict[str, Any], file: str | None
) -> ConfigError:
    errors = exc.errors(include_url=False, include_input=False)
    first = errors[0]
    loc = tuple(first.get("loc", ()))
    msg = str(first.get("msg", "invalid"))
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            msg = msg[len(prefix) :]
    name = _error_name(loc)
    if not name:
        name, sep, rest = msg.partition(": ")
        if not sep:
            name, rest = "settings", msg
        msg = rest
    if first.get("type") == "extra_forbidden":
        where = f" in {file}" if file else ""
        if len(loc) == 1:
            msg = f"unknown setting{where}" + _closest(str(loc[0]), sorted(Settings.model_fields))
        else:
            model = _model_of(str(loc[0]))
            keys = sorted(model.model_fields) if model is not None else []
            msg = f"unknown setting{where}" + _closest(str(loc[-1]), keys)
    elif loc and isinstance(loc[0], str):
        source = _source_of(loc[0], overrides, file)
        if source:
            name = f"{name} ({source})"
    more = len(errors) - 1
    if more:
        msg += f" (and {more} more problem{'s' if more > 1 else ''})"
    return ConfigError(name, " ".join(msg.split()))


def load_settings(config_file: str | Path | None = None, **overrides: Any) -> Settings:
    """Build :class:`Settings` from overrides, the environment and the config file.

    ``config_file`` defaults to ``$TIERED_LOG_CONFIG_FILE``. Raises :class:`ConfigError`
    (one line, no secrets) on any problem. Overrides whose value is None are ignored.
    Safe from any thread (the file's content is passed through a context variable).
    """
    path = config_file if config_file is not None else os.environ.get("TIERED_LOG_CONFIG_FILE")
    data = _read_config_file(Path(path)) if path else {}
    check_env_names(dict(os.environ))
    given = {k: v for k, v in overrides.items() if v is not None}
    token = _FILE_DATA.set(data)
    try:
        return Settings(**given)
    except ValidationError as exc:
        raise _from_validation_error(exc, given, str(path) if path else None) from None
    except SettingsError as exc:
        # pydantic-settings' parse errors name the field and source, never the value.
        m = re.search(r'field "([^"]+)"', str(exc))
        name = m.group(1) if m else "environment"
        source = _source_of(name, {}, None) if m else ""
        name = f"{name} ({source})" if source else name
        raise ConfigError(
            name, "cannot parse the value from the environment (expected JSON)"
        ) from None
    finally:
        _FILE_DATA.reset(token)


__all__ = [
    "BUCKET_RULE",
    "GRANTS",
    "MAX_INT",
    "MAX_SEGMENT_BYTES",
    "OTHER_ENV",
    "TOPIC_DEFAULTS",
    "ConfigError",
    "Grant",
    "Settings",
    "TopicConfig",
    "bucket_name_problem",
    "check_env_names",
    "load_settings",
    "validate_topic_pattern",
]
