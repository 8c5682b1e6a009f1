"""Fixtures shared by every tier."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.daemon import Daemon


@pytest.fixture
def daemon() -> Iterator[Daemon]:
    """A real trainqd with four simulated GPUs."""
    # Imported here: tests/gpu runs on machines without trainq's test dependencies.
    from tests.daemon import running_daemon

    with running_daemon(gpus="fake:4", config={"default_stop_grace_seconds": 5}) as d:
        yield d


@pytest.fixture(scope="module")
def shared_daemon() -> Iterator[Daemon]:
    """One daemon for a module whose tests leave nothing behind (refusals, reads)."""
    from tests.daemon import running_daemon

    with running_daemon(gpus="fake:4") as d:
        yield d
