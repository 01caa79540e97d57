"""The Kafka-protocol listener of ``tiered-log serve``: Kafka's clients (librdkafka,
``aiokafka``, ``kafka-python``, Java, ...) produce to and consume from the service's
partitions over Kafka's own protocol, beside the HTTP API.

Modules, from the socket inwards:

- :mod:`.listener`    binds the port, serves it on the service's event loop, shuts down
- :mod:`.connection`  one connection: frames, requests answered in order, refusals
- :mod:`.messages`    request/response framing and bodies (``kio``'s generated codecs)
- :mod:`.handlers`    ApiVersions, Metadata, Produce, Fetch, ListOffsets; the others
  registered from :mod:`.groups`, :mod:`.producers`, :mod:`.configs`, :mod:`.admin`
- :mod:`.admin`       CreateTopics, DeleteTopics, OffsetForLeaderEpoch
- :mod:`.backend`     every call into the partitions (the seam to the broker layer)
- :mod:`.errors`      the library's errors as Kafka error codes

The log stores Kafka's record batches (magic 2) as its own format, so neither way
converts: a Produce's batches are verified and stored as sent (compression kept, the
base offset written in place), a Fetch answers the stored bytes, sent from the files
with ``sendfile``.

Served: ApiVersions 0-3, Metadata 1-12, Produce 3-9 (0-2 advertised and refused, as
Kafka 4.0 does), Fetch 4-12, ListOffsets 1-10, the consumer-group APIs (:mod:`.groups`),
InitProducerId (:mod:`.producers`), DescribeConfigs and IncrementalAlterConfigs
(:mod:`.configs`), CreateTopics, DeleteTopics and OffsetForLeaderEpoch (:mod:`.admin`).
Not yet: transactional producers, SASL and TLS.
"""

from __future__ import annotations

import sys


def _import_kio_without_hypothesis() -> None:
    """Import ``kio``'s base types with ``hypothesis`` hidden, when it is installed but not
    yet imported: kio then registers a test-data strategy for each of its hundreds of
    message types as they are imported, which costs every process that serves Kafka
    (each ``tiered-log serve``) hypothesis's own import and a fifth of a second, for
    strategies the listener never uses. A process that imported hypothesis first (a test
    that uses it) keeps kio's strategies as before. Not thread-safe: runs once, at this
    package's first import."""
    if "hypothesis" in sys.modules:
        return
    sys.modules["hypothesis"] = None  # type: ignore[assignment]  # makes the import fail
    try:
        import kio.static.primitive  # noqa: F401  (the module that asks for hypothesis)
    finally:
        del sys.modules["hypothesis"]


_import_kio_without_hypothesis()

from .listener import KafkaListener, bind_kafka  # noqa: E402

__all__ = ["KafkaListener", "bind_kafka"]
