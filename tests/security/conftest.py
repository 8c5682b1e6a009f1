"""Fixtures of the adversarial tests: the multi-user tests' real users and root trainqd, and
the container tests' real engine and images, used here to attack the trust boundary that
docs/security.md describes. Each test tries what a hostile local user would and asserts that
it fails and that trainqd goes on serving the other users."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.accounts import Accounts
from tests.support.daemon import Daemon, running_daemon
from tests.support.fake_slurm import fake_slurm_commands
from tests.support.fixtures.containers import (
    docker_daemon,
    docker_service,
    engine,
    podman_daemon,
    submitter,
)
from tests.support.fixtures.multiuser import accounts, shared_dir, workstation

__all__ = [
    "accounts",
    "docker_daemon",
    "docker_service",
    "engine",
    "podman_daemon",
    "shared_dir",
    "submitter",
    "workstation",
]


@pytest.fixture
def fake_slurm(accounts: Accounts) -> Iterator[Path]:
    """The stand-ins for Slurm's commands (tests/support/fake_slurm.py)."""
    with fake_slurm_commands(accounts) as base:
        yield base


@pytest.fixture
def slurm_daemon(fake_slurm: Path) -> Iterator[Daemon]:
    """trainqd whose Slurm back end runs the stand-ins."""
    path = f"{fake_slurm / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    config = {"backend": "slurm", "slurm_poll_seconds": 0.2, "default_stop_grace_seconds": 1}
    with running_daemon(gpus="none", config=config, env={"PATH": path}) as daemon:
        yield daemon
