"""Fixtures of the multi-user tests (tests/support/fixtures/multiuser.py): real users, a
trainqd run by root as on the workstation, and directories the users can reach."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.accounts import Accounts
from tests.support.daemon import Daemon
from tests.support.fixtures.multiuser import accounts, shared_dir, workstation
from tests.support.gpu_devices import gpu_daemon
from trainqd.monitor import devices

__all__ = ["accounts", "shared_dir", "workstation"]


@pytest.fixture
def gpu_host(accounts: Accounts, shared_dir: Path) -> Iterator[tuple[Daemon, list[str]]]:
    with gpu_daemon(shared_dir, {}) as host:
        yield host


@pytest.fixture
def bpf_gpu_host(accounts: Accounts, shared_dir: Path) -> Iterator[tuple[Daemon, list[str]]]:
    """As gpu_host, with the devices cgroup v1 left out: the eBPF program confines alone."""
    with gpu_daemon(shared_dir, {devices.NO_V1_ENV: "1"}) as host:
        yield host
