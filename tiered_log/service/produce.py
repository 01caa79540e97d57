"""Produce bodies to records: read a body and the parse steps the broker runs with the
append.

The three produce forms (see :mod:`tiered_log.service.routes.records`) each end in a
*parse* step, run with the append in ONE executor call
(:meth:`Broker.append <tiered_log.broker.Broker.append>`):
decoding costs CPU, and one thread hop is cheaper than two. The parse steps:
:func:`one_record` (a raw body: its one record), :func:`parse_frames` (Kafka record
batches, each verified and kept as sent; a bad one is the client's: 400 naming it) and
:func:`parse_batch` (a JSON batch; malformed is 400).

A binary batch body takes the lean path, one copy in this program from the ASGI
server's messages to the segment file: :func:`receive_body` copies each body message
into one buffer allocated up front at the declared ``Content-Length`` (up to
:data:`PREALLOC_BYTES`; no list of chunks joined), and nothing copies it again:
:func:`parse_frames` verifies the batches in that buffer (CRC-32C, framing, records;
compressed batches stay compressed), the log writes their base offsets (and leader
epoch) in place, outside the CRC
(:meth:`~tiered_log.format.records.EncodedBatch.rebased`), and writes the buffer to the
segment in one ``write``. What the ASGI server does before
(uvicorn's reads and its own body buffer) is not this module's.

Concurrency: :func:`receive_body` runs on the event loop (it only awaits the body's
messages and copies them); the parse steps cost CPU: the broker runs them on its append
executor, never on the event loop. They keep no state; a buffer :func:`receive_body`
returns belongs to the one request.
"""

from __future__ import annotations

from pydantic import ValidationError
from starlette.requests import Request

from ..errors import CorruptRecordError, InvalidArgumentError, InvalidRequestError
from ..format.records import EncodedBatch, ProducerRecord, receive_batches
from .error_mapping import validation_message
from .wire import MAX_BATCH_RECORDS, ProduceRequest


def one_record(record: ProducerRecord) -> list[ProducerRecord | bytes]:
    """The "parse" step of a raw body: its one record."""
    return [record]


_GONE = "the client went away before the body was complete"

PREALLOC_BYTES = 4 << 20
"""The most :func:`receive_body` allocates before the bytes arrive (a declared
``Content-Length`` up to this is allocated whole at once; past it the buffer grows as
the bytes come): a client cannot make the server hold much more memory than it sent."""


async def receive_body(request: Request) -> bytearray:
    """The whole request body in one buffer of its own (on the event loop).

    With a ``Content-Length`` (what the clients send) the buffer is allocated at that
    size (up to :data:`PREALLOC_BYTES`) before the first byte is read, and every body
    message is copied into it at its place: one copy, however many messages the body
    arrives in, and no list of chunks joined. Past :data:`PREALLOC_BYTES`, and for a
    chunked body (no length), the rest is appended as it comes. The size is bounded
    before this runs: :class:`~tiered_log.service.middleware.ServiceMiddleware` refuses
    a declared length over ``max_request_bytes`` (413) and stops a chunked body that
    passes it (BodyTooLarge, 413). A client that goes away before the end of its body
    is InvalidRequestError (400).
    """
    receive = request.receive
    declared = request.headers.get("content-length")
    size = int(declared) if declared is not None and declared.isdigit() else -1
    buf = bytearray(min(size, PREALLOC_BYTES) if size > 0 else 0)
    view: memoryview | None = memoryview(buf) if buf else None
    got = 0
    more = True
    while more:
        message = await receive()
        if message["type"] != "http.request":  # http.disconnect
            raise InvalidRequestError(_GONE)
        chunk = message.get("body", b"")
        more = bool(message.get("more_body", False))
        n = len(chunk)
        if view is not None:
            room = len(view) - got
            if n < room:
                view[got : got + n] = chunk
            else:  # the preallocated part is full: the rest (if any) is appended
                view[got:] = memoryview(chunk)[:room]
                view.release()
                view = None
                if n > room:
                    buf += memoryview(chunk)[room:]
        elif n:
            buf += chunk
        got += n
    if view is not None:
        view.release()
    if got != len(buf) or (size >= 0 and got != size):
        raise InvalidRequestError(_GONE)
    return buf


def parse_frames(body: bytes | bytearray, append_threshold: int) -> EncodedBatch:
    """The Kafka batches of a binary produce body, every one verified and kept as sent
    (compression included), values bounded by ``append_threshold``
    (RecordTooLargeError); a bad batch is InvalidRequestError naming it (the client sent
    it: 400, not a storage fault). A ``bytearray`` body (from :func:`receive_body`) is
    verified and then rebased in place, not copied: the caller hands it over."""
    try:
        return receive_batches(body, append_threshold, max_records=MAX_BATCH_RECORDS, in_place=True)
    except CorruptRecordError as exc:
        raise InvalidRequestError(f"bad record batch: {exc}") from None


def parse_batch(body: bytes) -> list[ProducerRecord | bytes]:
    """The records of a JSON produce body (in a worker thread: parsing and base64 cost
    CPU); InvalidRequestError / InvalidArgumentError when malformed."""
    try:
        batch = ProduceRequest.model_validate_json(body)
    except ValidationError as exc:
        raise InvalidRequestError(
            validation_message(exc.errors(include_url=False, include_input=False))
        ) from None
    out: list[ProducerRecord | bytes] = []
    for i, rec in enumerate(batch.records):
        try:
            out.append(rec.to_producer_record())
        except InvalidArgumentError as exc:
            raise InvalidRequestError(f"records.{i}: {exc.message}") from None
    return out


__all__ = [
    "one_record",
    "parse_batch",
    "parse_frames",
    "receive_body",
]
