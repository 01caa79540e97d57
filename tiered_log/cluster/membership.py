"""Who is in the cluster, and which node is its controller.

:class:`Membership`: a node announces itself as ``nodes/<node_id>`` ->
``{"node_id", "url", "kafka"}`` (``kafka``: its Kafka listener's ``host:port``, absent
when it has none), bound to an etcd lease of ``lease_ttl_s`` that a daemon thread
renews every ``lease_ttl_s / 3``; the value also names the process (its
:func:`incarnation`), so that a node restarted on the same host within its lease can
end its previous start's registration at once (:meth:`Membership.end_previous_incarnation`)
instead of waiting it out. Invariant: a node's key exists only while its lease
does, so :meth:`Membership.live_nodes` lists the nodes that renewed within the last TTL
(a crashed or partitioned node drops out at most one TTL after its last renewal, plus
etcd's expiry check, ~0.5 s). If the lease is lost anyway (etcd was out of reach, or
the node stalled, longer than the TTL, and etcd then says the lease is gone), the thread
registers again under a new lease and counts it in ``reregistrations``; after a failed
renewal it retries at once, so it learns of a lost lease as soon as etcd answers again.

:class:`ControllerElection`: at most one node at a time is the controller: the one
whose ``create("controller", {"node_id": ...}, lease)`` succeeded, until its lease ends
(or it resigns); the others campaign again whenever the key is absent. The controller's
**epoch** is the key's ``create_revision``: every new controller key gets a larger one,
so epochs are totally ordered. The fencing invariant the cluster code keeps: *only the
controller writes partition leadership, and each such write carries*
``fence=election.fence`` (a :class:`~tiered_log.cluster.etcd.Fence`: the controller
key still has this epoch's create_revision) *in the same etcd transaction as its
compare-and-swap*. A deposed controller that still believes it leads (a long GC pause,
a partition: its local :attr:`ControllerElection.is_controller` is a cached belief) has
its writes refused by etcd, since its key was deleted (create_revision 0) or replaced
by a later controller's (a larger one).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tiered_log.cluster.etcd import Fence, MetaStore
from tiered_log.errors import LeaseNotFoundError, MetadataUnavailableError

log = logging.getLogger(__name__)

NODES_PREFIX = "nodes/"
CONTROLLER_KEY = "controller"


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _started(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot: /proc/<pid>/stat's 22nd
    field); None if there is no such process (or no /proc)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    try:  # the command name (field 2) may hold spaces and parentheses: split after it
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (IndexError, ValueError):
        return None


def incarnation() -> dict[str, Any]:
    """What tells this process apart from any other that ran or runs on any machine: the
    host name, the kernel's boot id, the pid and the process's start time."""
    pid = os.getpid()
    return {
        "host": socket.gethostname(),
        "boot": _boot_id(),
        "pid": pid,
        "started": _started(pid) or 0,
    }


def is_gone(recorded: Any) -> bool:
    """Whether the process a registration's ``incarnation`` names has surely ended: it ran
    on this host since this boot, and its pid now names no process or another one (a
    different start time). False whenever that cannot be known (another host, another
    boot, no /proc, an older registration without an incarnation): then only its
    lease's end says it is gone."""
    if not isinstance(recorded, dict):
        return False
    here = incarnation()
    pid, started = recorded.get("pid"), recorded.get("started")
    if (
        not here["boot"]
        or recorded.get("boot") != here["boot"]
        or recorded.get("host") != here["host"]
        or not isinstance(pid, int)
        or not isinstance(started, int)
        or not started
    ):
        return False
    now = _started(pid)
    return now is None or now != started


class Membership:
    """One node's registration in the cluster, kept alive by a daemon thread.

    :meth:`start` grants a lease, writes ``nodes/<node_id>`` under it and starts the
    keepalive thread; :meth:`close` stops the thread and revokes the lease (the key
    goes at once). Thread-safe: :attr:`lease_id`, :meth:`holds_lease` and
    :meth:`live_nodes` may be called from any thread while the keepalive thread runs.
    """

    def __init__(
        self,
        store: MetaStore,
        node_id: int,
        url: str,
        *,
        lease_ttl_s: int = 3,
        kafka_address: str | None = None,
    ) -> None:
        self.store = store
        self.node_id = node_id
        self.url = url
        self.kafka_address = kafka_address
        self.lease_ttl_s = lease_ttl_s
        self.reregistrations = 0
        """How many times the lease was found gone and the node registered again."""
        self._lock = threading.Lock()
        self._lease: int | None = None
        self._alive_until = 0.0  # monotonic: the lease surely lives until then
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def key(self) -> str:
        return f"{NODES_PREFIX}{self.node_id}"

    @property
    def lease_id(self) -> int | None:
        """The lease the registration is bound to now (it changes on re-registration)."""
        with self._lock:
            return self._lease

    def holds_lease(self) -> bool:
        """True while the lease surely still lives at etcd: less than one TTL since a
        renewal that was *sent* then succeeded (etcd's expiry is counted from when it
        received it, later). False once the renewals have failed for a TTL."""
        with self._lock:
            return self._lease is not None and time.monotonic() < self._alive_until

    def start(self) -> Membership:
        """Register (raises :class:`MetadataUnavailableError` if etcd is out of reach)
        and start the keepalive thread."""
        if self._thread is not None:
            return self
        self._register()
        self._thread = threading.Thread(
            target=self._run, daemon=True, name=f"membership:{self.node_id}"
        )
        self._thread.start()
        return self

    def end_previous_incarnation(self) -> bool:
        """Before this node registers: if ``nodes/<node_id>`` is still there from a start
        of this node whose process has surely ended (:func:`is_gone`: same host and
        boot, its process gone; a restart within the lease), end that registration's
        lease now, as its expiry would have a moment later: the controller then treats
        the previous incarnation as dead at once (drops it from ISRs, moves its
        leaderships). True if it did. A registration it cannot prove dead (another
        host, or a live process: a second node started with the same id) is left to
        its lease. MetadataUnavailableError if etcd cannot be reached."""
        v = self.store.get(self.key)
        if v is None or not v.lease or not isinstance(v.value, dict):
            return False
        if not is_gone(v.value.get("incarnation")):
            return False
        if self.store.revoke(v.lease):
            log.info(
                "node %s: the registration of its previous start (pid %s) outlived "
                "it: its lease %x ended now",
                self.node_id,
                v.value["incarnation"].get("pid"),
                v.lease,
            )
            return True
        return False

    def _register(self) -> None:
        sent = time.monotonic()
        lease = self.store.grant(self.lease_ttl_s)
        record: dict[str, Any] = {"node_id": self.node_id, "url": self.url}
        if self.kafka_address:
            record["kafka"] = self.kafka_address
        record["incarnation"] = incarnation()
        self.store.put(self.key, record, lease=lease)
        with self._lock:
            self._lease = lease
            self._alive_until = sent + self.lease_ttl_s

    def _run(self) -> None:
        """Renew every third of the TTL. After a failed renewal, retry at once (0.1 s,
        doubling up to a third of the TTL while etcd refuses connections): on a stalled
        etcd a renewal is then nearly always in flight, so when etcd wakes and says the
        lease is gone (it expired while etcd stalled) the node registers again within
        moments, inside the controller's grace (see
        :class:`~tiered_log.cluster.controller.Controller`)."""
        interval = self.lease_ttl_s / 3
        wait = interval
        failing_since: float | None = None
        while not self._stop.wait(wait):
            lease = self.lease_id
            if lease is None:
                wait = interval
                continue
            sent = time.monotonic()
            try:
                if self.store.keepalive(lease):
                    with self._lock:
                        if self._lease == lease:
                            self._alive_until = sent + self.lease_ttl_s
                else:
                    log.warning("node %s: lease %x is gone; registering again", self.node_id, lease)
                    with self._lock:
                        self._alive_until = 0.0
                    self._register()
                    self.reregistrations += 1
            except MetadataUnavailableError as exc:  # LeaseNotFoundError too: next try
                if failing_since is None:
                    log.warning("node %s: lease renewal failed: %s (retrying)", self.node_id, exc)
                    failing_since = sent
                    wait = 0.1
                else:
                    wait = min(wait * 2, interval)
                continue
            if failing_since is not None:
                log.info(
                    "node %s: etcd answers again after %.1f s of failed renewals",
                    self.node_id,
                    time.monotonic() - failing_since,
                )
                failing_since = None
            wait = interval

    def live_nodes(self) -> dict[int, str]:
        """node_id -> url of every registered node (this one included while alive)."""
        return self.registrations()[0]

    def registrations(self) -> tuple[dict[int, str], dict[int, str]]:
        """From one etcd read: node_id -> url of every registered node, and node_id ->
        Kafka listener ``host:port`` of those that have one. MetadataUnavailableError if
        etcd cannot be reached."""
        urls: dict[int, str] = {}
        kafka: dict[int, str] = {}
        for v in self.store.get_prefix(NODES_PREFIX).values():
            value = v.value
            if isinstance(value, dict) and isinstance(value.get("node_id"), int):
                urls[value["node_id"]] = str(value.get("url", ""))
                addr = value.get("kafka")
                if isinstance(addr, str) and addr:
                    kafka[value["node_id"]] = addr
        return urls, kafka

    def kafka_addresses(self) -> dict[int, str]:
        """node_id -> Kafka listener ``host:port`` of every registered node that has one
        (a Kafka client's view of the brokers). MetadataUnavailableError if etcd cannot
        be reached."""
        return self.registrations()[1]

    def close(self) -> None:
        """Stop renewing and revoke the lease (deleting the registration). An etcd out
        of reach is tolerated: the lease then ends by itself within its TTL."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(self.store.timeout_s * 2 + self.lease_ttl_s)
        with self._lock:
            lease, self._lease = self._lease, None
        if lease is not None:
            try:
                self.store.revoke(lease)
            except MetadataUnavailableError as exc:
                log.warning("node %s: revoking lease failed: %s", self.node_id, exc)

    def __enter__(self) -> Membership:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


class ControllerElection:
    """Controller election for one node, over its :class:`Membership`'s lease.

    :meth:`campaign` makes one attempt (create the controller key if absent, then read
    who holds it); :meth:`start` runs it every ``interval_s`` (default a third of the
    lease TTL) on a daemon thread, so a follower takes over within about one TTL plus
    an interval of the controller's lease ending. ``on_change(is_controller, epoch)`` is
    called (on the campaigning thread) when this node becomes or stops being the
    controller. See the module docstring for the epoch and the fencing invariant.

    Thread-safe: the state is read and replaced under a lock; :meth:`campaign` may run
    on any thread.
    """

    def __init__(
        self,
        store: MetaStore,
        membership: Membership,
        *,
        interval_s: float | None = None,
        on_change: Callable[[bool, int | None], None] | None = None,
    ) -> None:
        self.store = store
        self.membership = membership
        self.node_id = membership.node_id
        self.interval_s = interval_s if interval_s is not None else membership.lease_ttl_s / 3
        self.on_change = on_change
        self._lock = threading.Lock()
        self._epoch: int | None = None  # create_revision of our controller key
        self._mod_revision = 0  # of our controller key, for resigning
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def epoch(self) -> int | None:
        """This node's controller epoch (the controller key's create_revision); None if
        it is not the controller."""
        with self._lock:
            return self._epoch

    @property
    def is_controller(self) -> bool:
        """This node's belief that it is the controller: it won, has not seen the key
        change since, and its lease surely still lives (:meth:`Membership.holds_lease`).
        A belief, not a guarantee: writes must carry :attr:`fence`."""
        return self.epoch is not None and self.membership.holds_lease()

    @property
    def fence(self) -> Fence | None:
        """The condition every controller write carries; None if not the controller."""
        epoch = self.epoch
        return None if epoch is None else Fence(CONTROLLER_KEY, epoch)

    def controller_id(self) -> int | None:
        """The node id of the current controller as etcd has it now; None if none."""
        v = self.store.get(CONTROLLER_KEY)
        if v is None or not isinstance(v.value, dict):
            return None
        node = v.value.get("node_id")
        return node if isinstance(node, int) else None

    def campaign(self) -> bool:
        """One attempt: become the controller if there is none; then update this node's
        state from the key. True if this node is the controller afterwards. Raises
        :class:`MetadataUnavailableError` if etcd is out of reach (state unchanged)."""
        lease = self.membership.lease_id
        if lease is not None and self.membership.holds_lease():
            # LeaseNotFoundError: our lease just ended; Membership registers again, and
            # the next campaign uses the new lease
            with contextlib.suppress(LeaseNotFoundError):
                self.store.create(CONTROLLER_KEY, {"node_id": self.node_id}, lease)
        v = self.store.get(CONTROLLER_KEY)
        mine = (
            v is not None
            and lease is not None
            and v.lease == lease
            and isinstance(v.value, dict)
            and v.value.get("node_id") == self.node_id
        )
        self._set(
            v.create_revision if mine and v is not None else None,
            v.mod_revision if mine and v is not None else 0,
        )
        return mine

    def _set(self, epoch: int | None, mod_revision: int) -> None:
        with self._lock:
            before, self._epoch, self._mod_revision = self._epoch, epoch, mod_revision
        if before != epoch:
            if epoch is not None:
                log.info("node %s is the controller (epoch %d)", self.node_id, epoch)
            elif before is not None:
                log.info("node %s is no longer the controller (epoch %d)", self.node_id, before)
            if self.on_change is not None:
                self.on_change(epoch is not None, epoch)

    def start(self) -> ControllerElection:
        """Campaign now and then every ``interval_s`` on a daemon thread."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, daemon=True, name=f"election:{self.node_id}"
            )
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.campaign()
            except MetadataUnavailableError as exc:
                log.debug("node %s: campaign failed: %s", self.node_id, exc)
            except Exception:
                log.exception("node %s: campaign failed", self.node_id)
            self._stop.wait(self.interval_s)

    def resign(self) -> bool:
        """Stop being the controller now (delete the key if it is still this epoch's),
        so another node takes over without waiting for the lease. True if deleted."""
        with self._lock:
            epoch, mod_revision = self._epoch, self._mod_revision
        if epoch is None:
            return False
        self._set(None, 0)
        return self.store.delete_if(
            CONTROLLER_KEY, mod_revision, fence=Fence(CONTROLLER_KEY, epoch)
        )

    def close(self, *, resign: bool = True) -> None:
        """Stop campaigning; resign (best effort) if this node is the controller."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(self.store.timeout_s * 2 + self.interval_s)
        if resign:
            try:
                self.resign()
            except MetadataUnavailableError as exc:
                log.warning("node %s: resigning failed: %s", self.node_id, exc)

    def __enter__(self) -> ControllerElection:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()
