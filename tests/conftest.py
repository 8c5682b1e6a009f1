"""Fixtures shared by every tier."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.daemon import Daemon

try:
    from hypothesis import settings
except ImportError:  # tests/gpu runs on machines without trainq's test dependencies
    pass
else:
    # The suite's property tests try the same examples on every run: a merge must not turn
    # red on a search's luck. `HYPOTHESIS_PROFILE=explore` (or `--hypothesis-profile
    # explore`) searches afresh with many more; a counterexample it finds becomes a test.
    settings.register_profile("suite", derandomize=True, database=None)
    settings.register_profile("explore", max_examples=5000, deadline=None)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "suite"))


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
