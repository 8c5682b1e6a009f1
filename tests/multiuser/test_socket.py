"""Who may connect: the socket gets socket_mode and socket_group from the configuration.
By default every local user may (each request is authenticated by the kernel); a narrower
mode shuts the others out with a clear one-line refusal from `trainq`."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from tests.support.accounts import ADMINS, Accounts
from tests.support.daemon import running_daemon
from tests.support.users import trainq_as
from trainq.core.errors import ExitCode

pytestmark = pytest.mark.multiuser
# `trainq ls --json` of an empty queue
JOBLESS = '{\n  "jobs": [],\n  "total": 0,\n  "next": null\n}\n'


def mode_and_group(path: Path) -> tuple[int, int]:
    info = path.lstat()
    assert stat.S_ISSOCK(info.st_mode)
    return stat.S_IMODE(info.st_mode), info.st_gid


def test_by_default_every_local_user_may_connect(accounts: Accounts) -> None:
    with running_daemon(gpus="none") as daemon:
        assert mode_and_group(daemon.socket) == (0o666, 0)
        for user in accounts.all:
            done = trainq_as(daemon, user, "ls", "--json")
            assert (done.returncode, done.stdout) == (0, JOBLESS), (user.name, done.stderr)


def test_a_socket_group_admits_its_members_alone(accounts: Accounts) -> None:
    config = {"socket_mode": "0660", "socket_group": ADMINS}
    with running_daemon(gpus="none", config=config) as daemon:
        assert mode_and_group(daemon.socket) == (0o660, accounts.admins_gid)
        member = trainq_as(daemon, accounts.carol, "ls", "--json")
        assert (member.returncode, member.stdout) == (0, JOBLESS), member.stderr
        outsider = trainq_as(daemon, accounts.bob, "ls")
        assert outsider.returncode == ExitCode.FORBIDDEN
        assert outsider.stderr == (
            f"trainq: cannot reach trainqd at {daemon.socket}: permission denied (the socket "
            f"is mode 0660, group {ADMINS}; ask an administrator to add you to group {ADMINS})\n"
        )
        assert daemon.cli("ls").returncode == 0  # root


def test_a_socket_for_root_alone(accounts: Accounts) -> None:
    with running_daemon(gpus="none", config={"socket_mode": "0600"}) as daemon:
        assert mode_and_group(daemon.socket) == (0o600, 0)
        for user in accounts.all:
            done = trainq_as(daemon, user, "ls")
            assert done.returncode == ExitCode.FORBIDDEN, user.name
            assert done.stderr.count("\n") == 1
            assert "permission denied (the socket is mode 0600" in done.stderr
        assert daemon.cli("ls").returncode == 0


def test_a_numeric_socket_group_is_taken_as_a_gid(accounts: Accounts) -> None:
    config = {"socket_mode": "0660", "socket_group": str(accounts.alice.gid)}
    with running_daemon(gpus="none", config=config) as daemon:
        assert mode_and_group(daemon.socket) == (0o660, accounts.alice.gid)
        assert trainq_as(daemon, accounts.alice, "ls").returncode == 0
        assert trainq_as(daemon, accounts.bob, "ls").returncode == ExitCode.FORBIDDEN
