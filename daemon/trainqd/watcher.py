"""trainqd's side of the monitors: start them, notice their end, relay stops, re-attach.

`Watcher` is what the scheduler needs of this; `MonitorWatcher` is the real one (a fake
stands in for it in the in-process tests).

A monitor is watched through a pidfd (readable once it exits), whether trainqd started it or
found it alive after a restart; pid numbers alone could have been reused, so a monitor found
again is trusted only if its start time and the boot id match what was recorded, and, where
the attempt has a cgroup, only if it is inside it. Its pid comes from trainqd's database or
from the record the monitor wrote as root beside the stop file, never from the attempt
directory, which the job's owner controls (docs/security.md). How the
attempt ended comes from the monitor's exit record; no record, or one that cannot be
trusted, means the attempt was lost.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

import anyio
import structlog
from anyio.abc import TaskGroup

from trainq.core.errors import DiskFull
from trainqd.monitor import cgroup, procfs, spawn
from trainqd.monitor.records import (
    EXIT_RECORD,
    REASON_CHARS,
    ExitRecord,
    Launch,
    MonitorInfo,
    StopOrder,
    atomic_write_json,
    deadline_path,
    parse_exit_record,
    parse_monitor_info,
    read_json,
)
from trainqd.store import DISK_FULL_MESSAGE

log = structlog.get_logger("trainqd.watcher")

OnEnd = Callable[[int, int, ExitRecord | None], Awaitable[None]]


@dataclass
class WatchedMonitor:
    job_id: int
    attempt: int
    pid: int
    start_ticks: int | None
    attempt_dir: Path
    stop_file: Path
    popen: subprocess.Popen[bytes] | None = None
    pidfd: int | None = field(default=None, repr=False)


def read_exit_record(attempt_dir: Path, job_id: int, attempt: int) -> ExitRecord | None:
    """How the attempt ended, from its monitor's record; None if there is none. The record
    lies where the job's owner may write, so one trainqd cannot accept (a link, a FIFO,
    overflowing numbers, another attempt's) ends the attempt as lost, with the reason."""
    try:
        raw = read_json(str(attempt_dir / EXIT_RECORD))
        return None if raw is None else parse_exit_record(raw, job_id, attempt)
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        log.warning("unreadable exit record", job_id=job_id, attempt=attempt, error=str(exc))
        return ExitRecord(
            job_id,
            attempt,
            "lost",
            None,
            time.time(),
            reason=f"the attempt's exit record was unreadable: {exc}"[:REASON_CHARS],
        )


def read_monitor_info(path: Path) -> MonitorInfo | None:
    """The monitor's own record of who it is (JobDirs.monitor_info_file); None if there is
    none or it is not what a monitor writes."""
    try:
        raw = read_json(str(path))
        return None if raw is None else parse_monitor_info(raw)
    except (OSError, ValueError, UnicodeDecodeError):
        return None


def outside_attempt_cgroup(pid: int, attempt_dir: Path, job_id: int, attempt: int) -> bool:
    """Whether the attempt has a cgroup and `pid` is not in it: then it is not the attempt's
    monitor, which moved itself there before it said who it is. No cgroup (no root, no v2
    tree) proves nothing either way."""
    ml_root = attempt_dir.parent.parent / "ml"  # jobdir.py's layout
    try:
        path = cgroup.attempt_path(str(ml_root), job_id, attempt)
    except cgroup.Unavailable:
        return False
    if not os.path.isdir(path):
        return False
    return pid not in cgroup.members(path)


StopCause = Literal["user", "time_limit", "preempt"]


class Watcher(Protocol):
    """Starts monitors, watches each until it ends (then calls the scheduler's `on_end`),
    and relays stops to them."""

    boot_id: str

    def close(self) -> None: ...

    def start(self, launch: Launch, attempt_dir: Path, stop_file: Path) -> WatchedMonitor: ...

    def attach(
        self,
        job_id: int,
        *,
        attempt: int,
        pid: int,
        start_ticks: int | None,
        boot_id: str | None,
        attempt_dir: Path,
        stop_file: Path,
    ) -> WatchedMonitor | None: ...

    def request_stop(
        self, job_id: int, grace: float, reason: StopCause, requested_by: int | None
    ) -> bool: ...

    def set_deadline(self, job_id: int, deadline: float | None) -> bool: ...


WatcherFactory = Callable[[TaskGroup, OnEnd], Watcher]


class MonitorWatcher:
    def __init__(self, task_group: TaskGroup, on_end: OnEnd) -> None:
        self._tg = task_group
        self._on_end = on_end
        self.boot_id = procfs.boot_id()
        self.monitors: dict[int, WatchedMonitor] = {}
        self.starter = spawn.MonitorStarter()
        self.starter.start_server()

    def close(self) -> None:
        self.starter.close()

    def start(self, launch: Launch, attempt_dir: Path, stop_file: Path) -> WatchedMonitor:
        started = self.starter.start(launch)
        monitor = WatchedMonitor(
            job_id=launch.job_id,
            attempt=launch.attempt,
            pid=started.pid,
            start_ticks=procfs.start_ticks(started.pid),
            attempt_dir=attempt_dir,
            stop_file=stop_file,
            popen=started.popen,
            pidfd=os.pidfd_open(started.pid),
        )
        self._watch(monitor)
        return monitor

    def attach(
        self,
        job_id: int,
        *,
        attempt: int,
        pid: int,
        start_ticks: int | None,
        boot_id: str | None,
        attempt_dir: Path,
        stop_file: Path,
    ) -> WatchedMonitor | None:
        """Watch a monitor that outlived a previous trainqd, if it is still that monitor."""
        if boot_id != self.boot_id or start_ticks is None:
            return None
        try:
            pidfd = os.pidfd_open(pid)
        except (ProcessLookupError, PermissionError):
            return None
        # Checked after the pidfd is open: from here on it cannot come to mean another process.
        if not procfs.is_same_process(pid, start_ticks, boot_id) or outside_attempt_cgroup(
            pid, attempt_dir, job_id, attempt
        ):
            os.close(pidfd)
            return None
        monitor = WatchedMonitor(
            job_id, attempt, pid, start_ticks, attempt_dir, stop_file, None, pidfd
        )
        self._watch(monitor)
        return monitor

    def _watch(self, monitor: WatchedMonitor) -> None:
        self.monitors[monitor.job_id] = monitor
        self._tg.start_soon(self._wait, monitor, name=f"monitor of job {monitor.job_id}")

    async def _wait(self, monitor: WatchedMonitor) -> None:
        assert monitor.pidfd is not None
        try:
            await anyio.wait_readable(monitor.pidfd)
        finally:
            # Cancelled at shutdown: the monitor goes on without us, and the next trainqd
            # finds it again.
            os.close(monitor.pidfd)
            monitor.pidfd = None
        if monitor.popen is not None:
            monitor.popen.wait()  # it has exited: this only reaps it
        self.monitors.pop(monitor.job_id, None)
        record = read_exit_record(monitor.attempt_dir, monitor.job_id, monitor.attempt)
        await self._on_end(monitor.job_id, monitor.attempt, record)

    def request_stop(
        self,
        job_id: int,
        grace: float,
        reason: StopCause,
        requested_by: int | None,
    ) -> bool:
        """Ask the job's monitor to stop its trainer; False if no monitor is watched."""
        monitor = self.monitors.get(job_id)
        if monitor is None:
            return False
        request = StopOrder(grace_seconds=grace, reason=reason, requested_by=requested_by)
        try:
            atomic_write_json(str(monitor.stop_file), request.__dict__)
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):  # asking again later will do
                raise DiskFull(DISK_FULL_MESSAGE) from None
            raise
        with contextlib.suppress(ProcessLookupError):
            if monitor.pidfd is not None:  # cannot reach a process that reused the pid
                signal.pidfd_send_signal(monitor.pidfd, signal.SIGTERM)
        return True

    def set_deadline(self, job_id: int, deadline: float | None) -> bool:
        """Move the running attempt's time limit (None: no limit): the deadline file first,
        then SIGHUP, on which the monitor reads it. False if no monitor is watched."""
        monitor = self.monitors.get(job_id)
        if monitor is None:
            return False
        path = deadline_path(str(monitor.stop_file.parent), monitor.attempt)
        try:
            atomic_write_json(path, {"deadline": deadline})
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise DiskFull(DISK_FULL_MESSAGE) from None
            raise
        with contextlib.suppress(ProcessLookupError):
            if monitor.pidfd is not None:
                signal.pidfd_send_signal(monitor.pidfd, signal.SIGHUP)
        return True
