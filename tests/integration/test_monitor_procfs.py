"""/proc helpers against real processes: identity, trees, and killing a tree."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.waiting import wait_for
from trainqd.monitor import procfs

TREE = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
pids = []
for session in (False, True):
    pid = os.fork()
    if pid == 0:
        if session:
            os.setsid()
        while True:
            time.sleep(60)
    pids.append(pid)
signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the children killed
print(*pids, flush=True)
while True:
    time.sleep(60)
"""


@pytest.fixture
def tree() -> Iterator[tuple[subprocess.Popen[str], list[int]]]:
    """A process that ignores SIGTERM with two children (one in its own session)."""
    with subprocess.Popen([sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True) as p:
        assert p.stdout is not None
        children = [int(pid) for pid in p.stdout.readline().split()]
        try:
            yield p, children
        finally:
            for pid in children:
                if procfs.read_stat(pid) is not None:
                    os.kill(pid, signal.SIGKILL)
            p.kill()


def test_stat_fields_survive_a_command_name_with_spaces_and_parentheses(tmp_path: Path) -> None:
    program = tmp_path / "a) b (c"
    shutil.copy("/bin/sleep", program)
    with subprocess.Popen([str(program), "30"]) as p:
        try:
            stat = procfs.read_stat(p.pid)
            assert stat is not None
            assert (stat.pid, stat.ppid, stat.pgid) == (p.pid, os.getpid(), os.getpgid(0))
            assert stat.alive
            assert stat.start_ticks == procfs.start_ticks(p.pid)
            mine = procfs.start_ticks(os.getpid())
            assert mine is not None
            assert stat.start_ticks >= mine
        finally:
            p.kill()


def test_identity_is_pid_start_time_and_boot() -> None:
    with subprocess.Popen(["sleep", "30"]) as p:
        try:
            ticks = procfs.start_ticks(p.pid)
            assert ticks is not None
            boot = procfs.boot_id()
            assert procfs.is_same_process(p.pid, ticks, boot)
            assert not procfs.is_same_process(p.pid, ticks + 1, boot)
            assert not procfs.is_same_process(p.pid, ticks, "another-boot")
        finally:
            p.kill()
    assert procfs.start_ticks(p.pid) is None  # reaped: gone
    assert not procfs.is_same_process(p.pid, ticks, boot)


def test_a_stale_identity_is_never_signalled() -> None:
    with subprocess.Popen(["sleep", "30"]) as p:
        try:
            ticks = procfs.start_ticks(p.pid)
            assert ticks is not None
            assert procfs.signal_checked(p.pid, ticks + 1, signal.SIGKILL) is None
            assert p.poll() is None
            pidfd = procfs.signal_checked(p.pid, ticks, signal.SIGKILL)
            assert pidfd is not None
            os.close(pidfd)
            assert p.wait(5) == -signal.SIGKILL
        finally:
            p.kill()


def test_descendants_include_children_in_other_sessions(
    tree: tuple[subprocess.Popen[str], list[int]],
) -> None:
    p, children = tree
    assert sorted(procfs.descendants(p.pid)) == sorted(children)
    assert set(children) <= set(procfs.descendants(os.getpid()))
    assert procfs.descendants(p.pid, include_zombies=False) == procfs.descendants(p.pid)


def test_kill_tree_ends_processes_that_ignore_sigterm(
    tree: tuple[subprocess.Popen[str], list[int]],
) -> None:
    p, children = tree
    assert procfs.kill_tree(p.pid, term_wait=0.2, kill_wait=5) == []
    wait_for(lambda: all(procfs.read_stat(pid) is None for pid in children), what="reaping")
    assert p.poll() is None  # the root is spared: it is the caller itself in the monitor
    assert procfs.descendants(p.pid, include_zombies=True) == []


def test_wait_exited_returns_what_is_still_running() -> None:
    with subprocess.Popen(["sleep", "30"]) as slow, subprocess.Popen(["true"]) as quick:
        try:
            slow_fd, quick_fd = os.pidfd_open(slow.pid), os.pidfd_open(quick.pid)
            try:
                assert procfs.wait_exited([quick_fd], timeout=5) == []
                assert procfs.wait_exited([slow_fd, quick_fd], timeout=0.05) == [slow_fd]
            finally:
                os.close(slow_fd)
                os.close(quick_fd)
        finally:
            slow.kill()
