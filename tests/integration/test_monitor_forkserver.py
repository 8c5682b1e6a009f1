"""The monitor fork server: one process with the monitor's imports done, forking a monitor
for each attempt; a monitor started from nothing when the server cannot be had."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from tests.support.monitor import alive, attempt_of, python
from tests.support.waiting import wait_for
from trainqd.monitor import procfs, spawn
from trainqd.monitor.records import StopOrder, write_record


def server_pid() -> int | None:
    """The fork server this test process started: its child with the server's flag."""
    servers = []
    for child in psutil.Process().children():
        with contextlib.suppress(psutil.Error):  # a dead server (a zombie) has no command line
            if child.status() != psutil.STATUS_ZOMBIE and spawn.FORK_SERVER_FLAG in child.cmdline():
                servers.append(child.pid)
    assert len(servers) <= 1
    return servers[0] if servers else None


@pytest.fixture
def starter() -> Iterator[spawn.MonitorStarter]:
    """A fork server, as trainqd starts it; let go of (and so ended) after the test."""
    started = spawn.MonitorStarter()
    started.start_server()
    try:
        yield started
    finally:
        started.close()


def test_forked_monitors_run_their_attempts(starter: spawn.MonitorStarter) -> None:
    server = wait_for(server_pid, what="the fork server")
    pids = []
    for n in range(3):
        with attempt_of(python(f"print('attempt {n}')")) as attempt:
            started = starter.start(attempt.launch)
            assert started.popen is None  # the server's child, not ours
            pids.append(started.pid)
            stat = procfs.read_stat(started.pid)
            assert stat is not None
            assert stat.ppid == server
            wait_for(lambda a=attempt: a.record() is not None, what="the exit record")
            record = attempt.record()
            assert record is not None
            assert (record.outcome, record.exit_code) == ("exited", 0)
            assert f"attempt {n}" in attempt.stdout()
            assert "trainer started" in attempt.monitor_log()
    assert server_pid() == server  # one server for all of them
    assert len(set(pids)) == 3
    # The server reaps what it forked: no zombie is left.
    wait_for(lambda: not procfs.descendants(server, include_zombies=True),
             what="the monitors to be reaped")  # fmt: skip


def test_a_monitor_outlives_the_server_that_forked_it(starter: spawn.MonitorStarter) -> None:
    code = "import os, sys, time\nwhile not os.path.exists(sys.argv[1]): time.sleep(0.01)"
    with attempt_of(python(code)) as attempt:
        flag = attempt.root / "release"
        attempt.launch = replace(attempt.launch, argv=[*attempt.launch.argv, str(flag)])
        started = starter.start(attempt.launch)
        ticks = procfs.start_ticks(started.pid)
        assert ticks is not None
        wait_for(lambda: "trainer started" in attempt.monitor_log(), what="the trainer")
        starter.close()  # as when trainqd stops: the server goes
        assert alive(started.pid, ticks)
        flag.touch()
        wait_for(lambda: attempt.record() is not None, what="the exit record")
        record = attempt.record()
        assert record is not None
        assert record.exit_code == 0


def test_a_dead_server_is_replaced_and_meanwhile_monitors_start_from_nothing(
    starter: spawn.MonitorStarter,
) -> None:
    first = server_pid()
    assert first is not None
    os.kill(first, signal.SIGKILL)
    with attempt_of(python("print('cold')")) as attempt:
        started = starter.start(attempt.launch)
        attempt.popen = started.popen
        assert started.popen is not None  # started from nothing, our child
        assert attempt.wait().exit_code == 0
        assert "cold" in attempt.stdout()
    with attempt_of(python("print('forked again')")) as attempt:
        started = starter.start(attempt.launch)
        assert started.popen is None
        assert server_pid() not in (None, first)
        wait_for(lambda: attempt.record() is not None, what="the exit record")
        assert "forked again" in attempt.stdout()


def test_a_stop_file_written_before_the_start_is_honoured(starter: spawn.MonitorStarter) -> None:
    with attempt_of(python("print('never')")) as attempt:
        write_record(attempt.launch.stop_file, StopOrder(grace_seconds=1, reason="user"))
        starter.start(attempt.launch)
        wait_for(lambda: attempt.record() is not None, what="the exit record")
        record = attempt.record()
        assert record is not None
        assert record.outcome == "stopped"
        assert record.started_at is None
        assert attempt.stdout() == ""


def test_the_server_exits_when_trainqd_lets_go() -> None:
    starter = spawn.MonitorStarter()
    starter.start_server()
    server = starter._server
    assert server is not None
    starter.close()
    assert server[0].returncode == 0


def test_the_server_exits_quietly_when_trainqd_dies_before_reading_its_answer(
    tmp_path: Path,
) -> None:
    """trainqd killed between a launch and its answer: the server's next read is a reset
    (its answer was never read), which is trainqd letting go, not a crash to report."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    stderr = tmp_path / "server.stderr"
    with stderr.open("wb") as err:
        server = subprocess.Popen(
            spawn.monitor_argv(fork_server=True),
            stdin=theirs.fileno(),
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,
        )
    theirs.close()
    launch = os.memfd_create("not-a-launch")
    os.write(launch, b"{}")  # the forked monitor refuses it into its log, and exits
    log = os.open(tmp_path / "monitor.log", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        socket.send_fds(ours, [spawn.LAUNCH_MESSAGE], [launch, log])
        ours.settimeout(10)
        assert len(ours.recv(spawn.PID.size, socket.MSG_PEEK)) == spawn.PID.size
    finally:
        os.close(launch)
        os.close(log)
        ours.close()  # with the answer unread, as when trainqd is killed at this moment
    assert server.wait(10) == 0
    assert stderr.read_text() == ""


def test_a_server_that_does_not_answer_never_forks_the_launch_later(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A server stuck past trainqd's wait (stopped here; swapped out or starved on a host)
    still holds the launch in its queue. The monitor trainqd then starts from nothing must be
    the attempt's only one: the server is killed, not left to wake up and fork a second
    monitor that takes the attempt's exit record (the job failed as 'start_failed')."""
    monkeypatch.setattr(spawn, "SERVER_ANSWER_TIMEOUT", 0.3)
    starter = spawn.MonitorStarter()
    starter.start_server()
    try:
        server = wait_for(server_pid, what="the fork server")
    except BaseException:
        starter.close()  # not left for the garbage collector to find running in a later test
        raise
    os.kill(server, signal.SIGSTOP)

    def wake() -> None:  # after trainqd gave up on it, while it would still be reaped
        with contextlib.suppress(ProcessLookupError):
            os.kill(server, signal.SIGCONT)

    code = "import time; print('trainer ran', flush=True); time.sleep(1)"
    waker = threading.Timer(0.8, wake)
    try:
        with attempt_of(python(code)) as attempt:
            waker.start()
            started = starter.start(attempt.launch)
            assert started.popen is not None  # from nothing
            record = wait_for(attempt.record, timeout=15, what="the exit record")
            assert (record.outcome, record.reason) == ("exited", None)
            assert attempt.stdout() == "trainer ran\n"
            assert started.popen.wait(10) == 0
    finally:
        waker.join()
        starter.close()
