"""trainqd's side of starting a monitor (standard library only, like the monitor).

The monitor is started as `python -S -I -c BOOT`: no site, no user site, no PYTHON*
variables, no current directory on the path, so nothing the environment holds can change
what it runs. BOOT puts the directory that holds the `trainqd` package first on the path
(the source tree for an editable install, site-packages for a normal one) and calls the
monitor's entry.

The launch goes in on stdin as a memfd: never a file in a directory the owner could write.
The monitor starts in a session of its own, so it outlives trainqd, and with SIGTERM,
SIGINT and SIGHUP blocked until it has its handlers: a stop sent at once is kept pending,
never fatal.

Python's start-up and the monitor's imports take 25-60 ms on a busy 2-core machine, more than
the whole dispatch budget, so `MonitorStarter` keeps *spare* monitors started ahead of
need: imports done, waiting on a socketpair (its stdin). Starting an attempt then hands it the
launch memfd and its monitor.log with SCM_RIGHTS, and a new spare is started for the next
one. A spare that loses trainqd (EOF on the socket) just exits.
"""

from __future__ import annotations

import collections
import contextlib
import os
import signal
import socket
import subprocess
import sys

from trainqd.monitor.records import MONITOR_LOG, Launch

_PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_HELD_SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
# The monitor's own environment: it passes each child an environment of its own (the
# launch's), so none of trainqd's needs to reach it.
_MONITOR_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}


SPARE_FLAG = "--spare"


def monitor_argv(spare: bool = False) -> list[str]:
    boot = (
        f"import sys; sys.path.insert(0, {_PACKAGE_PARENT!r}); "
        "from trainqd.monitor.__main__ import main, exit_now; exit_now(main())"
    )
    return [sys.executable, "-S", "-I", "-c", boot, *([SPARE_FLAG] if spare else [])]


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


def _popen(argv: list[str], stdin: int, output: int) -> subprocess.Popen[bytes]:
    # The mask is per thread and inherited through exec: only the monitor starts with
    # these signals held, and this thread holds them for the fork alone.
    held = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD_SIGNALS)
    try:
        return subprocess.Popen(
            argv,
            stdin=stdin,
            stdout=output,
            stderr=output,
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
            return _popen(monitor_argv(), launch_fd, log_fd)
        finally:
            os.close(launch_fd)
    finally:
        os.close(log_fd)


def _schedule(pid: int, *, idle: bool) -> None:
    """Put a spare in SCHED_IDLE, or back to the normal policy before it is handed an
    attempt. Only root may lift SCHED_IDLE, and it does so from here, so a machine busy with
    training cannot starve the hand-over; a personal trainqd leaves its spare as it is."""
    if os.geteuid() != 0:
        return
    policy = os.SCHED_IDLE if idle else os.SCHED_OTHER
    with contextlib.suppress(OSError):  # gone already: the hand-over will notice
        os.sched_setscheduler(pid, policy, os.sched_param(0))


Spare = tuple[subprocess.Popen[bytes], socket.socket]


class MonitorStarter:
    """Starts monitors, keeping `spares` warm (see the module's docstring). One is best on
    a 2-core machine: a second spare's start-up competes for the CPU with the attempts."""

    def __init__(self, spares: int = 1) -> None:
        self._wanted = spares
        self._spares: collections.deque[Spare] = collections.deque()

    @property
    def spare_pids(self) -> list[int]:
        """The waiting spares, the next to be handed an attempt first."""
        return [popen.pid for popen, _ in self._spares]

    def start(self, launch: Launch) -> tuple[subprocess.Popen[bytes], socket.socket | None]:
        """The attempt's monitor, and the socket on which it will say that its trainer has
        started (None for a monitor started cold). Call `refill` after that word (or at
        once when there is no socket), so the next spare does not slow this start."""
        while self._spares:  # the oldest first: it has had the longest to warm up
            popen, sock = self._spares.popleft()
            if self._hand_over(popen, sock, launch):
                return popen, sock
            sock.close()
        return start_monitor(launch), None

    def _hand_over(
        self, popen: subprocess.Popen[bytes], sock: socket.socket, launch: Launch
    ) -> bool:
        try:
            if popen.poll() is not None:
                return False
            _schedule(popen.pid, idle=False)
            log_fd = _create_log(launch)
            try:
                launch_fd = _launch_memfd(launch)
                try:
                    socket.send_fds(sock, [b"L"], [launch_fd, log_fd])
                finally:
                    os.close(launch_fd)
            finally:
                os.close(log_fd)
        except (BrokenPipeError, ConnectionError):
            # The spare died (killed by someone): the log it never opened goes, and another
            # spare or a cold monitor takes its place.
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(launch.attempt_dir, MONITOR_LOG))
            return False
        return True

    def refill(self) -> None:
        while len(self._spares) < self._wanted:
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            devnull = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
            try:
                popen = _popen(monitor_argv(spare=True), theirs.fileno(), devnull)
            except OSError:
                ours.close()
                return
            finally:
                theirs.close()
                os.close(devnull)
            # A spare warms up (Python's start, its imports) only on CPU nobody else wants:
            # it is started right as an attempt begins, and must not slow that start.
            _schedule(popen.pid, idle=True)
            self._spares.append((popen, ours))

    def close(self) -> None:
        """The spares see EOF and exit; each is reaped here if it already has."""
        while self._spares:
            popen, sock = self._spares.popleft()
            sock.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                popen.wait(timeout=1)
