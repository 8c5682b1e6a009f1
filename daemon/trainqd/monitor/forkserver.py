"""The monitor fork server: one process with everything a monitor runs already imported,
forking a monitor for each attempt.

Python's start-up and the monitor's imports take 25-60 ms on a busy 2-core machine, which is
more than the whole dispatch budget; a fork of a process that has them done takes about a
millisecond. trainqd starts the server once (`python -S -I ... --fork-server`, stdin a
socket), and for each attempt sends it the launch memfd and the attempt's monitor.log with
SCM_RIGHTS; the server forks, answers with the child's pid, and the child becomes the
attempt's monitor in a session of its own. trainqd watches it through a pidfd, as it does a
monitor it found again after a restart; the server reaps it.

As root on a host with the devices cgroup v1 (a hybrid one), the server moves itself into
the devices cgroup of the launch's set of GPUs (devices.py) when it is not there already,
so the monitor is born there too; any other launch's monitor is forked in the server's own.

As root, the server makes the attempt's cgroup (cgroup.py; the launch names the attempt)
and forks the monitor straight into it (cgroupfork.py): the monitor runs no instruction
outside it, and pays for no migration (7-20 ms). Before the first such fork it forks one
child into a scratch cgroup and checks that it lives: where that cannot be done (no
clone3, no CLONE_INTO_CGROUP, a seccomp profile, a kernel that kills the child), and where
one attempt's cgroup cannot be made, the server says so in one line on its stderr (the
journal), forks with os.fork, and the monitor moves itself in, as one started from nothing
does. A personal trainqd's server (not root: no cgroup) always uses os.fork.

The server holds no job's state. It exits when trainqd closes its end of the socket, and
the monitors it forked go on without it (they are re-parented to init, as any orphan), so a
daemon restart or a killed server costs no running attempt. It starts with SIGTERM, SIGINT
and SIGHUP blocked (spawn.py), which its children inherit until their handlers are set;
a child starts with no signal pending.
"""

from __future__ import annotations

import contextlib
import gc
import os
import select
import signal
import socket
from typing import TYPE_CHECKING

from trainqd.monitor import cgroup, cgroupfork, device_filter, devices
from trainqd.monitor import mlroot as _mlroot  # noqa: F401

# Imported here, before any fork, so that no forked monitor or feeder pays for it.
from trainqd.monitor.feed import feeder as _feeder  # noqa: F401
from trainqd.monitor.launched import run_from_stdin
from trainqd.monitor.log import log
from trainqd.monitor.profile import mark
from trainqd.monitor.records import Launch
from trainqd.monitor.spawn import LAUNCH_MESSAGE, PID

PROBE_WAIT = 2.0

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


class Forker:
    """Forks monitors: into their attempt's cgroup where it can, with os.fork otherwise."""

    def __init__(self) -> None:
        self.root = os.geteuid() == 0
        self.into_cgroups = self.root
        self.probed = False
        self.home: str | None = None
        # The devices cgroup v1 the server started in, and the set of GPUs whose devices
        # cgroup it is in now (None: its own).
        self.v1_home = devices.own_v1_cgroup() if self.root and devices.v1_available() else None
        self.v1_set: frozenset[int] | None = None
        self.v1_made: set[frozenset[int]] = set()  # whose rules this server wrote

    def fork(self, launch_fd: int) -> int:
        """os.fork's answer; the child born in the attempt's cgroup where it could be."""
        launch = _launch_of(launch_fd) if self.root else None
        target = None
        if launch is not None:
            _preload_device_programs(launch)
            self._devices_v1(launch)
            if self.into_cgroups:
                target = self._attempt_cgroup(launch)
        if target is None:
            return os.fork()
        try:
            return cgroupfork.fork_into(target)
        except cgroupfork.Unavailable as exc:
            self._refused(exc, "this time")
            return os.fork()
        finally:
            os.close(target)

    def _devices_v1(self, launch: Launch) -> None:
        """Be in the devices cgroup v1 of the launch's set of GPUs (a subprocess job of one
        node), so that its monitor is forked there and need not move (a migration waits out
        an RCU grace period); in the server's own for any other launch. The move is the
        server's, and only when the set differs from the last launch's."""
        if self.v1_home is None:
            return
        want = None
        if launch.runtime == "subprocess" and not launch.nodes:
            with contextlib.suppress(OSError, LookupError, ValueError):
                want = frozenset(devices.job_minors(launch.env))
        if want == self.v1_set:
            return
        try:
            if want is None:
                path = devices.V1_DEVICES + self.v1_home
            elif want in self.v1_made:
                path = devices.V1_DEVICES + devices.set_cgroup_name(set(want))
            else:
                path = devices.make_set_cgroup(set(want))  # 254 writes: once per server
                self.v1_made.add(want)
            with open(os.path.join(path, "cgroup.procs"), "w", encoding="ascii") as f:
                f.write("0")
        except OSError as exc:
            # Where the server stays, a monitor finds itself in no cgroup of its set's, and
            # makes and enters one of its own.
            log(f"fork server: cannot use {exc.filename}: {exc.strerror}")
            if want is not None:
                self.v1_made.discard(want)  # made again next time (removed meanwhile?)
            return
        self.v1_set = want

    def _refused(self, exc: cgroupfork.Unavailable, when: str) -> None:
        if exc.lasting:
            self.into_cgroups = False
            when = "from now on"
        log(f"fork server: {exc}: monitors move into their cgroup themselves {when}")

    def _attempt_cgroup(self, launch: Launch) -> int | None:
        """The attempt's cgroup, made now and open (O_DIRECTORY); None where it cannot be."""
        try:
            if self.home is None:  # the server's cgroup v2: it never moves there
                self.home = cgroup.own_cgroup_dir()
            path = cgroup.make_attempt(launch.ml_root, launch.job_id, launch.attempt, self.home)
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except cgroup.Unavailable as exc:
            log(f"fork server: {exc}")
            return None
        except OSError as exc:
            log(f"fork server: cannot open the attempt's cgroup: {exc.strerror}")
            return None
        if not self.probed:
            self.probed = True
            self._probe(os.path.dirname(path))
            if not self.into_cgroups:
                os.close(fd)
                return None
        return fd

    def _probe(self, subtree: str) -> None:
        """Fork a child that exits at once into a scratch cgroup beside the attempts'; it
        must exit, not be killed: a kernel may kill a child cloned into a cgroup whose kill
        count differs from its parent's (Linux 6.18 here compares the two)."""
        path = os.path.join(subtree, f"{cgroup.PROBE_PREFIX}{os.getpid()}")
        held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})  # ours to reap
        try:
            os.mkdir(path)
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                pid = cgroupfork.fork_into(fd)
                if pid == 0:
                    os._exit(0)
            finally:
                os.close(fd)
            status = _wait_briefly(pid)
            if status != 0:
                self._refused(
                    cgroupfork.Unavailable(
                        f"a child cloned into a cgroup ended with status {status:#x}",
                        lasting=True,
                    ),
                    "",
                )
        except cgroupfork.Unavailable as exc:
            self._refused(exc, "")
        except OSError as exc:
            self._refused(cgroupfork.Unavailable(f"{path}: {exc.strerror}", lasting=True), "")
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
            with contextlib.suppress(OSError):
                os.rmdir(path)


def _launch_of(launch_fd: int) -> Launch | None:
    try:
        return Launch.from_json(_read_at_start(launch_fd))
    except (OSError, ValueError, TypeError, KeyError):
        return None  # the monitor says what is wrong with it, into its log


def _preload_device_programs(launch: Launch) -> None:
    """Load the device program each of the launch's monitors will attach (devices.py), if
    it is not loaded yet; a set that cannot be is left to its monitor, which says why."""
    for each in launch.nodes or [launch]:
        if each.runtime == "subprocess":
            try:
                minors = devices.job_minors(each.env) | devices.CONTROL_MINORS
                device_filter.preload(devices.NVIDIA_MAJOR, minors)
            except (OSError, LookupError, ValueError, device_filter.FilterUnavailable):
                pass


def _wait_briefly(pid: int) -> int:
    """The wait status of a child that should exit at once; one still there after a
    moment (frozen with its cgroup) is killed (a fatal signal ends a frozen process)."""
    pidfd = os.pidfd_open(pid)
    try:
        if not select.select([pidfd], [], [], PROBE_WAIT)[0]:
            os.kill(pid, signal.SIGKILL)
    finally:
        os.close(pidfd)
    return os.waitpid(pid, 0)[1]


def _read_at_start(fd: int) -> bytes:
    """The whole launch, read without moving the file offset the monitor reads it from."""
    chunks, offset = [], 0
    while chunk := os.pread(fd, 1 << 16, offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def serve(sock_fd: int) -> int:
    """Fork a monitor for every launch that arrives on `sock_fd`, until trainqd lets go."""
    signal.signal(signal.SIGCHLD, _reap)
    sock = socket.socket(fileno=sock_fd)
    # Everything imported so far is for good: out of the collector's sight, a forked monitor
    # neither spends milliseconds walking it nor dirties (copies) its pages doing so.
    gc.freeze()
    forker = Forker()
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
        pid = forker.fork(launch_fd)
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
