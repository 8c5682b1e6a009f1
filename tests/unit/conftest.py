"""Fixtures of the unit tests."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator

import pytest
from tests.support.apistub import ApiStub


@pytest.fixture
def stub() -> Iterator[ApiStub]:
    with tempfile.TemporaryDirectory(prefix="tq-", dir="/tmp") as tmp:
        api = ApiStub(os.path.join(tmp, "api.sock"))
        try:
            yield api
        finally:
            api.close()
