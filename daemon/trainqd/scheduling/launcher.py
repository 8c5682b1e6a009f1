"""Start an attempt the plan decided on: look up what it runs, build its launch, start its
monitor, record it. Any failure to start is the attempt's (recorded as `start_failed`),
never the daemon's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

import structlog

from trainq.core.errors import DiskFull
from trainq.core.nodes import is_gang, layout
from trainq.core.states import ACTIVE, JobState
from trainqd.access.identity import job_account
from trainqd.attempts import loopback
from trainqd.attempts.contract import Assignment
from trainqd.attempts.jobdir import JobDirs
from trainqd.attempts.launch import (
    Attempt,
    LaunchSettings,
    build_launch,
    look_up,
    remaining_runtime,
    write_env_file,
)
from trainqd.attempts.nodes import build_gang
from trainqd.attempts.snapshots import as_run
from trainqd.attempts.watcher import Watcher
from trainqd.gpus.base import GpuDevice
from trainqd.observe.profiling import mark
from trainqd.planning import planner
from trainqd.scheduling.endings import AttemptEnds
from trainqd.scheduling.outcomes import time_limit_reason
from trainqd.store import JobRow, Store

log = structlog.get_logger("trainqd.launcher")


def stopped_out_of_time(store: Store, job: JobRow, now: float) -> bool:
    """Stop a job whose earlier attempts used up its time limit, instead of starting it."""
    remaining = remaining_runtime(job)
    if remaining is None or remaining > 0:
        return False
    store.transition(
        job.id,
        JobState.STOPPED,
        now,
        "time limit",
        stop_reason=time_limit_reason(job),
        ended_at=now,
    )
    return True


class Launcher:
    def __init__(
        self,
        *,
        store: Store,
        dirs: JobDirs,
        devices: Mapping[int, GpuDevice],
        settings: LaunchSettings,
        watcher: Callable[[], Watcher],
        ends: AttemptEnds,
        deadlines: dict[int, float],
        notify: Callable[[], None],
        changed: Callable[[], None],
        dispatched: Callable[[float], None] = lambda seconds: None,
    ) -> None:
        """`dispatched(seconds)`: told each start's time from plan to running monitor (the
        metrics' dispatch latency)."""
        self._store = store
        self._dirs = dirs
        self._devices = devices
        self._settings = settings
        self._watcher = watcher
        self._ends = ends
        self._deadlines = deadlines
        self._notify = notify
        self._changed = changed
        self._dispatched = dispatched

    def launch(self, start: planner.Start, now: float) -> None:
        """DiskFull if the start cannot be recorded: the job then stays PENDING."""
        job = self._store.get(start.job_id)
        mark("launching", job.id)
        if stopped_out_of_time(self._store, job, now):
            self._changed()
            return
        uuids = [self._devices[i].uuid for i in start.gpus]
        job, number = self._store.begin_attempt(job.id, start.gpus, uuids, now)
        job = as_run(job, self._dirs)  # a snapshot of its source, where it has one
        self._notify()
        mark("attempt recorded", job.id)
        bound = log.bind(job_id=job.id, attempt=number)
        watcher = self._watcher()
        try:
            acct = job_account(job.owner)
            gang = [node.name for node in layout(job.spec)] if is_gang(job.spec) else []
            # A gang's monitor is root's, as a container job's is (monitor/gang.py).
            paths = self._dirs.create_attempt(
                job.id,
                number,
                acct.uid,
                acct.gid,
                monitor_is_owner=job.spec.image is None and not gang,
            )
            if gang:
                owned = job.spec.image is None  # a container node's monitor stays root
                self._dirs.create_nodes(paths, gang, acct.uid, acct.gid, owned)
            mark("directories made", job.id)
            attempt = Attempt(
                job,
                number,
                Assignment(start.gpus, tuple(uuids)),
                acct,
                paths,
                self._settings,
                look_up(job, self._settings),
            )
            if gang:
                roots = {name: self._dirs.node_ml_root(job.id, name) for name in gang}
                block = None
                if job.spec.image is None and not attempt.host.as_root:
                    running = self._store.jobs(list(ACTIVE))
                    block = loopback.allocate(self._dirs, job.id, number, running)
                built = build_gang(attempt, now, roots, block)
            else:
                built = build_launch(attempt, now)
            for env_file in (built.env_file, *built.more_env_files):
                if env_file is not None:
                    write_env_file(*env_file)
            launch = built.launch
            mark("launch built", job.id)
            monitor = watcher.start(launch, paths.attempt_dir, paths.stop_file)
            mark("monitor forked", job.id)
        except Exception as exc:  # any failure to start is this attempt's, never the daemon's
            bound.exception("could not start the attempt")
            self._ends.start_failed(
                job.id, number, now, f"trainq could not start the attempt: {exc}"
            )
            return
        try:
            self._store.record_monitor(
                job.id, number, monitor.pid, monitor.start_ticks, watcher.boot_id
            )
        except DiskFull:  # the trainer runs: a later trainqd finds its monitor's own record
            bound.warning("disk full: the monitor's pid is not recorded", monitor=monitor.pid)
        if launch.deadline is not None:  # the monitor enforces it; the planner reckons with it
            self._deadlines[job.id] = launch.deadline
        bound.info("started", gpus=list(start.gpus), monitor=monitor.pid)
        self._dispatched(time.time() - now)
