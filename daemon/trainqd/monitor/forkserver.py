"""The monitor fork server: one process with everything a monitor runs already imported,
forking a monitor for each attempt.

Python's start-up and the monitor's imports take 25-60 ms on a busy 2-core machine, which is
more than the whole dispatch budget; a fork of a process that has them done takes about a
millisecond. trainqd starts the server once (`python -S -I ... --fork-server`, stdin a
socket), and for each attempt sends it the launch memfd and the attempt's monitor.log with
SCM_RIGHTS; the server forks, answers with the child's pid, and the child becomes the
attempt's monitor in a session of its own. trainqd watches it through a pidfd, as it does a
monitor it found again after a restart; the server reaps it.

The server holds no job's state. It exits when trainqd closes its end of the socket, and
the monitors it forked go on without it (they are re-parented to init, as any orphan), so a
daemon restart or a killed server costs no running attempt. It starts with SIGTERM, SIGINT
and SIGHUP blocked (spawn.py), which its children inherit until their handlers are set;
a child starts with no signal pending.
"""

from __future__ import annotations

import gc
import os
import signal
import socket
from typing import TYPE_CHECKING

from trainqd.monitor import mlroot as _mlroot  # noqa: F401

# Imported here, before any fork, so that no forked monitor or feeder pays for it.
from trainqd.monitor.feed import feeder as _feeder  # noqa: F401
from trainqd.monitor.launched import run_from_stdin
from trainqd.monitor.profile import mark
from trainqd.monitor.spawn import LAUNCH_MESSAGE, PID

if TYPE_CHECKING:
    from types import FrameType


def _reap(signum: int, frame: FrameType | None) -> None:
    """The monitors are the server's children: no zombie may stay once one exits."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def become_monitor(launch_fd: int, log_fd: int) -> int:
    """In the forked child: the attempt's monitor, as if started with the launch on stdin."""
    os.setsid()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for target, fd in ((1, log_fd), (2, log_fd), (0, launch_fd)):
        os.dup2(fd, target)
    os.close(log_fd)
    os.close(launch_fd)
    mark("forked")
    return run_from_stdin()


def serve(sock_fd: int) -> int:
    """Fork a monitor for every launch that arrives on `sock_fd`, until trainqd lets go."""
    signal.signal(signal.SIGCHLD, _reap)
    sock = socket.socket(fileno=sock_fd)
    # Everything imported so far is for good: out of the collector's sight, a forked monitor
    # neither spends milliseconds walking it nor dirties (copies) its pages doing so.
    gc.freeze()
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(sock, 16, 2)
        except ConnectionResetError:
            return 0  # trainqd died with an answer of ours unread: it let go all the same
        if not message:
            return 0  # trainqd closed its end: it stopped, or restarts the server
        if message != LAUNCH_MESSAGE or len(fds) != 2:
            for fd in fds:
                os.close(fd)
            continue
        launch_fd, log_fd = fds
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                sock.close()
                status = become_monitor(launch_fd, log_fd)
            finally:
                mark("exit")
                os._exit(status)
        os.close(launch_fd)
        os.close(log_fd)
        try:
            sock.sendall(PID.pack(pid))
        except (BrokenPipeError, ConnectionResetError):
            return 0  # trainqd died before the answer (the monitor runs on; a later one finds it)
