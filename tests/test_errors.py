"""The error tree (tiered_log.errors): each class's code and HTTP status, the status the
service answers (``status_of``), and the client's decoding of an answer back to the class.

The expected statuses are those the service's own ``_STATUS`` table (in
``tiered_log/service/app.py`` until the statuses moved onto the classes) gave each class:
the most specific mapped class in the MRO, else 503 if retriable and 500 if not. This
table was checked against that mapping, class by class, retriable or not, when the move
was made.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

import tiered_log.errors as E
from tiered_log.client import error_from_response

# class, code, status when not retriable, status when retriable
TABLE: list[tuple[type[E.TieredLogError], str, int, int]] = [
    (E.TieredLogError, "error", 500, 503),
    (E.InvalidArgumentError, "invalid_argument", 400, 400),
    (E.InvalidOffsetError, "invalid_offset", 400, 400),
    (E.RecordTooLargeError, "record_too_large", 413, 413),
    (E.InvalidRequestError, "invalid_request", 400, 400),
    (E.UnsupportedMediaTypeError, "unsupported_media_type", 415, 415),
    (E.RequestTooLargeError, "request_too_large", 400, 400),
    (E.OffsetOutOfRangeError, "offset_out_of_range", 416, 416),
    (E.CorruptRecordError, "corrupt_record", 500, 500),
    (E.CorruptIndexError, "corrupt_index", 500, 500),
    (E.LogClosedError, "log_closed", 503, 503),
    (E.ShuttingDownError, "shutting_down", 503, 503),
    (E.LogInUseError, "log_in_use", 500, 503),
    (E.DataDirLockedError, "data_dir_locked", 500, 503),
    (E.TopicError, "topic_error", 500, 503),
    (E.TopicNotFoundError, "topic_not_found", 404, 404),
    (E.TopicExistsError, "topic_exists", 409, 409),
    (E.TopicUnavailableError, "topic_unavailable", 503, 503),
    (E.InvalidTopicNameError, "invalid_topic_name", 400, 400),
    (E.AuthenticationError, "unauthenticated", 401, 401),
    (E.PermissionDeniedError, "permission_denied", 403, 403),
    (E.ReadOnlyError, "read_only", 403, 403),
    (E.RemoteStorageError, "remote_storage_error", 503, 503),
    (E.RemoteObjectNotFoundError, "remote_object_not_found", 502, 502),
    (E.RemoteCorruptionError, "remote_corruption", 502, 502),
    (E.RemoteTimeoutError, "remote_timeout", 503, 503),
    (E.MetadataUnavailableError, "metadata_unavailable", 503, 503),
    (E.LeaseNotFoundError, "lease_not_found", 503, 503),
    (E.NotLeaderError, "not_leader", 421, 421),
    (E.NotEnoughReplicasError, "not_enough_replicas", 503, 503),
    (E.NotEnoughReplicasAfterAppendError, "not_enough_replicas", 503, 503),
    (E.ReplicationTimeoutError, "replication_timeout", 503, 503),
    (E.PartitionNotReadyError, "not_ready", 503, 503),
    (E.FencedEpochError, "fenced_epoch", 409, 409),
    (E.ProducerStateError, "producer_state", 409, 409),
    (E.OutOfOrderSequenceError, "out_of_order_sequence", 409, 409),
    (E.InvalidProducerEpochError, "invalid_producer_epoch", 409, 409),
    (E.UnknownProducerIdError, "unknown_producer_id", 409, 409),
    (E.NotAClusterError, "not_a_cluster", 404, 404),
    (E.DataLossError, "data_loss", 410, 410),
    (E.CorruptRangeError, "corrupt_record", 410, 410),
    (E.ConnectionFailedError, "connection_failed", 500, 503),
    (E.ServiceError, "service_error", 500, 503),
]
CLIENT_SIDE = {E.TieredLogError, E.ConnectionFailedError, E.ServiceError}
"""Never answered by the service under their own code: not decoded to themselves."""


def _instance(cls: type[E.TieredLogError], retriable: bool) -> E.TieredLogError:
    if cls is E.ServiceError:
        exc: E.TieredLogError = E.ServiceError("m", status=404, code="x")
    else:
        exc = cls("m")
    exc.retriable = retriable
    return exc


def _params() -> list[object]:
    return [pytest.param(*row, id=row[0].__name__) for row in TABLE]


def test_table_covers_the_tree() -> None:
    defined = {
        v for v in vars(E).values() if isinstance(v, type) and issubclass(v, E.TieredLogError)
    }
    assert defined == {row[0] for row in TABLE}
    assert {c.__name__ for c in defined} <= set(E.__all__)


@pytest.mark.parametrize(("cls", "code", "status", "retriable_status"), _params())
def test_code_and_status(
    cls: type[E.TieredLogError], code: str, status: int, retriable_status: int
) -> None:
    assert cls.code == code
    assert cls.status == status
    assert E.status_of(_instance(cls, False)) == status
    assert E.status_of(_instance(cls, True)) == retriable_status
    assert E.status_of(cls("m") if cls is not E.ServiceError else _instance(cls, False)) == (
        retriable_status if cls.retriable else status
    )


@pytest.mark.parametrize(("cls", "code", "status", "retriable_status"), _params())
def test_client_decodes_the_code(
    cls: type[E.TieredLogError], code: str, status: int, retriable_status: int
) -> None:
    body = json.dumps(
        {
            "error": {
                "code": code,
                "message": "m",
                "retriable": True,
                "details": {"log_start_offset": 3, "next_offset": 9},
            }
        }
    )
    exc = error_from_response(status, body.encode())
    assert exc.retriable is True
    assert str(exc) == "m"
    if cls in CLIENT_SIDE:
        assert E.error_class(code) is None
        assert type(exc) is E.ServiceError
        assert (exc.status, exc.code) == (status, code)
        return
    # subclasses that answer with their parent's code
    owner = {
        E.CorruptRangeError: E.CorruptRecordError,
        E.NotEnoughReplicasAfterAppendError: E.NotEnoughReplicasError,
    }.get(cls, cls)
    assert E.error_class(code) is owner
    assert type(exc) is owner
    if isinstance(exc, E.OffsetOutOfRangeError):
        assert (exc.log_start, exc.next_offset) == (3, 9)


def test_unknown_answers() -> None:
    assert E.error_class("no_such_code") is None
    exc = error_from_response(418, b'{"error": {"code": "teapot", "message": "short"}}')
    assert type(exc) is E.ServiceError and (exc.status, exc.code) == (418, "teapot")
    exc = error_from_response(502, b"<html>bad gateway</html>")
    assert type(exc) is E.ServiceError and (exc.status, exc.code, exc.retriable) == (
        502,
        "http_error",
        True,
    )


@pytest.mark.parametrize(
    "exc",
    [ValueError("x"), OSError("x"), KeyboardInterrupt()],
    ids=["ValueError", "OSError", "KeyboardInterrupt"],
)
def test_status_of_other_exceptions(exc: BaseException) -> None:
    assert E.status_of(exc) == 500


def test_a_subclass_elsewhere_inherits_its_status() -> None:
    class Mine(E.TopicNotFoundError):
        pass

    class Bare(E.TieredLogError):
        pass

    assert E.status_of(Mine("m")) == 404
    assert E.status_of(Bare("m")) == 500
    assert E.status_of(Bare("m", retriable=True)) == 503


@pytest.mark.parametrize(
    ("module", "names"),
    [
        pytest.param(
            "tiered_log.service.auth", ["AuthenticationError", "PermissionDeniedError"], id="auth"
        ),
        pytest.param(
            "tiered_log.service.wire",
            [
                "InvalidRequestError",
                "RequestTooLargeError",
                "ShuttingDownError",
                "UnsupportedMediaTypeError",
            ],
            id="wire",
        ),
        pytest.param("tiered_log.broker.topics", ["DataDirLockedError"], id="topics"),
        pytest.param("tiered_log.client", ["ConnectionFailedError", "ServiceError"], id="client"),
    ],
)
def test_old_homes_reexport(module: str, names: list[str]) -> None:
    mod = importlib.import_module(module)
    for name in names:
        assert getattr(mod, name) is getattr(E, name)


def test_client_imports_nothing_of_the_service() -> None:
    code = (
        "import sys, tiered_log.client\n"
        "bad = sorted(m for m in sys.modules if m.startswith('tiered_log.service'))\n"
        "print(bad)\nsys.exit(1 if bad else 0)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
