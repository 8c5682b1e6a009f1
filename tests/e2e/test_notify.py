"""trainqd under Type=notify: the test stands in for systemd with a datagram socket of its
own in NOTIFY_SOCKET. READY=1 arrives only once the API answers, STOPPING=1 once SIGTERM
starts the shutdown, nothing at all from a daemon that could not start, and no process
trainqd starts inherits the variable."""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daemon import TRAINQD
from tests.support.waiting import WaitTimeout

READY_TIMEOUT = 20.0


class FakeManager:
    """The receiving end of NOTIFY_SOCKET, as systemd holds it."""

    def __init__(self, base: Path, abstract: bool = False) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        if abstract:
            name = f"trainq-test-notify-{os.getpid()}-{id(self)}"
            self.sock.bind("\0" + name)
            self.address = "@" + name
        else:
            self.sock.bind(str(base / "notify"))
            self.address = str(base / "notify")

    def receive(self, timeout: float = READY_TIMEOUT) -> dict[str, str]:
        """The next message, as its KEY=VALUE fields."""
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(4096)
        except TimeoutError:
            raise WaitTimeout(f"no notification within {timeout}s") from None
        return dict(line.split("=", 1) for line in data.decode().splitlines())

    def pending(self) -> bytes | None:
        """A message already waiting, if any."""
        self.sock.setblocking(False)
        try:
            return self.sock.recv(4096)
        except BlockingIOError:
            return None

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def manager(base: Path) -> Iterator[FakeManager]:
    receiver = FakeManager(base)
    try:
        yield receiver
    finally:
        receiver.close()


def start_trainqd(base: Path, notify_address: str, *extra: str) -> subprocess.Popen[bytes]:
    config = base / "trainqd.toml"
    if not config.exists():
        config.write_text("")
    argv = [
        TRAINQD, "--socket", str(base / "s"), "--state-dir", str(base / "state"),
        "--gpus", "fake:1", "--config", str(config), *extra,
    ]  # fmt: skip
    env = {**os.environ, "NOTIFY_SOCKET": notify_address}
    log = (base / "trainqd.log").open("ab")
    try:
        return subprocess.Popen(argv, env=env, stdout=log, stderr=log, start_new_session=True)
    finally:
        log.close()


def health_status(path: Path) -> bytes:
    """The status line of GET /v1/health, on one connection attempt (no retry)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.settimeout(5)
        client.connect(str(path))
        client.sendall(b"GET /v1/health HTTP/1.1\r\nHost: trainq\r\nConnection: close\r\n\r\n")
        response = b""
        while chunk := client.recv(65536):
            response += chunk
    return response.split(b"\r\n", 1)[0]


def stopped(proc: subprocess.Popen[bytes]) -> int:
    if proc.poll() is None:
        proc.kill()
    return proc.wait(15)


def test_ready_once_the_api_answers_and_stopping_on_sigterm(
    base: Path, manager: FakeManager
) -> None:
    proc = start_trainqd(base, manager.address)
    try:
        ready = manager.receive()
        # Asked once, at once: no retry could hide an early READY=1.
        assert health_status(base / "s") == b"HTTP/1.1 200 OK"
        assert ready["READY"] == "1"
        assert str(base / "s") in ready["STATUS"]  # `systemctl status` tells where
        assert manager.pending() is None  # nothing else said while serving
        proc.send_signal(signal.SIGTERM)
        assert manager.receive()["STOPPING"] == "1"
        assert proc.wait(15) == 0
    finally:
        stopped(proc)
    assert manager.pending() is None


def test_an_abstract_notify_socket_works_too(base: Path) -> None:
    manager = FakeManager(base, abstract=True)
    proc = start_trainqd(base, manager.address)
    try:
        assert manager.receive()["READY"] == "1"
        assert health_status(base / "s") == b"HTTP/1.1 200 OK"
    finally:
        stopped(proc)
        manager.close()


def test_a_bad_configuration_never_says_ready(base: Path, manager: FakeManager) -> None:
    (base / "trainqd.toml").write_text("cpu_slots = 0\n")
    proc = start_trainqd(base, manager.address)
    try:
        assert proc.wait(20) == 78
    finally:
        stopped(proc)
    assert manager.pending() is None


def test_a_refused_start_never_says_ready(base: Path, manager: FakeManager) -> None:
    (base / "state").mkdir()
    holder = os.open(base / "state" / "trainqd.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)  # as a running trainqd holds it
        proc = start_trainqd(base, manager.address)
        try:
            assert proc.wait(20) == 1
        finally:
            stopped(proc)
    finally:
        os.close(holder)
    assert manager.pending() is None


CHILD_ENVIRONMENT = """
import subprocess, sys
import trainqd.main  # what the trainqd console script imports first
from trainqd import sdnotify
print(subprocess.run(["env"], capture_output=True, text=True, check=True).stdout, end="")
sys.exit(0 if sdnotify.notify("STATUS=still able to notify") else 3)
"""


def test_processes_trainqd_starts_never_inherit_notify_socket(
    base: Path, manager: FakeManager
) -> None:
    """A container engine that found NOTIFY_SOCKET would speak for the service (podman sends
    MAINPID= and READY=1): trainqd takes the variable out of its environment as it loads,
    and still notifies systemd itself."""
    done = subprocess.run(
        [sys.executable, "-c", CHILD_ENVIRONMENT],
        env={**os.environ, "NOTIFY_SOCKET": manager.address},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "PATH=" in done.stdout
    assert "NOTIFY_SOCKET" not in done.stdout
    assert manager.receive(timeout=5) == {"STATUS": "still able to notify"}
