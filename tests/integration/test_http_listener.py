"""Binding the API socket: permissions, stale and live sockets, things that are not sockets."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.waiting import wait_for
from trainqd.api.listener import (
    SocketInUse,
    SocketSetupError,
    bind_unix_socket,
    remove_unix_socket,
)

LISTEN_FOREVER = """
import socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1])
s.listen(16)
time.sleep(60)
"""


@pytest.fixture
def workdir() -> Iterator[Path]:
    directory = Path("/tmp") / f"tql{os.getpid()}"
    directory.mkdir(mode=0o755)
    try:
        yield directory
    finally:
        shutil.rmtree(directory)


def connects(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            return False
        return True


def test_mode_group_and_listening(workdir: Path) -> None:
    path = workdir / "api.sock"
    umask = os.umask(0o022)
    try:
        with bind_unix_socket(path, mode=0o660, group="nogroup"):
            st = os.lstat(path)
            assert stat.S_ISSOCK(st.st_mode)
            assert stat.S_IMODE(st.st_mode) == 0o660
            assert st.st_gid == 65534
            assert connects(path)
        assert os.umask(0o022) == 0o022  # put back as it was
    finally:
        os.umask(umask)


def test_a_wide_mode_is_applied_exactly(workdir: Path) -> None:
    path = workdir / "api.sock"
    with bind_unix_socket(path, mode=0o666, group=None):
        assert stat.S_IMODE(os.lstat(path).st_mode) == 0o666
        assert os.lstat(path).st_gid == os.getgid()


def test_missing_parents_are_created_with_the_asked_mode(workdir: Path) -> None:
    path = workdir / "run" / "trainq" / "api.sock"
    with bind_unix_socket(path, mode=0o600, group=None, parent_mode=0o700):
        assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
        assert connects(path)


def test_the_system_daemon_parent_defaults_to_0755(workdir: Path) -> None:
    assert os.geteuid() == 0
    path = workdir / "trainq" / "api.sock"
    with bind_unix_socket(path, mode=0o666, group=None):
        assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o755


def test_a_stale_socket_is_replaced(workdir: Path) -> None:
    path = workdir / "api.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as dead:
        dead.bind(str(path))  # as a crashed daemon leaves it: the file, nobody listening
    assert stat.S_ISSOCK(os.lstat(path).st_mode)
    assert not connects(path)
    with bind_unix_socket(path, mode=0o600, group=None):
        assert connects(path)


def test_a_live_socket_is_refused_and_left_alone(workdir: Path) -> None:
    path = workdir / "api.sock"
    other = subprocess.Popen([sys.executable, "-S", "-I", "-c", LISTEN_FOREVER, str(path)])
    try:
        wait_for(lambda: connects(path), timeout=10, what="the other listener")
        with pytest.raises(SocketInUse) as refused:
            bind_unix_socket(path, mode=0o600, group=None)
        assert str(refused.value) == (
            f"another process (pid {other.pid}) is accepting on {path}; is trainqd already running?"
        )
        assert connects(path)  # still the other process's socket
    finally:
        other.kill()
        other.wait()


@pytest.mark.parametrize("kind", ["file", "directory", "symlink"])
def test_what_is_not_a_socket_is_never_removed(workdir: Path, kind: str) -> None:
    path = workdir / "api.sock"
    if kind == "file":
        path.write_text("precious")
    elif kind == "directory":
        path.mkdir()
    else:
        target = workdir / "elsewhere.sock"
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as dead:
            dead.bind(str(target))
        path.symlink_to(target)
    with pytest.raises(SocketSetupError, match="exists and is not a socket; refusing"):
        bind_unix_socket(path, mode=0o600, group=None)
    assert os.path.lexists(path)
    if kind == "file":
        assert path.read_text() == "precious"


def test_an_unknown_group_is_refused_before_anything_is_touched(workdir: Path) -> None:
    path = workdir / "new" / "api.sock"
    with pytest.raises(SocketSetupError, match="socket group 'no-such-group' does not exist"):
        bind_unix_socket(path, mode=0o660, group="no-such-group")
    assert not path.parent.exists()


def test_a_numeric_group_is_a_gid(workdir: Path) -> None:
    path = workdir / "api.sock"
    with bind_unix_socket(path, mode=0o660, group="4242"):
        assert os.lstat(path).st_gid == 4242


def test_a_directory_someone_else_controls_is_refused(workdir: Path) -> None:
    planted = workdir / "trainq-1000"  # as another user could pre-create it in /tmp
    planted.mkdir()
    os.chown(planted, 65534, 65534)
    with pytest.raises(SocketSetupError, match="belongs to uid 65534"):
        bind_unix_socket(planted / "trainq.sock", mode=0o600, group=None)
    open_dir = workdir / "open"
    open_dir.mkdir()
    os.chmod(open_dir, 0o777)  # noqa: S103 (the very thing being refused)
    with pytest.raises(SocketSetupError, match="writable by others"):
        bind_unix_socket(open_dir / "trainq.sock", mode=0o600, group=None)
    os.chmod(open_dir, 0o1777)  # noqa: S103 (sticky, like /tmp: fine)
    with bind_unix_socket(open_dir / "trainq.sock", mode=0o600, group=None):
        pass


def test_a_path_too_long_for_a_unix_socket(workdir: Path) -> None:
    with pytest.raises(SocketSetupError, match="unix sockets allow 107"):
        bind_unix_socket(workdir / ("x" * 120), mode=0o600, group=None)


def test_rivals_starting_together_leave_exactly_one_winner(workdir: Path) -> None:
    path = workdir / "api.sock"
    barrier = threading.Barrier(4)
    won: list[socket.socket] = []
    lost: list[BaseException] = []

    def contend() -> None:
        barrier.wait()
        try:
            won.append(bind_unix_socket(path, mode=0o600, group=None))
        except SocketInUse as exc:
            lost.append(exc)

    threads = [threading.Thread(target=contend) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    try:
        assert (len(won), len(lost)) == (1, 3)
        assert connects(path)
    finally:
        for sock in won:
            sock.close()


def test_shutdown_removes_our_socket_but_not_a_successors(workdir: Path) -> None:
    path = workdir / "api.sock"
    with bind_unix_socket(path, mode=0o600, group=None):
        assert remove_unix_socket(path)  # still listening, but it is ours
    assert not os.path.lexists(path)
    assert not remove_unix_socket(path)
    with bind_unix_socket(path, mode=0o600, group=None):
        pass
    assert remove_unix_socket(path)  # closed: a dead socket goes whoever bound it
    other = subprocess.Popen([sys.executable, "-S", "-I", "-c", LISTEN_FOREVER, str(path)])
    try:
        wait_for(lambda: connects(path), timeout=10, what="the other listener")
        assert not remove_unix_socket(path)
        assert connects(path)
    finally:
        other.kill()
        other.wait()
