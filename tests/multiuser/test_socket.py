"""Who may connect: the socket gets socket_mode and socket_group from the configuration.
By default every local user may (each request is authenticated by the kernel); a narrower
mode shuts the others out with a clear one-line refusal from `trainq`."""

from __future__ import annotations

import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from tests.support.accounts import ADMINS, Accounts
from tests.support.daemon import SYSTEM_PYTHON, TRAINQ, running_daemon
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


# Another user's listener where `trainq` looks for its user's own daemon: it notes each
# connection in a file beside it, then hangs up.
PLANTED_LISTENER = """
import os, socket, sys
directory = sys.argv[1]
os.mkdir(directory, 0o755)
server = socket.socket(socket.AF_UNIX)
server.bind(os.path.join(directory, "trainq.sock"))
os.chmod(os.path.join(directory, "trainq.sock"), 0o777)
server.listen()
print("ready", flush=True)
while True:
    conn, _ = server.accept()
    with open(os.path.join(directory, "connected"), "a") as note:
        note.write("1\\n")
    conn.close()
"""


def test_a_socket_another_user_planted_in_the_default_place_is_not_used(
    accounts: Accounts,
) -> None:
    """Without XDG_RUNTIME_DIR (cron, su) a user's own daemon's socket is in
    /tmp/trainq-<uid>, a name any user may take first: `trainq` must not send that
    user's requests (their specs, environments) to whoever listens there."""
    alice, bob = accounts.alice, accounts.bob
    planted = Path(f"/tmp/trainq-{alice.uid}")
    assert not planted.exists(), f"{planted} is left from elsewhere"
    listener = bob.popen(
        [SYSTEM_PYTHON, "-I", "-c", PLANTED_LISTENER, str(planted)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert listener.stdout is not None
        assert listener.stdout.readline() == "ready\n"
        with running_daemon(gpus="none") as daemon:
            unset = ("XDG_RUNTIME_DIR", "TRAINQ_SOCKET")
            env = {k: v for k, v in daemon.env.items() if k not in unset}
            done = alice.run([TRAINQ, "ls", "--json"], env=env)
            assert str(planted) not in done.stderr, done.stderr
            assert not (planted / "connected").exists()
            # The workstation's trainqd serves her and bob as before.
            for user in (alice, bob):
                served = trainq_as(daemon, user, "ls", "--json")
                assert (served.returncode, served.stdout) == (0, JOBLESS), served.stderr
    finally:
        listener.kill()
        listener.communicate()
        shutil.rmtree(planted, ignore_errors=True)
