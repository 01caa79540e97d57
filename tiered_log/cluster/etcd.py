"""The cluster's metadata store: a narrow, versioned interface over etcd.

:class:`MetaStore` is everything the cluster code does with etcd, under one key prefix
(``/tiered_log/<cluster_name>/``; keys given to it are relative to that prefix). It
talks to etcd's JSON gRPC-gateway (``/v3/...``, etcd >= 3.4) with ``etcd3gw``'s
client, building the request bodies itself (etcd3gw's helpers cannot compare on
``mod_revision``, encode ``str`` keys as latin-1 and lose the gateway's ``error``
field on keepalive).

The invariant it keeps: **metadata changes only by compare-and-swap.** A value is
written with :meth:`MetaStore.create` (only if absent; :meth:`MetaStore.create_all`
for several keys in one transaction, all or none) or :meth:`MetaStore.put_if`
(only if its ``mod_revision`` is still the one the writer read) and removed with
:meth:`MetaStore.delete_if`, so two writers that read the same version cannot both
win: the loser gets ``False``, re-reads and decides again; no update is lost. Each may
also carry a :class:`Fence` (a key's ``create_revision`` must be unchanged), which is
how a deposed controller's writes are refused (see
:class:`~tiered_log.cluster.membership.ControllerElection`). The plain
:meth:`MetaStore.put` is for lease-bound ephemeral keys only (a node's registration),
whose one writer is their owner.

Values are JSON (UTF-8) in etcd; a stored value that is not JSON reads back as
``bytes``. Every request is bounded by ``timeout_s`` (connect and read, 2 s by
default), and every failure to get an answer (refused, timed out, a 5xx, a malformed
answer) raises :class:`~tiered_log.errors.MetadataUnavailableError` (retriable) with a
one-line message; a request etcd rejects as invalid raises it with ``retriable=False``;
a write naming a lease etcd no longer has raises
:class:`~tiered_log.errors.LeaseNotFoundError`. After a timeout the outcome of a write
is unknown: read the key back (a ``mod_revision`` that moved may be the writer's own).

**Contact.** The store also notes how well etcd has been answering
(:meth:`MetaStore.contact_since`): the end of the last request that got no answer, or
an answer slower than ``slow_s``. etcd expires a lease whose renewals it did not
process in time, also when it was itself the one that stalled (a paused or overloaded
etcd wakes and drops every lease whose time ran out meanwhile): a node's registration
missing right after such a gap says nothing of the node. The controller acts on a
node's absence only once it has seen etcd answer promptly for a whole lease TTL
(:class:`~tiered_log.cluster.controller.Controller`).

Changes are observed by polling (:meth:`MetaStore.poll_prefix`), not by etcd watches:
a poll after an outage simply sees the current state, with no stream to resume, no
compacted revision to fall behind, and no events to miss; metadata is small and
changes rarely, so a read every half second costs little.

Thread-safety: a :class:`MetaStore` may be shared by any number of threads. Each
thread gets its own HTTP session (``requests.Session`` is not thread-safe), so a call
hanging on a paused etcd holds up no other thread; the store itself keeps no other
mutable state than the list of those sessions (under a lock).
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import requests
from etcd3gw.client import Etcd3Client
from etcd3gw.exceptions import Etcd3Exception

from tiered_log.errors import LeaseNotFoundError, MetadataUnavailableError

log = logging.getLogger(__name__)

# gRPC status codes (in the gateway's error body) that say the request itself is wrong:
# repeating it cannot help (InvalidArgument, PermissionDenied, FailedPrecondition,
# OutOfRange, Unimplemented, Unauthenticated).
_NOT_RETRIABLE = {3, 7, 9, 11, 12, 16}
_GRPC_NOT_FOUND = 5

MAX_TXN_OPS = 128
"""etcd's default ``--max-txn-ops``: the most compares, and the most puts, one
transaction may hold (etcd refuses more as an invalid request)."""


@dataclass(frozen=True)
class Versioned:
    """One key's value as read, with the revisions a compare-and-swap needs.

    ``value`` is the JSON-decoded value (``bytes`` if it is not JSON); ``mod_revision``
    the store revision of its last change (what :meth:`MetaStore.put_if` and
    :meth:`MetaStore.delete_if` compare); ``create_revision`` the revision that created
    it (changes only if the key is deleted and created again); ``version`` the number
    of changes since creation; ``lease`` the lease it is bound to (0: none).
    """

    key: str
    value: Any
    mod_revision: int
    create_revision: int
    version: int
    lease: int


@dataclass(frozen=True)
class Fence:
    """A condition a write carries: ``key`` (relative) still has ``create_revision``.

    Since revisions only grow, a key deleted and created again has a larger
    ``create_revision``, and an absent key has 0: a fenced write succeeds only while the
    very key instance it names exists (the controller key of one controller epoch).
    """

    key: str
    create_revision: int


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _range_end(prefix: bytes) -> bytes:
    """The first key after every key that starts with ``prefix``."""
    end = bytearray(prefix)
    while end and end[-1] == 0xFF:
        end.pop()
    if not end:
        return b"\0"  # every key
    end[-1] += 1
    return bytes(end)


def _decode_value(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def _one_line(text: str, limit: int = 200) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


class MetaStore:
    """The cluster's view of etcd: versioned JSON values under one key prefix.

    ``endpoint`` is etcd's client URL (``http://host:port``); keys are relative to
    ``/tiered_log/<cluster_name>/``. See the module docstring for the compare-and-swap
    invariant, the error contract and thread-safety. :meth:`close` releases the HTTP
    sessions; the store is a context manager.
    """

    def __init__(
        self,
        endpoint: str,
        cluster_name: str,
        *,
        timeout_s: float = 2.0,
        root: str = "/tiered_log",
        slow_s: float = 0.5,
    ) -> None:
        url = urlsplit(endpoint)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"etcd endpoint must be http(s)://host:port, not {endpoint!r}")
        if not cluster_name or "/" in cluster_name:
            raise ValueError(f"bad cluster name {cluster_name!r}")
        self.endpoint = endpoint.rstrip("/")
        self.prefix = f"{root.rstrip('/')}/{cluster_name}/"
        self.timeout_s = timeout_s
        self._host = url.hostname
        self._port = url.port or (443 if url.scheme == "https" else 2379)
        self._scheme = url.scheme
        self._local = threading.local()
        self._lock = threading.Lock()
        self._clients: list[Etcd3Client] = []
        self._closed = False
        self.slow_s = slow_s
        """An answer slower than this counts as a gap in contact (:meth:`contact_since`)."""
        self._contact_since = 0.0  # no gap seen (a node notes its start: note_gap)

    # ---- transport -----------------------------------------------------------------

    def _client(self) -> Etcd3Client:
        client: Etcd3Client | None = getattr(self._local, "client", None)
        if client is None:
            # api_path given: no /version discovery round trip (etcd >= 3.4 serves /v3/)
            client = Etcd3Client(
                host=self._host,
                port=self._port,
                protocol=self._scheme,
                timeout=self.timeout_s,
                api_path="/v3/",
            )
            with self._lock:
                if self._closed:
                    client.session.close()
                    raise MetadataUnavailableError("metadata store is closed", retriable=False)
                self._clients.append(client)
            self._local.client = client
        return client

    def contact_since(self) -> float:
        """Since when (``time.monotonic()``) etcd has answered every request of this
        store promptly: the end of the last request that failed to get an answer (or
        got one slower than ``slow_s``), or the last :meth:`note_gap`; 0.0 if neither
        happened. Only an answer counts as contact: etcd refusing a request (a lease it
        no longer has, an invalid request) is an answer; a timeout, a refused
        connection or a 5xx is not."""
        with self._lock:
            return self._contact_since

    def note_gap(self) -> None:
        """Count the time until now as a gap in contact: for an owner that saw nothing
        of etcd before (a node starting, which cannot tell whether etcd just came
        back)."""
        self._note_gap()

    def _note_gap(self) -> None:
        now = time.monotonic()
        with self._lock:
            self._contact_since = max(self._contact_since, now)

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST ``body`` to the gateway's ``/v3/<path>``; the answer's JSON object.

        Maps every failure to :class:`MetadataUnavailableError` (one line, naming the
        endpoint and the operation), and notes gaps in contact (:meth:`contact_since`)."""
        sent = time.monotonic()
        try:
            answer = self._post_once(path, body)
        except MetadataUnavailableError as exc:
            if exc.retriable and not isinstance(exc, LeaseNotFoundError):
                self._note_gap()
            raise
        if time.monotonic() - sent > self.slow_s:
            self._note_gap()
        return answer

    def _post_once(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if self._closed:
            raise MetadataUnavailableError("metadata store is closed", retriable=False)
        client = self._client()
        try:
            answer = client.post(client.get_url(path), json=body)
        except Etcd3Exception as exc:
            raise self._map_error(path, exc) from exc
        except (requests.RequestException, ValueError) as exc:
            raise MetadataUnavailableError(
                f"etcd at {self.endpoint} {path}: {type(exc).__name__}: {_one_line(str(exc))}"
            ) from exc
        if not isinstance(answer, dict):
            raise MetadataUnavailableError(f"etcd at {self.endpoint} {path}: not a JSON object")
        error = answer.get("error")
        if error:  # a streaming endpoint (keepalive) reports errors in a 200 answer
            if isinstance(error, dict):
                raise self._error_from_body(path, error)
            raise MetadataUnavailableError(f"etcd at {self.endpoint} {path}: {error}")
        return answer

    def _map_error(self, path: str, exc: Etcd3Exception) -> MetadataUnavailableError:
        detail = exc.detail_text or ""
        try:
            body = json.loads(detail)
        except ValueError:
            body = None
        if isinstance(body, dict):
            return self._error_from_body(path, body)
        reason = " ".join(str(a) for a in exc.args) or type(exc).__name__
        return MetadataUnavailableError(
            f"etcd at {self.endpoint} {path}: {type(exc).__name__}: {_one_line(detail or reason)}"
        )

    def _error_from_body(self, path: str, body: dict[str, Any]) -> MetadataUnavailableError:
        code = body.get("code")
        message = _one_line(str(body.get("message") or body.get("error") or body))
        text = f"etcd at {self.endpoint} {path}: {message}"
        if code == _GRPC_NOT_FOUND and "lease not found" in message:
            return LeaseNotFoundError(text)
        return MetadataUnavailableError(text, retriable=code not in _NOT_RETRIABLE)

    def _key(self, key: str) -> bytes:
        return (self.prefix + key).encode()

    def _versioned(self, kv: dict[str, Any]) -> Versioned:
        full = base64.b64decode(kv["key"]).decode(errors="replace")
        return Versioned(
            key=full[len(self.prefix) :] if full.startswith(self.prefix) else full,
            value=_decode_value(base64.b64decode(kv.get("value", ""))),
            mod_revision=int(kv.get("mod_revision", 0)),
            create_revision=int(kv.get("create_revision", 0)),
            version=int(kv.get("version", 0)),
            lease=int(kv.get("lease", 0)),
        )

    def _txn(self, compare: list[dict[str, Any]], success: list[dict[str, Any]]) -> bool:
        answer = self._post("kv/txn", {"compare": compare, "success": success, "failure": []})
        return bool(answer.get("succeeded", False))  # the gateway omits a false

    def _compare_create(self, key: str, create_revision: int) -> dict[str, Any]:
        return {
            "key": _b64(self._key(key)),
            "target": "CREATE",
            "result": "EQUAL",
            "create_revision": str(create_revision),
        }

    def _compares(self, key: str, mod_revision: int, fence: Fence | None) -> list[dict[str, Any]]:
        out = [
            {
                "key": _b64(self._key(key)),
                "target": "MOD",
                "result": "EQUAL",
                "mod_revision": str(mod_revision),
            }
        ]
        if fence is not None:
            out.append(self._compare_create(fence.key, fence.create_revision))
        return out

    def _request_put(self, key: str, value: Any, lease: int | None) -> dict[str, Any]:
        put: dict[str, Any] = {
            "key": _b64(self._key(key)),
            "value": _b64(json.dumps(value, separators=(",", ":")).encode()),
        }
        if lease:
            put["lease"] = str(lease)
        return put

    # ---- reads ---------------------------------------------------------------------

    def get(self, key: str) -> Versioned | None:
        """The key's value and revisions; None if it does not exist."""
        answer = self._post("kv/range", {"key": _b64(self._key(key))})
        kvs = answer.get("kvs") or []
        return self._versioned(kvs[0]) if kvs else None

    def get_prefix(self, prefix: str = "") -> dict[str, Versioned]:
        """Every key starting with ``prefix`` (relative), by relative key, read at one
        store revision (a consistent snapshot)."""
        start = self._key(prefix)
        answer = self._post("kv/range", {"key": _b64(start), "range_end": _b64(_range_end(start))})
        out: dict[str, Versioned] = {}
        for kv in answer.get("kvs") or []:
            v = self._versioned(kv)
            out[v.key] = v
        return out

    # ---- writes: compare-and-swap ----------------------------------------------------

    def create(
        self, key: str, value: Any, lease: int | None = None, *, fence: Fence | None = None
    ) -> bool:
        """Create ``key`` = ``value`` only if the key does not exist (and ``fence``
        holds); bound to ``lease`` if given. True if this call created it."""
        compare = [self._compare_create(key, 0)]
        if fence is not None:
            compare.append(self._compare_create(fence.key, fence.create_revision))
        return self._txn(compare, [{"request_put": self._request_put(key, value, lease)}])

    def create_all(self, values: Mapping[str, Any], *, fence: Fence | None = None) -> bool:
        """Create every key of ``values`` (relative key -> value) in ONE transaction,
        only if none of them exists (and ``fence`` holds): all or nothing, so readers
        never see some of the keys without the others (a topic and its partitions). True
        if this call created them; False if any existed (none is written).

        At most :data:`MAX_TXN_OPS` keys, one fewer with a ``fence`` (etcd's default
        ``--max-txn-ops``: compares and puts are each counted); more raise ValueError."""
        if not values:
            raise ValueError("create_all needs at least one key")
        limit = MAX_TXN_OPS - (fence is not None)
        if len(values) > limit:
            raise ValueError(
                f"create_all of {len(values)} keys: at most {limit} in one "
                "etcd transaction (--max-txn-ops)"
            )
        compare = [self._compare_create(key, 0) for key in values]
        if fence is not None:
            compare.append(self._compare_create(fence.key, fence.create_revision))
        puts = [
            {"request_put": self._request_put(key, value, None)} for key, value in values.items()
        ]
        return self._txn(compare, puts)

    def put_if(
        self, key: str, value: Any, mod_revision: int, *, fence: Fence | None = None
    ) -> bool:
        """Set ``key`` = ``value`` only if its ``mod_revision`` is still ``mod_revision``
        (0: only if absent) and ``fence`` holds. True if written; False if someone
        changed it first (re-read and decide again). A key keeps its lease, if any."""
        put = self._request_put(key, value, None)
        put["ignore_lease"] = True
        if mod_revision == 0:  # an absent key: its lease is none, keep it that way
            del put["ignore_lease"]
        return self._txn(self._compares(key, mod_revision, fence), [{"request_put": put}])

    def put_if_and_create(
        self,
        key: str,
        value: Any,
        mod_revision: int,
        creates: Mapping[str, Any],
        *,
        fence: Fence | None = None,
    ) -> bool:
        """In ONE transaction: set ``key`` = ``value`` only if its ``mod_revision`` is still
        ``mod_revision``, and create every key of ``creates`` only if none exists (and
        ``fence`` holds): all or nothing (a topic's new partition count and its new
        partitions' keys). True if written; False if any condition failed (nothing is).
        At most :data:`MAX_TXN_OPS` keys and compares each, as :meth:`create_all`."""
        limit = MAX_TXN_OPS - 1 - (fence is not None)
        if len(creates) > limit:
            raise ValueError(
                f"put_if_and_create of {len(creates)} new keys: at most {limit} in one "
                "etcd transaction (--max-txn-ops)"
            )
        put = self._request_put(key, value, None)
        put["ignore_lease"] = True
        compare = self._compares(key, mod_revision, fence)
        compare += [self._compare_create(k, 0) for k in creates]
        puts = [{"request_put": put}]
        puts += [{"request_put": self._request_put(k, v, None)} for k, v in creates.items()]
        return self._txn(compare, puts)

    def delete_if(self, key: str, mod_revision: int, *, fence: Fence | None = None) -> bool:
        """Delete ``key`` only if its ``mod_revision`` is still ``mod_revision`` (and
        ``fence`` holds). True if this call deleted it."""
        if mod_revision <= 0:
            return False  # an absent key cannot be deleted
        delete = {"request_delete_range": {"key": _b64(self._key(key))}}
        return self._txn(self._compares(key, mod_revision, fence), [delete])

    def put(self, key: str, value: Any, lease: int | None = None) -> None:
        """Unconditionally set ``key`` = ``value``: ONLY for lease-bound ephemeral keys
        whose one writer is their owner (a node's registration). Metadata that others
        also change goes through :meth:`create` / :meth:`put_if`."""
        self._post("kv/put", self._request_put(key, value, lease))

    # ---- leases --------------------------------------------------------------------

    def grant(self, ttl_s: int) -> int:
        """A new lease of ``ttl_s`` seconds (etcd raises it to its minimum TTL, 1.5 x its
        election timeout, if smaller); its id."""
        answer = self._post("lease/grant", {"TTL": int(ttl_s), "ID": 0})
        lease = int(answer.get("ID", 0))
        if not lease:
            raise MetadataUnavailableError(f"etcd at {self.endpoint}: lease grant without an ID")
        return lease

    def keepalive(self, lease: int) -> bool:
        """Renew ``lease`` to its full TTL. True if renewed; False if etcd no longer has
        it (it expired or was revoked: its keys are gone)."""
        answer = self._post("lease/keepalive", {"ID": str(lease)})
        result = answer.get("result") or {}
        return int(result.get("TTL", 0)) > 0  # the gateway omits the TTL of a lost lease

    def time_to_live(self, lease: int) -> int:
        """Whole seconds ``lease`` has left (0: under one); -1 if etcd no longer has it."""
        answer = self._post("lease/timetolive", {"ID": str(lease)})
        return int(answer.get("TTL", 0))  # a gone lease says -1; the gateway omits a 0

    def revoke(self, lease: int) -> bool:
        """End ``lease`` now, deleting its keys. False if it was already gone."""
        try:
            self._post("lease/revoke", {"ID": str(lease)})
        except LeaseNotFoundError:
            return False
        return True

    # ---- observing -----------------------------------------------------------------

    def poll_prefix(
        self,
        prefix: str,
        callback: Callable[[dict[str, Versioned]], None],
        *,
        interval_s: float = 0.5,
    ) -> PrefixPoller:
        """Start a :class:`PrefixPoller` calling ``callback(snapshot)`` with
        :meth:`get_prefix` ``(prefix)`` whenever it differs from the last one seen."""
        return PrefixPoller(self, prefix, callback, interval_s=interval_s).start()

    def close(self) -> None:
        """Close every thread's HTTP session; later calls raise
        :class:`MetadataUnavailableError` (not retriable). Idempotent."""
        with self._lock:
            self._closed = True
            clients, self._clients = self._clients, []
        for client in clients:
            with contextlib.suppress(Exception):
                client.session.close()

    def __enter__(self) -> MetaStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"MetaStore({self.endpoint}, prefix={self.prefix!r})"


class PrefixPoller:
    """A daemon thread that reads a prefix every ``interval_s`` and calls ``callback``
    with the snapshot when it changed (a key added, changed or removed) since the last
    call, and once after the first successful read.

    A read that fails (:class:`MetadataUnavailableError`) is logged and retried at the
    next interval; the next success reports the state then, so callers see every
    *state* they need to act on, not every intermediate change. An exception from
    ``callback`` is logged and the poller goes on. ``callback`` runs on the poller's
    thread; :meth:`stop` waits for it (not from within ``callback``).
    """

    def __init__(
        self,
        store: MetaStore,
        prefix: str,
        callback: Callable[[dict[str, Versioned]], None],
        *,
        interval_s: float = 0.5,
    ) -> None:
        self.store = store
        self.prefix = prefix
        self.callback = callback
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, daemon=True, name=f"poll:{store.prefix}{prefix}"
        )
        self._seen: dict[str, int] | None = None

    def start(self) -> PrefixPoller:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                snapshot = self.store.get_prefix(self.prefix)
            except MetadataUnavailableError as exc:
                log.debug("poll of %r failed: %s", self.prefix, exc)
            else:
                seen = {k: v.mod_revision for k, v in snapshot.items()}
                if seen != self._seen:
                    self._seen = seen
                    try:
                        self.callback(snapshot)
                    except Exception:
                        log.exception("poll callback for %r failed", self.prefix)
            self._stop.wait(self.interval_s)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop polling and wait (bounded) for the thread to end. Idempotent."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)
