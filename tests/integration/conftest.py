"""Fixtures of the integration tests: one part of trainq at a time, real (the state database,
a monitor and its trainer, the Pipe mode feeder, the HTTP server, cgroups), without a
trainqd around it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.feeder import Workspace, workspace
from tests.support.fixtures.apistub import stub
from tests.support.fixtures.cli import cli_environment
from tests.support.fixtures.monitor import starter
from tests.support.fixtures.store import store

__all__ = ["cli_environment", "space", "starter", "store", "stub"]


@pytest.fixture
def space() -> Iterator[Workspace]:
    """A feeder's directories: its ml root, its data and its FIFOs."""
    with workspace() as ws:
        yield ws
