"""Monitors that never run: the `Watcher` of the in-process tests, as `gpus/fake.py` is the
GPU backend of tests without GPUs.

An attempt ends when its caller says so (`end`), or, as a real monitor's would, as
`timed_out` once its launch's deadline passes. Everything asked of it is kept (launches,
stops, deadlines) for the caller to check, and a restarted scheduler finds again only the
monitors it says are alive, on the same boot. `FakeWatchers` is the scheduler's
`WatcherFactory` for them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import anyio
from anyio.abc import TaskGroup

from trainq.core.outcomes import ExitRecord, Outcome
from trainqd.attempts.watcher import FoundMonitor, OnEnd, StopCause, WatchedMonitor, Watcher
from trainqd.monitor.records import Launch

FIRST_PID = 1000


@dataclass
class FakeWatcher:
    """A `trainqd.attempts.watcher.Watcher` whose monitors are numbers, not processes."""

    on_end: OnEnd
    task_group: TaskGroup
    boot_id: str = "boot-1"
    launches: dict[int, Launch] = field(default_factory=dict)
    watched: dict[int, int] = field(default_factory=dict)  # job id -> attempt number
    stops: list[tuple[int, float, StopCause]] = field(default_factory=list)
    deadlines: dict[int, float | None] = field(default_factory=dict)  # set_deadline's
    alive: set[int] = field(default_factory=set)  # pids `attach` finds again
    next_pid: int = FIRST_PID
    timed_out: anyio.Event = field(default_factory=anyio.Event)  # set once one timed out

    def close(self) -> None:
        pass

    def start(self, launch: Launch, attempt_dir: Path, stop_file: Path) -> WatchedMonitor:
        self.launches[launch.job_id] = launch
        self.watched[launch.job_id] = launch.attempt
        self.next_pid += 1
        self.alive.add(self.next_pid)
        if launch.deadline is not None:
            self.task_group.start_soon(self._time_out, launch)
        return WatchedMonitor(
            launch.job_id, launch.attempt, self.next_pid, 1, attempt_dir, stop_file
        )

    def attach(self, found: FoundMonitor) -> WatchedMonitor | None:
        if found.boot_id != self.boot_id or found.pid not in self.alive:
            return None
        self.watched[found.job_id] = found.attempt
        return WatchedMonitor(
            found.job_id,
            found.attempt,
            found.pid,
            found.start_ticks,
            found.attempt_dir,
            found.stop_file,
        )

    def request_stop(
        self, job_id: int, grace: float, reason: StopCause, requested_by: int | None
    ) -> bool:
        self.stops.append((job_id, grace, reason))
        return True

    def set_deadline(self, job_id: int, deadline: float | None) -> bool:
        self.deadlines[job_id] = deadline
        return job_id in self.watched

    async def end(self, job_id: int, outcome: Outcome, exit_code: int | None = None) -> None:
        """End the job's watched attempt with `outcome`, as its monitor's exit record would."""
        attempt = self.watched.pop(job_id)
        now = time.time()
        record = ExitRecord(job_id, attempt, outcome, now, now, exit_code=exit_code)
        await self.on_end(job_id, attempt, record)

    async def _time_out(self, launch: Launch) -> None:
        assert launch.deadline is not None
        await anyio.sleep(max(0.0, launch.deadline - time.time()))
        if self.watched.get(launch.job_id) == launch.attempt:
            await self.end(launch.job_id, Outcome.TIMED_OUT)
            self.timed_out.set()


@dataclass
class FakeWatchers:
    """Makes a `FakeWatcher` each time a scheduler starts, and keeps them all (the last is
    the running scheduler's); `alive`: the pids each one's `attach` finds again."""

    alive: set[int] = field(default_factory=set)
    made: list[FakeWatcher] = field(default_factory=list)

    def __call__(self, task_group: TaskGroup, on_end: OnEnd) -> Watcher:
        self.made.append(FakeWatcher(on_end, task_group, alive=set(self.alive)))
        return self.made[-1]
