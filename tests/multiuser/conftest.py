"""Fixtures of the multi-user tests: real users (made once per session, see
tests/support/accounts.py), a trainqd run by root as on the workstation, and directories
the users can reach."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.accounts import ADMINS, Accounts, shared_accounts
from tests.support.daemon import Daemon, running_daemon


@pytest.fixture(scope="session")
def accounts() -> Iterator[Accounts]:
    """tq-alice, tq-bob, and tq-carol (in tq-admins)."""
    with shared_accounts() as made:
        yield made


@pytest.fixture
def workstation(accounts: Accounts) -> Iterator[Daemon]:
    """trainqd as root with four simulated GPUs and tq-admins as its admin group."""
    config = {"admin_group": ADMINS, "default_stop_grace_seconds": 5}
    with running_daemon(gpus="fake:4", config=config) as daemon:
        yield daemon


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory every test user can enter (pytest's tmp_path is root's alone): the
    current directory of their commands, and the place for data with chosen owners."""
    path = Path(tempfile.mkdtemp(prefix="tqmu", dir="/tmp"))
    os.chmod(path, 0o755)  # noqa: S103 (readable by the test users on purpose)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
