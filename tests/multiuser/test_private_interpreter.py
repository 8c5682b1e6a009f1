"""trainqd's own Python need not be usable by the workstation's users.

An administrator may install trainq with an interpreter only root can reach (a pyenv under
/root, mode 0700, say). Users never run it themselves: the monitor starts as root and only
then becomes the job's owner. The check of a submitter's paths must work the same way; here
trainqd runs from an interpreter in a directory only root may enter.
"""

from __future__ import annotations

import os
import site
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.accounts import Accounts
from tests.support.daemon import Daemon, scratch_dir, supervised
from tests.support.users import http_as

pytestmark = pytest.mark.multiuser
REPO = Path(__file__).resolve().parents[2]
# trainq's dependencies, and trainq itself as the editable install's .pth file adds it.
IMPORT_PATHS = [*site.getsitepackages(), str(REPO / "cli"), str(REPO / "daemon")]


class PrivateInterpreterDaemon(Daemon):
    """trainqd run as `PRIVATE/python3 -m trainqd`, where PRIVATE is root's alone."""

    def __init__(self, base: Path) -> None:
        super().__init__(base, gpus="none")
        private = base / "private"
        private.mkdir(mode=0o700)
        self.python = private / "python3"
        self.python.symlink_to(Path(sys.executable).resolve())
        # No venv next to the link: trainq and its dependencies come in by PYTHONPATH.
        self.env["PYTHONPATH"] = os.pathsep.join(IMPORT_PATHS)

    def argv(self) -> list[str]:
        return [str(self.python), "-m", "trainqd", *super().argv()[1:]]


@pytest.fixture
def private_daemon(accounts: Accounts) -> Iterator[Daemon]:
    base = scratch_dir("tqpi")
    with supervised(PrivateInterpreterDaemon(base), remove=base) as daemon:
        yield daemon


def test_the_interpreter_is_out_of_the_users_reach(
    private_daemon: PrivateInterpreterDaemon, accounts: Accounts
) -> None:
    with pytest.raises(PermissionError):
        accounts.alice.run([str(private_daemon.python), "-c", "pass"])
    status, _ = http_as(private_daemon, accounts.alice, "POST", "/v1/jobs", {"command": ["true"]})
    assert status == 201  # a job without paths to check runs all the same


def test_a_submitters_paths_are_checked_without_running_trainqds_python_as_them(
    private_daemon: PrivateInterpreterDaemon, accounts: Accounts
) -> None:
    spec = {"command": ["true"], "channels": {"config": {"source": "/etc/hostname"}}}
    status, body = http_as(private_daemon, accounts.alice, "POST", "/v1/jobs", spec)
    assert status == 201, body
    assert private_daemon.wait_state(body["id"])["state"] == "COMPLETED"
