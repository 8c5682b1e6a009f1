"""At start-up, take over what a previous trainqd left running (docs/architecture.md).

Attempts that ended while no trainqd ran get the exit their monitor recorded; live monitors
are watched again (their GPUs stay theirs); attempts whose monitor vanished are cleaned up
and retried.
"""

from __future__ import annotations

import structlog

from trainq.core.states import ACTIVE
from trainqd.attempts.jobdir import JobDirs
from trainqd.attempts.launch import remaining_runtime, stop_grace
from trainqd.attempts.watcher import (
    FoundMonitor,
    Watcher,
    read_exit_record,
    read_monitor_info,
)
from trainqd.scheduling.endings import AttemptEnds
from trainqd.store import Store

log = structlog.get_logger("trainqd.reconcile")


async def reconcile(
    *,
    store: Store,
    dirs: JobDirs,
    watcher: Watcher,
    ends: AttemptEnds,
    deadlines: dict[int, float],
    default_grace: float,
) -> None:
    for job in store.jobs(list(ACTIVE)):
        number = job.attempt_count
        attempt = store.attempt(job.id, number)
        if attempt is None or attempt.ended_at is not None:
            log.error("active job without an open attempt", job_id=job.id)
            continue
        attempt_dir = dirs.attempt_dir(job.id, number)
        # A live monitor is watched again whatever its directory holds: an exit record is
        # only the monitor's word once the monitor has ended (the trainer could write one).
        pid, start, boot = attempt.monitor_pid, attempt.monitor_start, attempt.boot_id
        if pid is None:  # not recorded (a full disk): the monitor's record, never the owner's
            info = read_monitor_info(dirs.monitor_info_file(job.id, number))
            if info is not None:
                pid, start, boot = info.monitor_pid, info.monitor_start, info.boot_id
        monitor = None
        remaining = remaining_runtime(job)
        deadline = None if remaining is None else attempt.started_at + remaining
        if pid is not None:
            # The watcher holds it to its time limit and to a stop given before, as it
            # holds the monitors it starts.
            found = FoundMonitor(
                job.id,
                attempt=number,
                pid=pid,
                start_ticks=start,
                boot_id=boot,
                attempt_dir=attempt_dir,
                stop_file=dirs.stop_file(job.id, number),
                deadline=deadline,
                grace=stop_grace(job, default_grace),
            )
            monitor = watcher.attach(found)
        if monitor is not None:
            if deadline is not None:  # the monitor enforces it; the planner reckons with it
                deadlines[job.id] = deadline
            log.info("re-attached", job_id=job.id, attempt=number, monitor=pid)
            continue
        record = read_exit_record(attempt_dir, job.id, number)
        if record is None:
            log.info("attempt lost while trainqd was down", job_id=job.id, attempt=number)
        else:
            log.info("attempt ended while trainqd was down", job_id=job.id, attempt=number)
        await ends.clean_up(job, number, record)
        ends.record(job.id, number, record)
