"""Fixtures of the remote-tier tests: ``storage``, each test run on both stores this
project ships (the directory store, and S3 through moto's server on 127.0.0.1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiered_log.remote.fs import LocalDirStorage
from tiered_log.remote.storage import RemoteStorage


@pytest.fixture(params=["fs", "s3"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> RemoteStorage:
    """A bucket for the test: a directory under its ``tmp_path``, or a prefix of moto's
    S3 bucket (the root conftest's ``s3_storage``)."""
    if request.param == "fs":
        return LocalDirStorage(tmp_path / "bucket")
    return request.getfixturevalue("s3_storage")  # type: ignore[no-any-return]
