"""Where a cluster replica whose log never held a record continues when it takes the
lead: at 0, or above every offset the partition ever handed out, as the bucket records.

What it is for: such a replica's log is either one its node created empty while it ran
(a topic created: its emptiness is what its leaders sent it, and a replica in the ISR
holds every committed record) or one whose disk was lost or replaced (a whole cluster
restored onto new disks, every replica's disk lost). In the second case only the
bucket knows where the partition stands: its archive, and the offsets a leader reserved
there before handing them out (:meth:`Tiering.reserve
<tiered_log.partition.tiering.Tiering.reserve>`); leading from 0 would hand
acknowledged offsets out again, so the log continues above them and reports the gap
lost. In the first case that would skip a whole reservation of offsets for records
that a dead leader took and never replicated (never acknowledged to ``acks=all``), so
the log leads from 0 as Kafka's would.

:class:`EmptyLead` tells the two apart by a marker file, ``created-empty``
(:data:`~tiered_log.format.naming.CREATED_EMPTY_FILE`), that the node writes
(:meth:`EmptyLead.mark_created_empty`) when it creates a replica's log while it is a
running member: a lost disk loses the file, and a log recreated at the node's next
start has none. For a log without it, the bucket's view is read for a lead to come
(:meth:`EmptyLead.read`: the node runs it on a thread of its own, before it takes its
own lock to change the role) and applied when the lead comes (:meth:`EmptyLead.apply`).

Thread-safety: :meth:`~EmptyLead.read` and :meth:`~EmptyLead.apply` run under the
partition log's control lock (they take it); :meth:`~EmptyLead.needed` and the marker
may be asked from any thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from ..format import naming
from ..local.files import write_atomic
from ..local.log import Log
from ..remote.tier import RemoteTier
from .idempotence import Idempotence
from .replication import Replication
from .tiering import Tiering

log = logging.getLogger(__name__)


class EmptyLead:
    """The lead of one partition log that never held a record (see the module
    docstring). ``remote``: the log's remote tier now (None: no remote tier; it may
    change with a reconfiguration); ``check_open``: raises when the log is closed;
    ``set_high_watermark``: the log's."""

    def __init__(
        self,
        directory: Path,
        log_id: str,
        local: Log,
        remote: Callable[[], RemoteTier | None],
        replication: Replication,
        tiering: Tiering,
        producers: Idempotence,
        ctl: threading.Lock,
        check_open: Callable[[], None],
        set_high_watermark: Callable[[int], int],
    ) -> None:
        self._marker = directory / naming.CREATED_EMPTY_FILE
        self._created_empty = self._marker.exists()
        self.log_id = log_id
        self._local = local
        self._remote = remote
        self._replication = replication
        self._tiering = tiering
        self._producers = producers
        self._ctl = ctl
        self._check_open = check_open
        self._set_high_watermark = set_high_watermark
        self._view: tuple[int, int] | None = None
        """``(epoch, resume offset)`` read by :meth:`read` for the next :meth:`apply`
        (under the control lock)."""

    def needed(self) -> bool:
        """Whether leading needs a read of the bucket first: a remote tier, no record
        ever held, no ``created-empty`` marker. Any thread."""
        return (
            self._remote() is not None
            and not self._created_empty
            and self._local.next_offset == 0
            and self._replication.epochs.latest_entry is None
        )

    def mark_created_empty(self) -> None:
        """Write the ``created-empty`` marker (fsynced): the node created this log empty
        while it was a running member, so it leads from 0 without the bucket. The node's
        poll thread, once the log is created."""
        write_atomic(self._marker, b"")
        self._created_empty = True

    def read(self, epoch: int) -> None:
        """Read the bucket for a lead of ``epoch`` to come: the remote state rebuilt and
        the offset the log continues at (:meth:`TierState.resume_offset
        <tiered_log.remote.state.TierState.resume_offset>`). Touches only the remote
        tier and the control lock, never the local log. RemoteStorageError if the bucket
        fails; nothing :meth:`needed`: no request."""
        with self._ctl:
            self._check_open()
            r = self._remote()
            if r is None or not self.needed():
                return
            self._tiering.resync_view()
            self._view = (epoch, r.resume_offset())

    def apply(self, epoch: int) -> None:
        """Continue above every offset the partition handed out (the gap reported lost),
        never at 0 over archived offsets: with the view read for ``epoch`` by
        :meth:`read`, or reading it now. Re-checked under the control lock: a log that
        took a record since, or needs no view, is left as it is. RemoteStorageError if
        the bucket fails (the node tries to lead again at its next poll)."""
        with self._ctl:
            self._check_open()
            view, self._view = self._view, None
            r = self._remote()
            if r is None or not self.needed():
                return
            if view is not None and view[0] == epoch:
                resume = view[1]
                self._tiering.view_pending = False  # read for this epoch: current
            else:
                self._tiering.resync_view()
                resume = r.resume_offset()
            if resume <= self._local.next_offset:
                return
            ps = self._producers.state
            with self._replication.moving_bounds(), ps.lock:
                ps.delete_snapshot()
                self._local.reset(resume)
                ps.clear(complete=False)
                self._replication.clamp_high_watermark()
            # Everything below was committed before: readable (archived) at once.
            self._set_high_watermark(resume)
            log.info(
                "%s: leads from the bucket: archived up to %d, continues at %d",
                self.log_id,
                r.remote_end,
                resume,
            )
