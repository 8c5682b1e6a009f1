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

The monitor alone ends its attempt, but a subprocess job's monitor runs as the job's owner,
who can freeze it (SIGSTOP), and a container job's waits for a child of the owner's. So
trainqd keeps, for each monitor, when the attempt must have ended at the latest: a stop's
grace (or the time limit and the grace) plus `end_margin_seconds`. A monitor still alive
then is treated as lost: trainqd kills it, and the attempt ends as the stop asked (stopped,
timed out, preempted) with the reason, after the clean-up of a lost attempt (endings.py):
its cgroup killed, its container removed through the engine. A stop made while no trainqd
ran is found again by its stop file, which only trainqd writes.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import select
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
from trainq.core.outcomes import REASON_CHARS, ExitRecord, Outcome
from trainqd.monitor import cgroup, procfs, spawn
from trainqd.monitor.outcome import read_stop_request
from trainqd.monitor.records import (
    EXIT_RECORD,
    Launch,
    MonitorInfo,
    StopOrder,
    atomic_write_json,
    deadline_path,
    parse_exit_record,
    parse_monitor_info,
    read_json,
)
from trainqd.observe.profiling import mark
from trainqd.store import DISK_FULL_MESSAGE

log = structlog.get_logger("trainqd.watcher")

# The longest the enforcement sleeps: a wall-clock step is noticed within this.
ENFORCE_RECHECK = 30.0

StopCause = Literal["user", "time_limit", "preempt"]
# What an attempt trainqd ended itself is recorded as, for each cause of its stop.
FORCED_OUTCOMES: dict[StopCause, Outcome] = {
    "user": Outcome.STOPPED,
    "time_limit": Outcome.TIMED_OUT,
    "preempt": Outcome.PREEMPTED,
}
_CAUSE_WORDS: dict[StopCause, str] = {
    "user": "its stop",
    "time_limit": "its time limit",
    "preempt": "its preemption",
}


class OnEnd(Protocol):
    """The scheduler's hearing of a monitor's end. `forced`: trainqd killed the monitor
    (its end was overdue), so anything of the attempt may live on."""

    def __call__(
        self, job_id: int, attempt: int, record: ExitRecord | None, /, *, forced: bool = False
    ) -> Awaitable[None]: ...


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
    # When the attempt must have ended (time.time()), and why: a stop's or the time limit's
    # grace plus the margin. None: nothing asked it to end yet.
    end_due: float | None = None
    due_cause: StopCause | None = None
    due_grace: float = 0.0
    # Set once trainqd has killed the monitor for being overdue: the record it ends with.
    forced: ExitRecord | None = None

    def expect_end(self, at: float, cause: StopCause, grace: float) -> None:
        """The attempt must have ended by `at`; an earlier due stays (a stop can shorten
        the wait for its end, never lengthen it), with its cause, as the monitor keeps the
        first stop's."""
        if self.end_due is None or at < self.end_due:
            if self.due_cause is None or self.due_cause == "time_limit":
                self.due_cause = cause
            self.end_due, self.due_grace = at, grace


@dataclass(frozen=True)
class FoundMonitor:
    """What trainqd recorded of a monitor a previous trainqd started, for `Watcher.attach`
    to watch it again: its pid, start time and boot, and the attempt's time limit as it
    stands now (`deadline`, None: none) and stop grace."""

    job_id: int
    attempt: int
    pid: int
    start_ticks: int | None
    boot_id: str | None
    attempt_dir: Path
    stop_file: Path
    deadline: float | None
    grace: float


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
            Outcome.LOST,
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


def forced_record(monitor: WatchedMonitor, margin: float, now: float) -> ExitRecord:
    """How an attempt trainqd ended itself is recorded: as its stop asked, with why."""
    cause = monitor.due_cause or "user"
    return ExitRecord(
        monitor.job_id,
        monitor.attempt,
        FORCED_OUTCOMES[cause],
        None,
        now,
        reason=(
            f"its monitor did not end the attempt within the {monitor.due_grace:g} s grace "
            f"of {_CAUSE_WORDS[cause]} and {margin:g} s more: trainqd ended it"
        )[:REASON_CHARS],
    )


def _has_exited(pidfd: int) -> bool:
    """Whether the process of `pidfd` has exited (the pidfd is then readable)."""
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    return bool(poller.poll(0))


class Watcher(Protocol):
    """Starts monitors, watches each until it ends (then calls the scheduler's `on_end`),
    and relays stops to them."""

    boot_id: str

    def close(self) -> None: ...

    def start(self, launch: Launch, attempt_dir: Path, stop_file: Path) -> WatchedMonitor: ...

    def attach(self, found: FoundMonitor) -> WatchedMonitor | None: ...

    def request_stop(
        self, job_id: int, grace: float, reason: StopCause, requested_by: int | None
    ) -> bool: ...

    def set_deadline(self, job_id: int, deadline: float | None) -> bool: ...


WatcherFactory = Callable[[TaskGroup, OnEnd], Watcher]


class MonitorWatcher:
    def __init__(self, task_group: TaskGroup, on_end: OnEnd, *, margin: float = 90.0) -> None:
        """`margin`: how long past its grace a stop or a time limit waits for the monitor
        before trainqd ends the attempt itself (config's end_margin_seconds)."""
        self._tg = task_group
        self._on_end = on_end
        self.margin = margin
        self.boot_id = procfs.boot_id()
        self.monitors: dict[int, WatchedMonitor] = {}
        self._due_changed = anyio.Event()
        self.starter = spawn.MonitorStarter()
        self.starter.start_server()
        task_group.start_soon(self._enforce, name="ends of overdue attempts")

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
        if launch.deadline is not None:
            grace = launch.stop_grace_seconds
            monitor.expect_end(launch.deadline + grace + self.margin, "time_limit", grace)
        self._watch(monitor)
        return monitor

    def attach(self, found: FoundMonitor) -> WatchedMonitor | None:
        """Watch a monitor that outlived a previous trainqd, if it is still that monitor,
        and hold it to its time limit (`deadline`, with `grace`) and to any stop it was
        given before."""
        if found.boot_id != self.boot_id or found.start_ticks is None:
            return None
        try:
            pidfd = os.pidfd_open(found.pid)
        except (ProcessLookupError, PermissionError):
            return None
        # Checked after the pidfd is open: from here on it cannot come to mean another process.
        if not procfs.is_same_process(
            found.pid, found.start_ticks, found.boot_id
        ) or outside_attempt_cgroup(found.pid, found.attempt_dir, found.job_id, found.attempt):
            os.close(pidfd)
            return None
        monitor = WatchedMonitor(
            found.job_id,
            found.attempt,
            found.pid,
            found.start_ticks,
            found.attempt_dir,
            found.stop_file,
            None,
            pidfd,
        )
        grace = found.grace
        if found.deadline is not None:
            monitor.expect_end(found.deadline + grace + self.margin, "time_limit", grace)
        self._stop_given_before(monitor, grace)
        self._watch(monitor)
        return monitor

    def _stop_given_before(self, monitor: WatchedMonitor, grace: float) -> None:
        """A stop a previous trainqd gave: its stop file, written by trainqd alone, says
        its grace and cause, and its time of change when it was given."""
        try:
            given = os.stat(monitor.stop_file).st_mtime
        except OSError:
            return
        asked, cause = read_stop_request(str(monitor.stop_file), grace)
        match cause:
            case "user" | "time_limit" | "preempt":
                monitor.expect_end(given + asked + self.margin, cause, asked)
            case _:  # unreadable: not a stop trainqd gave
                pass

    def _watch(self, monitor: WatchedMonitor) -> None:
        self.monitors[monitor.job_id] = monitor
        self._tg.start_soon(self._wait, monitor, name=f"monitor of job {monitor.job_id}")
        self._due_changed.set()

    async def _wait(self, monitor: WatchedMonitor) -> None:
        assert monitor.pidfd is not None
        try:
            await anyio.wait_readable(monitor.pidfd)
            mark("monitor exit seen", monitor.job_id)
        finally:
            # Cancelled at shutdown: the monitor goes on without us, and the next trainqd
            # finds it again.
            os.close(monitor.pidfd)
            monitor.pidfd = None
        if monitor.popen is not None:
            monitor.popen.wait()  # it has exited: this only reaps it
        self.monitors.pop(monitor.job_id, None)
        if monitor.forced is not None:
            # Whatever its attempt directory holds now, the job's owner could have written.
            await self._on_end(monitor.job_id, monitor.attempt, monitor.forced, forced=True)
            return
        record = read_exit_record(monitor.attempt_dir, monitor.job_id, monitor.attempt)
        mark("exit record read", monitor.job_id)
        await self._on_end(monitor.job_id, monitor.attempt, record)

    async def _enforce(self) -> None:
        """End, by killing its monitor, each attempt still running past its end's due."""
        while True:
            now = time.time()
            for monitor in list(self.monitors.values()):
                due = monitor.end_due
                if monitor.forced is None and due is not None and due <= now:
                    self._force(monitor, now)
            soonest = min(
                (
                    m.end_due
                    for m in self.monitors.values()
                    if m.forced is None and m.end_due is not None
                ),
                default=math.inf,
            )
            with anyio.move_on_after(min(max(0.0, soonest - now), ENFORCE_RECHECK)):
                await self._due_changed.wait()
            self._due_changed = anyio.Event()

    def _force(self, monitor: WatchedMonitor, now: float) -> None:
        """The monitor did not end its attempt in time: kill it; its end (`_wait`) is then
        the attempt's, recorded as the stop asked, after a lost attempt's clean-up."""
        if monitor.pidfd is None or _has_exited(monitor.pidfd):
            monitor.end_due = None  # it has ended by itself: its own end is on its way
            return
        monitor.forced = forced_record(monitor, self.margin, now)
        log.warning(
            "a monitor did not end its attempt in time: ending it",
            job_id=monitor.job_id,
            attempt=monitor.attempt,
            monitor=monitor.pid,
            cause=monitor.due_cause,
        )
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(monitor.pidfd, signal.SIGKILL)

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
        monitor.expect_end(time.time() + grace + self.margin, reason, grace)
        self._due_changed.set()
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
