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


# Under pytest-xdist (`-n N --dist loadgroup`, as tests/run runs the suite), tests that share
# one machine-wide thing run on one worker, one after another. The container engine is one
# session's at a time (`engine_turn`, held until the session ends) and its container names
# repeat across daemons; the local Slurm is one per machine and its tests use the engine too.
# A module whose tests share a module-scoped fixture (a daemon, 250 queued jobs) keeps to one
# worker too, so that the fixture is made once.
MACHINE_WIDE_FIXTURES = {"engine": "engine", "slurm": "engine"}


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        group = _xdist_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


def _xdist_group(item: pytest.Item) -> str | None:
    names = getattr(item, "fixturenames", ())
    for name, group in MACHINE_WIDE_FIXTURES.items():
        if name in names:
            return group
    info = getattr(item, "_fixtureinfo", None)
    definitions = info.name2fixturedefs.values() if info is not None else ()
    if any(d.scope in ("module", "class", "package") for ds in definitions for d in ds):
        return item.nodeid.split("::", 1)[0]
    return None


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
