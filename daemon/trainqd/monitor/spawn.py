"""trainqd's side of starting a monitor (standard library only, like the monitor).

The monitor is started as `python -S -I -c BOOT`: no site, no user site, no PYTHON*
variables, no current directory on the path, so nothing the environment holds can change
what it runs. BOOT puts the directories that hold the `trainqd` and `trainq` packages first
on the path (the source tree for an editable install, site-packages for a normal one) and
calls the monitor's entry.

The launch goes in on stdin as a memfd: never a file in a directory the owner could write.
The monitor starts in a session of its own, so it outlives trainqd, and with SIGTERM,
SIGINT and SIGHUP blocked until it has its handlers: a stop sent at once is kept pending,
never fatal.

Python's start-up and the monitor's imports take 25-60 ms on a busy 2-core machine, more than
the whole dispatch budget, so `MonitorStarter` forks monitors from a fork server
(forkserver.py) started once, and starts one from nothing only when the server cannot be
had.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import struct
import subprocess
import sys
from dataclasses import dataclass

import trainq.core.outcomes
from trainqd.monitor.devices import NO_V1_ENV
from trainqd.monitor.profile import PROFILE_ENV
from trainqd.monitor.records import MONITOR_LOG, Launch

# The fork server's protocol (forkserver.py imports the monitor itself, which trainqd need
# not do): a launch is this message with two descriptors; the answer is the child's pid.
LAUNCH_MESSAGE = b"L"
PID = struct.Struct("=i")

_PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The monitor also reads the one standard-library module of trainq's shared vocabulary it
# needs (trainq.core.outcomes); with an editable install that package sits elsewhere.
_CORE_PARENT = os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(trainq.core.outcomes.__file__)))
)
_BOOT_PATH = list(dict.fromkeys([_PACKAGE_PARENT, _CORE_PARENT]))
_HELD_SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
# The monitor's own environment: it passes each child an environment of its own (the
# launch's), so none of trainqd's needs to reach it.
_MONITOR_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
# But this, from trainqd's own environment: tests leave the devices cgroup v1 out with it, to
# see the eBPF device program confine a job alone.
if os.environ.get(NO_V1_ENV) == "1":
    _MONITOR_ENV[NO_V1_ENV] = "1"
# And the switch of the dispatch profile's marks (profile.py).
if os.environ.get(PROFILE_ENV) == "1":
    _MONITOR_ENV[PROFILE_ENV] = "1"


FORK_SERVER_FLAG = "--fork-server"
# Forking answers in a millisecond; a server that does not answer in this long is stuck.
SERVER_ANSWER_TIMEOUT = 5.0


def monitor_argv(fork_server: bool = False) -> list[str]:
    boot = (
        f"import sys; sys.path[:0] = {_BOOT_PATH!r}; "
        "from trainqd.monitor.__main__ import main, exit_now; exit_now(main())"
    )
    return [sys.executable, "-S", "-I", "-c", boot, *([FORK_SERVER_FLAG] if fork_server else [])]


def _launch_memfd(launch: Launch) -> int:
    fd = os.memfd_create("trainq-launch", os.MFD_CLOEXEC)
    data = memoryview(launch.to_json())
    while data:
        data = data[os.write(fd, data) :]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _create_log(launch: Launch) -> int:
    path = os.path.join(launch.attempt_dir, MONITOR_LOG)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_APPEND | os.O_CLOEXEC
    fd = os.open(path, flags, 0o640)
    if os.geteuid() == 0:
        os.fchown(fd, launch.owner.uid, launch.owner.gid)
    return fd


def _popen(argv: list[str], stdin: int, stdout: int, stderr: int) -> subprocess.Popen[bytes]:
    # The mask is per thread and inherited through exec: only the monitor starts with
    # these signals held, and this thread holds them for the fork alone.
    held = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD_SIGNALS)
    try:
        return subprocess.Popen(
            argv,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            cwd="/",
            env=_MONITOR_ENV,
            start_new_session=True,
            close_fds=True,
        )
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def start_monitor(launch: Launch) -> subprocess.Popen[bytes]:
    """Start the monitor of one attempt from nothing. The caller reaps the Popen (it never
    blocks on it: the monitor lives as long as the trainer) and reads its pid."""
    log_fd = _create_log(launch)
    try:
        launch_fd = _launch_memfd(launch)
        try:
            return _popen(monitor_argv(), launch_fd, log_fd, log_fd)
        finally:
            os.close(launch_fd)
    finally:
        os.close(log_fd)


@dataclass(frozen=True)
class Started:
    """A monitor just started: its pid, and its Popen when trainqd is its parent (started from
    nothing) and so must reap it; a forked monitor is the fork server's to reap."""

    pid: int
    popen: subprocess.Popen[bytes] | None = None


class MonitorStarter:
    """Starts monitors: forked by the fork server, or from nothing when it cannot be had."""

    def __init__(self) -> None:
        self._server: tuple[subprocess.Popen[bytes], socket.socket] | None = None

    def start_server(self) -> None:
        """Start the fork server if it is not running (at trainqd's start: its imports are
        done by the time the first attempt comes)."""
        if self._server is not None:
            return
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        devnull = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
        try:
            # Its own errors (rare: it only forks) go to trainqd's stderr, the journal.
            popen = _popen(monitor_argv(fork_server=True), theirs.fileno(), devnull, 2)
        except OSError:
            ours.close()
            return
        finally:
            theirs.close()
            os.close(devnull)
        ours.settimeout(SERVER_ANSWER_TIMEOUT)
        self._server = (popen, ours)

    def start(self, launch: Launch) -> Started:
        self.start_server()
        if self._server is not None:
            pid = self._fork(self._server[1], launch)
            if pid is not None:
                return Started(pid)
            self._kill_server()  # a dead or stuck server: the next attempt gets a new one
        popen = start_monitor(launch)
        return Started(popen.pid, popen)

    def _fork(self, server: socket.socket, launch: Launch) -> int | None:
        """The pid of a monitor forked for `launch`; None if the server did not answer."""
        log_fd = _create_log(launch)
        try:
            launch_fd = _launch_memfd(launch)
            try:
                socket.send_fds(server, [LAUNCH_MESSAGE], [launch_fd, log_fd])
                answer = b""
                while len(answer) < PID.size:
                    chunk = server.recv(PID.size - len(answer))
                    if not chunk:
                        raise ConnectionError("the fork server went away")
                    answer += chunk
            finally:
                os.close(launch_fd)
        except OSError:
            # No monitor has the log yet: it goes, and a monitor from nothing makes its own.
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(launch.attempt_dir, MONITOR_LOG))
            return None
        finally:
            os.close(log_fd)
        pid: int = PID.unpack(answer)[0]
        return pid

    def _kill_server(self) -> None:
        """A server that did not answer may be stuck with the launch still in its queue: it
        is killed outright before the launch goes to a monitor started from nothing, so it
        can never wake up and fork a second monitor for the same attempt."""
        if self._server is not None:
            popen, sock = self._server
            self._server = None
            with contextlib.suppress(ProcessLookupError):
                popen.kill()
            popen.wait()
            sock.close()

    def close(self) -> None:
        """The server sees EOF and exits (its monitors go on); reaped here if it did."""
        if self._server is not None:
            popen, sock = self._server
            self._server = None
            sock.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                popen.wait(timeout=1)
            if popen.poll() is None:  # stuck: it holds no job, so it may go
                popen.kill()
                popen.wait()
