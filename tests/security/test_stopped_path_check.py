"""A submitter cannot hold a connection, a child or descriptors of trainqd's by stopping the
check of their own paths.

A root trainqd checks a job's channel paths in a child that runs as the submitter, so the
submitter may signal it. tq-alice makes the check block and then freezes it: she holds a
write lease on her own channel file (opening it then waits for her to give the lease up) and
SIGSTOPs every path-check child of hers that she finds. trainqd must end her request with
one clear error at `path_check_timeout_seconds`, kill the child, release the connection and
its descriptors, and serve tq-bob meanwhile; a request whose client hangs up is cancelled at
once, its child killed, whatever the deadline.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.daemon import Daemon, running_daemon
from tests.helpers import wait_for
from tests.multiuser.accounts import ADMINS, Accounts, User
from tests.multiuser.support import SYSTEM_PYTHON, http_as, trainq_as

pytestmark = pytest.mark.multiuser

# alice's side, standard library only: lease her file, then stop each path check of hers.
_FREEZER = r"""
import fcntl, os, select, signal, sys

path, trainqd = sys.argv[1], sys.argv[2]
signal.signal(signal.SIGIO, signal.SIG_IGN)  # the kernel's "give the lease up" is ignored
with open(path, "w") as f:
    f.write("data\n")
fd = os.open(path, os.O_RDONLY)
fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)
print("leased", flush=True)
stopped = {os.getpid()}  # its own command line names the check too
while not select.select([sys.stdin], [], [], 0.01)[0]:
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in stopped:
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                if b"trainqd.pathcheck" not in f.read():
                    continue
            # Only the attacked trainqd's checks: other daemons on the machine go on.
            with open(f"/proc/{name}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[1] != trainqd:
                    continue
            os.kill(int(name), signal.SIGSTOP)  # refused while it is still root's
        except OSError:
            continue
        stopped.add(int(name))
        print("stopped", name, flush=True)
"""

# alice's client for the hang-up case: sends the submission, waits for a line on stdin, and
# closes the connection without reading an answer.
_HANG_UP = r"""
import socket, sys
body = sys.stdin.readline().encode()
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.connect(sys.argv[1])
sock.sendall(b"POST /v1/jobs HTTP/1.1\r\nHost: trainq\r\nContent-Type: application/json\r\n"
             b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
print("sent", flush=True)
sys.stdin.readline()
sock.close()
print("closed", flush=True)
"""


def _daemon(deadline: float) -> Iterator[Daemon]:
    config = {"admin_group": ADMINS, "path_check_timeout_seconds": deadline}
    with running_daemon(gpus="fake:4", config=config) as daemon:
        yield daemon


@pytest.fixture
def quick_deadline(accounts: Accounts) -> Iterator[Daemon]:
    yield from _daemon(3)


@pytest.fixture
def long_deadline(accounts: Accounts) -> Iterator[Daemon]:
    yield from _daemon(600)


@pytest.fixture
def alices_dir(shared_dir: Path, accounts: Accounts) -> Path:
    path = shared_dir / "alice"
    path.mkdir()
    os.chown(path, accounts.alice.uid, accounts.alice.gid)
    return path


class Freezer:
    """alice's lease on her channel file and her SIGSTOPs of her path checks."""

    def __init__(self, user: User, path: Path, trainqd: int) -> None:
        self.proc = user.popen(
            [SYSTEM_PYTHON, "-I", "-c", _FREEZER, str(path), str(trainqd)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.line(30) == "leased"

    def line(self, timeout: float) -> str:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        assert ready, f"alice's freezer said nothing within {timeout} s"
        return self.proc.stdout.readline().strip()

    def stopped_pid(self) -> int:
        said = self.line(60)
        assert said.startswith("stopped "), said
        return int(said.split()[1])

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.write("done\n")
            self.proc.stdin.flush()
        self.proc.wait(10)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


@pytest.fixture
def freezer(
    request: pytest.FixtureRequest, accounts: Accounts, alices_dir: Path
) -> Iterator[Freezer]:
    # The daemon under attack: the test's quick_deadline or long_deadline.
    (name,) = {"quick_deadline", "long_deadline"} & set(request.fixturenames)
    daemon: Daemon = request.getfixturevalue(name)
    assert daemon.proc is not None
    made = Freezer(accounts.alice, alices_dir / "leased.csv", daemon.proc.pid)
    try:
        yield made
    finally:
        made.close()


def _spec(alices_dir: Path) -> dict[str, Any]:
    return {
        "command": ["true"],
        "channels": {"train": {"source": str(alices_dir / "leased.csv")}},
    }


def _requests_descriptors(daemon: Daemon) -> list[str]:
    """What trainqd holds for requests: its accepted API connections, and pipes (a path
    check's stdin, stdout and stderr; trainqd holds no other pipe while no job runs)."""
    assert daemon.proc is not None
    trainqd = psutil.Process(daemon.proc.pid)
    fd_dir = f"/proc/{trainqd.pid}/fd"
    pipes = [os.readlink(f"{fd_dir}/{fd}") for fd in os.listdir(fd_dir)]
    ours = [c for c in trainqd.net_connections(kind="unix") if c.laddr == str(daemon.socket)]
    return [p for p in pipes if p.startswith("pipe:")] + ["connection"] * (len(ours) - 1)


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _assert_others_served(daemon: Daemon, accounts: Accounts) -> None:
    assert daemon.proc is not None
    assert daemon.proc.poll() is None, "trainqd died"
    done = trainq_as(daemon, accounts.bob, "ls")
    assert done.returncode == 0, done.stderr


def test_a_stopped_path_check_ends_at_its_deadline(
    quick_deadline: Daemon, accounts: Accounts, alices_dir: Path, freezer: Freezer
) -> None:
    daemon = quick_deadline
    answers: list[tuple[int, Any]] = []
    submit = threading.Thread(
        target=lambda: answers.append(
            http_as(daemon, accounts.alice, "POST", "/v1/jobs", _spec(alices_dir))
        )
    )
    submit.start()
    try:
        child = freezer.stopped_pid()
        # While alice's check is frozen, bob is served.
        _assert_others_served(daemon, accounts)
    finally:
        submit.join(60)
    assert not submit.is_alive(), "alice's submission was never answered"
    [(status, body)] = answers
    assert status == 400, body
    message = body["error"]["message"]
    assert "could not be checked within 3 s" in message, message
    assert "\n" not in message
    wait_for(lambda: _gone(child), timeout=10, what="the stopped path check to be killed")
    wait_for(
        lambda: not _requests_descriptors(daemon),
        timeout=10,
        what="trainqd to let go of the request's descriptors",
    )
    assert daemon.get("/v1/jobs").json()["jobs"] == []
    _assert_others_served(daemon, accounts)


def test_a_request_whose_client_left_is_cancelled_with_its_child(
    long_deadline: Daemon, accounts: Accounts, alices_dir: Path, freezer: Freezer
) -> None:
    daemon = long_deadline
    clients = []
    children = []
    try:
        for _ in range(4):
            client = accounts.alice.popen(
                [SYSTEM_PYTHON, "-I", "-c", _HANG_UP, str(daemon.socket)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            clients.append(client)
            assert client.stdin is not None
            assert client.stdout is not None
            client.stdin.write(json.dumps(_spec(alices_dir)) + "\n")
            client.stdin.flush()
            assert client.stdout.readline().strip() == "sent"
            children.append(freezer.stopped_pid())
        _assert_others_served(daemon, accounts)
        for client in clients:  # each hangs up on its frozen request
            assert client.stdin is not None
            assert client.stdout is not None
            client.stdin.write("close\n")
            client.stdin.flush()
            assert client.stdout.readline().strip() == "closed"
    finally:
        for client in clients:
            if client.poll() is None:
                client.kill()
            client.wait(10)
            for pipe in (client.stdin, client.stdout):
                if pipe is not None:
                    pipe.close()
    # Long before the 600 s deadline, every frozen check is killed and its slot given back.
    for child in children:
        wait_for(lambda c=child: _gone(c), timeout=30, what="the abandoned check to be killed")
    wait_for(
        lambda: not _requests_descriptors(daemon),
        timeout=30,
        what="trainqd to let go of the requests' descriptors",
    )
    assert daemon.get("/v1/jobs").json()["jobs"] == []
    _assert_others_served(daemon, accounts)
    # And alice herself is served again.
    done = trainq_as(daemon, accounts.alice, "ls")
    assert done.returncode == 0, done.stderr
