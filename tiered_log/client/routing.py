"""Which node a partition's requests go to, and when a failed request is tried again.
Shared by :class:`~tiered_log.client.Client` and :class:`~tiered_log.client.AsyncClient`.

A client is given one URL or several (:func:`parse_urls`). In a cluster only a
partition's leader accepts produce and consumer fetches; :class:`Routes` caches which
node leads which partition, learnt from ``GET /v1/cluster`` (asked of each known URL in
turn, :meth:`Routes.cluster_urls`). A node that answers 404 there is a single node (not
clustered): every request then goes to it, and nothing is retried, exactly as before
clusters existed. While etcd is out of reach a node answers its last view, marked
``stale`` (with ``metadata_age_ms``): it is used as any other, since leaders keep serving
through an etcd outage, and a leader replaced meanwhile answers ``not_leader`` naming its
successor.

Retry rules (:class:`Attempts`, only once the client has seen a cluster), until the
client's ``retry_timeout_s`` has passed (then the last error is raised), with a short
doubling back-off between tries:

- ``not_leader`` (:class:`~tiered_log.errors.NotLeaderError`): sent again to the leader
  the error names, or, when it names none (an election is under way), to the leader of
  a fresh map. For a produce (or truncate) only when the node refused before appending:
  the "does not lead" answer of a node that is not the leader, or a message saying
  "nothing was appended". A leader that lost its leadership while the records waited
  for replication also answers ``not_leader``; those records were appended and may
  survive on the new leader, so that answer is raised, not retried.
- ``not_enough_replicas``: a produce is sent again only when the message says "nothing
  was appended" (refused before the append); "appended but are not acknowledged" is
  raised (sending again could store the records twice).
- A connection failure: a read (fetch, bounds, offsets) is always tried again, after a
  fresh map (a GET changes nothing). A produce or truncate only when nothing was sent
  (:class:`~tiered_log.client.messages.RequestNotSentError`: the connection was refused
  or could not be made). A connection that broke after the request went out is raised
  as :class:`~tiered_log.errors.ConnectionFailedError`: the records may have been
  appended, and only the caller can decide to send them again (an automatic resend
  could store an acknowledged record twice; this is what keeps "every acknowledged
  record read back exactly once" true for a caller that never resends).
- ``shutting_down``: a read is tried again elsewhere after a fresh map; a produce is not.
- ``not_ready`` (:class:`~tiered_log.errors.PartitionNotReadyError`: a new leader still
  reading the bucket, answered before anything is done): tried again at the same leader,
  as a Kafka client retries LEADER_NOT_AVAILABLE.
- Anything else is raised at once.

Thread-safety: :class:`Routes` is shared by every thread of a client (a lock guards the
map); an :class:`Attempts` belongs to one call.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .. import errors as E
from .messages import RequestNotSentError, error_from_response

CLUSTER_PATH = "/v1/cluster"
"""Where a node describes the cluster (404 on a single node)."""

FIRST_DELAY_S = 0.05
"""The back-off before the first retry; it doubles up to :data:`MAX_DELAY_S`."""

MAX_DELAY_S = 0.5
"""The longest back-off between two tries (short against a lease of a few seconds)."""


def parse_urls(urls: str | Sequence[str]) -> list[str]:
    """The node URLs a client is given: one URL, a comma-separated string of them, or a
    sequence; trailing slashes dropped, duplicates removed, order kept. A bare
    ``host:port`` means ``http://host:port`` (as kcat's and rpk's broker lists).
    InvalidArgumentError when there is none, or for a scheme other than http(s)."""
    items = (
        urls.split(",") if isinstance(urls, str) else [u for part in urls for u in part.split(",")]
    )
    out: list[str] = []
    for u in items:
        u = u.strip().rstrip("/")
        if u and "://" not in u:
            u = "http://" + u
        scheme = u.partition("://")[0].lower()
        if u and scheme not in ("http", "https"):
            raise E.InvalidArgumentError(
                f"service URL {u!r}: the scheme must be http:// or https://"
            )
        if u and u not in out:
            out.append(u)
    if not out:
        raise E.InvalidArgumentError(f"no service URL in {urls!r}")
    return out


class Routes:
    """The leader of each partition as last learnt, and the nodes known (see the module
    docstring). Thread-safe."""

    def __init__(self, urls: Sequence[str]) -> None:
        self.seeds = list(urls)
        self._lock = threading.Lock()
        self._nodes: dict[int, str] = {}
        self._leaders: dict[tuple[str, int], str] = {}
        self._single: str | None = None
        self._clustered = False

    @property
    def clustered(self) -> bool:
        """Whether a node answered ``GET /v1/cluster`` (then failures are retried)."""
        with self._lock:
            return self._clustered

    def leader(self, topic: str, partition: int) -> str | None:
        """The URL requests for this partition go to; None when not known (ask
        :meth:`cluster_urls` for ``/v1/cluster``)."""
        with self._lock:
            if self._single is not None:
                return self._single
            return self._leaders.get((topic, partition))

    def set_leader(self, topic: str, partition: int, url: str) -> None:
        """A ``not_leader`` answer named the leader."""
        with self._lock:
            self._leaders[(topic, partition)] = url.rstrip("/")

    def forget(self, topic: str, partition: int) -> None:
        with self._lock:
            self._leaders.pop((topic, partition), None)

    def cluster_urls(self) -> list[str]:
        """Whom to ask for the cluster's map, in turn: the URLs given, then the nodes the
        last map named."""
        with self._lock:
            nodes = list(self._nodes.values())
        return _dedup([*self.seeds, *nodes])

    def any_urls(self) -> list[str]:
        """Where a request any node answers (topic admin) may go, in turn."""
        with self._lock:
            if self._single is not None:
                return [self._single]
        return self.cluster_urls()

    def learn_single(self, url: str) -> None:
        """``url`` answered 404 to ``GET /v1/cluster``: a single node."""
        with self._lock:
            if not self._clustered:
                self._single = url

    def learn(self, answered: str, cluster: dict[str, Any], topic: str, partition: int) -> str:
        """Take a ``GET /v1/cluster`` answer (from ``answered``); returns the URL for
        ``topic``/``partition``: its leader's, or ``answered`` when the map names none
        (no such partition, or an election under way: that node's answer says which)."""
        nodes = {
            int(n["node_id"]): str(n["url"]).rstrip("/")
            for n in cluster.get("nodes", ())
            if n.get("url") and n.get("alive", True)
        }
        leaders: dict[tuple[str, int], str] = {}
        for p in cluster.get("partitions", ()):
            lid = p.get("leader")
            if isinstance(lid, int) and lid in nodes:
                leaders[(str(p["topic"]), int(p["partition"]))] = nodes[lid]
        with self._lock:
            self._clustered = True
            self._single = None
            self._nodes = nodes
            self._leaders = leaders
        return leaders.get((topic, partition), answered)

    def take_answer(
        self, answered: str, status: int, body: bytes, topic: str, partition: int
    ) -> str | E.TieredLogError:
        """One node's answer to ``GET /v1/cluster`` while looking for a partition's
        leader (both clients' loop): the URL to send to (the leader, or ``answered``: a
        single node answers 404), or the error to remember before asking the next node
        (a 5xx; another error status raises)."""
        if status == 404:
            self.learn_single(answered)
            return answered
        if status >= 500:
            return error_from_response(status, body)
        if status >= 400:
            raise error_from_response(status, body)
        return self.learn(answered, json.loads(body), topic, partition)


@dataclass(frozen=True, slots=True)
class Step:
    """What to do after a failed try: wait ``delay_s``, then send to ``url`` (None:
    refresh the map first)."""

    delay_s: float
    url: str | None


def refused_before_append(exc: E.TieredLogError) -> bool:
    """Whether a produce's error says the records were not appended (see the module
    docstring)."""
    msg = getattr(exc, "message", str(exc))
    if "nothing was appended" in msg:
        return True
    return isinstance(exc, E.NotLeaderError) and " does not lead " in msg


class Attempts:
    """The retry state of one routed call (see the module docstring): ``writes`` for a
    produce or truncate (whose request may change the log). One per call; not shared."""

    def __init__(
        self, routes: Routes, topic: str, partition: int, *, writes: bool, timeout_s: float
    ) -> None:
        self.routes = routes
        self.topic = topic
        self.partition = partition
        self.writes = writes
        self.deadline = time.monotonic() + timeout_s
        self.delay = FIRST_DELAY_S

    def after(self, exc: E.TieredLogError) -> Step:
        """The next step after ``exc``; raises ``exc`` when it is not to be retried (or
        the deadline has passed)."""
        retry, url = self._retry_to(exc)
        delay = self.delay
        if not retry or time.monotonic() + delay > self.deadline:
            raise exc
        self.delay = min(self.delay * 2, MAX_DELAY_S)
        if url is None:
            self.routes.forget(self.topic, self.partition)
        else:
            self.routes.set_leader(self.topic, self.partition, url)
        return Step(delay, url)

    def _retry_to(self, exc: E.TieredLogError) -> tuple[bool, str | None]:
        """Whether to retry, and where: a URL, or None (after a fresh map)."""
        if not self.routes.clustered:
            return False, None  # a single node (or none reached yet): as before clusters
        if isinstance(exc, E.NotLeaderError):
            if self.writes and not refused_before_append(exc):
                return False, None
            return True, exc.leader_url or None
        if isinstance(exc, E.NotEnoughReplicasError):
            ok = self.writes and refused_before_append(exc)
            return ok, self.routes.leader(self.topic, self.partition)
        if isinstance(exc, E.ConnectionFailedError):
            return not self.writes or isinstance(exc, RequestNotSentError), None
        if isinstance(exc, E.ShuttingDownError) and not self.writes:
            return True, None
        if isinstance(exc, E.PartitionNotReadyError):
            return True, self.routes.leader(self.topic, self.partition)
        return False, None


def _dedup(urls: list[str]) -> list[str]:
    out: list[str] = []
    for u in urls:
        if u not in out:
            out.append(u)
    return out


__all__ = ["CLUSTER_PATH", "Attempts", "Routes", "Step", "parse_urls", "refused_before_append"]
