"""The scheduler's loop: plans on every event and starts what the plan says
(docs/architecture.md).

It sleeps until something can change the plan: a submission, a stop, an attempt's end, a
retry's backoff running out, or (only while jobs wait for GPUs) the slow GPU rescan that
notices a foreign process leaving a GPU. Planning itself is `planner.plan`, a pure function;
this module gathers its inputs and hands the plan's starts to the launcher. A long queue is
planned on a worker thread (`PlanRound`), so that planning thousands of jobs never holds the
event loop; the plan's starts and preemptions are then carried out on the loop, each only
if its job is still as it was planned. Its parts, built in app.py and handed over:
launcher.py starts attempts, endings.py records their ends, stopping.py stops jobs,
`take_over` (reconcile.py) takes over live monitors at start-up. Time limits are the
monitors' to enforce; the watcher ends an attempt whose monitor is overdue (watcher.py).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import anyio
import anyio.lowlevel
import structlog

from trainq.core.errors import DiskFull
from trainq.core.nodes import cpu_nodes
from trainq.core.reasons import Wait, WaitReason
from trainq.core.states import ACTIVE, JobState
from trainq.core.wire import UserShare
from trainqd.attempts.launch import remaining_runtime
from trainqd.attempts.watcher import Watcher
from trainqd.config import Config
from trainqd.gpus.base import GpuBackend, GpuDevice, GpuUsage
from trainqd.planning import inputs as plan_inputs
from trainqd.planning import planner
from trainqd.planning.policy import SharingPolicy
from trainqd.scheduling import dependencies
from trainqd.scheduling.endings import AttemptEnds
from trainqd.scheduling.events import ChangeNotifier
from trainqd.scheduling.launcher import Launcher
from trainqd.scheduling.stopping import Stopping
from trainqd.scheduling.unrecorded import FIRST_PAUSE, Backlog
from trainqd.scheduling.wakeup import Wakeup
from trainqd.scheduling.watching import Watching
from trainqd.store import JobRow, Store

log = structlog.get_logger("trainqd.scheduler")

USAGE_FRESH = 0.5  # seconds a reading of who holds the GPUs is reused for
# Jobs (waiting and running) from which a plan is made on a worker thread: planning costs
# about 4 microseconds a job, the trip to a thread about 100, so shorter queues are planned
# at once, on the loop, in about a millisecond at most.
PLAN_OFF_LOOP_AT = 256
# Jobs of a group stopped in one turn of the event loop: a few milliseconds of it each.
STOP_BATCH = 250


@dataclass(frozen=True)
class PlanRound:
    """One plan's inputs, gathered on the event loop: immutable rows and copies, so that
    `plan` may run on a worker thread while the loop goes on."""

    pending: list[JobRow]
    active: list[JobRow]
    capacity: planner.Capacity
    limits: planner.Limits
    sharing: plan_inputs.Snapshot
    drains: frozenset[int]
    now: float

    def plan(self) -> planner.Plan:
        queue, running = self.sharing.jobs(self.pending, self.active)
        return planner.plan(
            queue, running, self.capacity, self.limits, self.now, sharing=self.sharing.settings
        )

    @property
    def large(self) -> bool:
        return len(self.pending) + len(self.active) >= PLAN_OFF_LOOP_AT


@dataclass(frozen=True)
class _Handed:
    """The queue went to Slurm; plan again at `wake_at` at the latest."""

    wake_at: float | None


class Handoff(Protocol):
    """A back end that plans and runs the jobs in trainqd's stead (Slurm, backends/slurm.py):
    the scheduler hands it the pending jobs instead of planning."""

    def tick(
        self, now: float, pending: list[JobRow], waiting: dict[int, WaitReason]
    ) -> float | None: ...


class Scheduler:
    """The loop. Every part it drives is built elsewhere (app.py) and handed over."""

    def __init__(
        self,
        *,
        config: Config,
        store: Store,
        gpus: GpuBackend,
        devices: Mapping[int, GpuDevice],
        notifier: ChangeNotifier,
        wakeup: Wakeup,
        watching: Watching,
        take_over: Callable[[Watcher], Awaitable[None]],
        ends: AttemptEnds,
        launcher: Launcher,
        stopping: Stopping,
        policy: SharingPolicy,
        unrecorded: Backlog,
        deadlines: dict[int, float],
        handoff: Handoff | None = None,
        started: Callable[[list[int]], None] = lambda job_ids: None,
    ) -> None:
        """`take_over(watcher)`: at start, before the first plan, what an earlier trainqd
        left running (reconcile.py, or the Slurm back end's). `deadlines`: when each running
        attempt's time limit falls due (its monitor enforces it, the planner only reckons
        with it to know when GPUs come free), shared with the parts that set them.
        `started(job_ids)`: told of the jobs each round started (a tune's trials are then
        read from their first report, experiments/metric_watch.py)."""
        self.config = config
        self.store = store
        self.gpus = gpus
        self.devices = devices
        self.notifier = notifier
        self._wakeup = wakeup
        self._watching = watching
        self._take_over = take_over
        self.ends = ends
        self.launcher = launcher
        self.stopping = stopping
        self.policy = policy
        self.limits = policy.limits
        self.unrecorded = unrecorded  # attempt ends the full disk kept out of the database
        self.deadlines = deadlines
        self.handoff = handoff
        self._started = started
        self.waiting: dict[int, WaitReason] = {}  # why each pending job waits, from the last plan
        self._usage: tuple[float, list[GpuUsage]] | None = None
        # Jobs being stopped a batch at a time (`stop_many`): planned for no start meanwhile.
        self._stopping_soon: set[int] = set()
        self._left = plan_inputs.NOTHING_LEFT  # what the last plan left; see `submitted`
        self._dependency_waits: dict[int, WaitReason] = {}  # pending jobs waiting for others
        self._launch_retry_at: float | None = None  # a launch the full disk refused

    @property
    def watcher(self) -> Watcher:
        return self._watching.current()

    def wake(self) -> None:
        self._wakeup.wake()

    def _changed(self) -> None:
        self._wakeup.changed()

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        async with anyio.create_task_group() as tg:
            watcher = self._watching.open(tg, self.ends.ended)
            try:
                await self._take_over(watcher)
                task_status.started()
                while True:
                    usage = await self._gpu_usage()
                    wake_at = await self._plan_round(time.time(), usage)
                    delay = math.inf if wake_at is None else max(0.0, wake_at - time.time())
                    await self._wakeup.sleep(delay)
            finally:
                watcher.close()

    async def _gpu_usage(self) -> list[GpuUsage] | None:
        """Who holds each GPU now, read only when a job waits. NVML calls can block on a GPU
        in trouble, so they run on a worker thread, never on the event loop; a reading is
        reused for USAGE_FRESH seconds, since planning can run many times a second."""
        if not self.devices or not self.store.has(JobState.PENDING):
            return None
        now = time.monotonic()
        if self._usage is None or now - self._usage[0] > USAGE_FRESH:
            self._usage = (now, await anyio.to_thread.run_sync(self.gpus.usage))
        return self._usage[1]

    def tick(self, now: float, usage: list[GpuUsage] | None = None) -> float | None:
        """Record ends a full disk held back, plan, start; return when to plan again at the
        latest. All on the calling thread: the tests' way to plan once."""
        if (handed := self._before_planning(now)) is not None:
            return handed.wake_at
        planned = self._gather(now, usage)
        return self._carry_out(planned, planned.plan())

    async def _plan_round(self, now: float, usage: list[GpuUsage] | None) -> float | None:
        """`tick`, with a long queue's plan made on a worker thread."""
        if (handed := self._before_planning(now)) is not None:
            return handed.wake_at
        planned = self._gather(now, usage)
        if planned.large:
            result = await anyio.to_thread.run_sync(planned.plan)
        else:
            result = planned.plan()
        return self._carry_out(planned, result)

    def _before_planning(self, now: float) -> _Handed | None:
        """Record the ends a full disk held back; with Slurm, hand the queue over instead of
        planning (Slurm plans), and say when to look again."""
        for end in self.unrecorded.due(now):
            self.ends.record(end.job_id, end.number, end.record)
        self._launch_retry_at = None
        if self.handoff is None:
            return None
        self.waiting = {}
        ready = self._settle_dependencies(self.store.jobs([JobState.PENDING]), now)
        handoff = self.handoff.tick(now, ready, self.waiting)
        self.waiting.update(self._dependency_waits)
        due = [d for d in (handoff, self.unrecorded.next_due()) if d is not None]
        return _Handed(min(due) if due else None)

    def _gather(self, now: float, usage: list[GpuUsage] | None) -> PlanRound:
        # One pass over the jobs in memory for both lists (tens of thousands, on the loop).
        unfinished = self.store.jobs([JobState.PENDING, *ACTIVE])
        active = [job for job in unfinished if job.state != JobState.PENDING]
        pending = [
            job
            for job in unfinished
            if job.state == JobState.PENDING and job.id not in self._stopping_soon
        ]
        pending = self._settle_dependencies(pending, now)
        drains = self.store.drains()
        capacity = plan_inputs.capacity(
            self.devices,
            active,
            usage if any(j.spec.total_gpus for j in pending) else None,
            self.config.cpu_slots,
            self.gpus.distance,
            drains=drains,
        )
        return PlanRound(
            pending=pending,
            active=active,
            capacity=capacity,
            limits=self.limits,
            sharing=self.policy.prepare(active, self.deadlines, now),
            drains=frozenset(drains),
            now=now,
        )

    def _carry_out(self, planned: PlanRound, result: planner.Plan) -> float | None:
        """Start the plan's jobs and stop its victims, on the event loop. A plan made on a
        worker thread may be out of date: a job held, changed or stopped meanwhile is not
        started, nor preempted for, and nothing starts if a drain changed; it is all
        planned again at once."""
        now = planned.now
        planned_rows = {job.id: job for job in planned.pending}

        def as_planned(job_id: int) -> bool:
            unchanged = self.store.unfinished(job_id) is planned_rows[job_id]
            return unchanged and job_id not in self._stopping_soon

        drains_kept = frozenset(self.store.drains()) == planned.drains
        starts = [s for s in result.starts if drains_kept and as_planned(s.job_id)]
        preemptions = [p for p in result.preemptions if drains_kept and as_planned(p.for_job)]
        if len(starts) < len(result.starts) or len(preemptions) < len(result.preemptions):
            self.wake()
        # Jobs queued while the plan was made keep the reasons `submitted_many` gave them.
        queued_meanwhile = {
            job_id: why
            for job_id, why in self.waiting.items()
            if job_id not in planned_rows and self._still_pending(job_id)
        }
        self.waiting = {**result.waiting, **queued_meanwhile, **self._dependency_waits}
        self.policy.planned(dataclasses.replace(result, preemptions=preemptions), now)
        for start in starts:
            try:
                self.launcher.launch(start, time.time())
            except DiskFull:  # the job waits, PENDING, until its start can be recorded
                log.warning("disk full: a job's start is put off", job_id=start.job_id)
                self._launch_retry_at = now + FIRST_PAUSE
        if starts:
            self._started([start.job_id for start in starts])
        self._left = plan_inputs.left_after(
            planned.capacity, result, planned.pending, self.store.jobs(list(ACTIVE))
        )
        candidates = [result.wake_at, self.unrecorded.next_due(), self._launch_retry_at]
        if any(job.spec.total_gpus for job in planned.pending) and self.devices:
            candidates.append(now + self.config.gpu_rescan_seconds)
        due = [c for c in candidates if c is not None]
        return min(due) if due else None

    def _settle_dependencies(self, pending: list[JobRow], now: float) -> list[JobRow]:
        """The pending jobs whose dependencies are met (the only ones planned: a job that
        waits for another is never the head and reserves nothing); the others' reasons are
        kept for the plan's, and a job whose dependency can never be met ends STOPPED."""
        if not any(job.spec.after for job in pending):
            self._dependency_waits = {}
            return pending
        settled = dependencies.sort_pending(pending, self.store, now)
        self._dependency_waits = settled.waiting
        for job, why in settled.never:
            reason = dependencies.NEVER_MET + why
            if self.store.stop_pending([job.id], now, reason, stop_reason=reason):
                log.info("dependency never met", job_id=job.id, why=why)
        if settled.never:
            self.notifier.notify()
        return settled.ready

    def _still_pending(self, job_id: int) -> bool:
        job = self.store.unfinished(job_id)
        return job is not None and job.state == JobState.PENDING

    def submitted(self, job: JobRow) -> None:
        """A new job is queued. A submission can start nothing but itself, and preempt only
        as the first GPU job to wait, so planning again is needed only if it could start
        now, or if it would sort before the last plan's head (its reservation then changes
        what may backfill). A queue of thousands is then not re-planned for each of a
        sweep's submissions."""
        self.submitted_many([job])

    def submitted_many(self, jobs: Sequence[JobRow]) -> None:
        """Jobs queued together (a sweep, a group commit's batch), as `submitted` each, with
        one notification and at most one planning pass for all of them."""
        self.notifier.notify()
        if self.handoff is not None:  # each is handed to Slurm at once
            self.wake()
            return
        free_gpus, free_slots, head = self._left
        plan = False
        for job in jobs:
            gpus = job.spec.total_gpus
            if job.spec.after:  # whether it may be planned at all is the next round's to say
                plan = True
            elif gpus == 0 and free_slots < cpu_nodes(job.spec):
                self.waiting[job.id] = planner.slots_wait(
                    cpu_nodes(job.spec), free_slots, self.config.cpu_slots
                )
            elif gpus > 0 and free_gpus < gpus and self.policy.sorts_after(job, head):
                self.waiting[job.id] = WaitReason(Wait.GPUS, gpus=gpus, free=free_gpus)
            else:
                plan = True
        if plan:
            self.wake()

    def stop(self, job_id: int, uid: int, grace: float | None) -> JobRow:
        return self.stopping.stop(job_id, uid, grace)

    def pause(self, job_id: int, uid: int) -> JobRow:
        return self.stopping.pause(job_id, uid)

    async def stop_many(
        self, jobs: Sequence[JobRow], uid: int, grace: float | None
    ) -> tuple[list[int], int]:
        """Stop a group's jobs (Stopping.stop_many) a batch per turn of the event loop, so
        that 10,000 of them never hold it for long; none of them starts meanwhile."""
        ids = {job.id for job in jobs}
        self._stopping_soon |= ids
        stopped: list[int] = []
        not_allowed = 0
        try:
            for first in range(0, len(jobs), STOP_BATCH):
                batch = jobs[first : first + STOP_BATCH]
                done, refused = self.stopping.stop_many(batch, uid, grace)
                stopped += done
                not_allowed += refused
                await anyio.lowlevel.checkpoint()
        finally:
            self._stopping_soon -= ids
            self.wake()
        return sorted(stopped), not_allowed

    def place(self, job_id: int) -> int | None:
        return self.policy.place(job_id)

    def shares(self) -> list[UserShare]:
        return self.policy.shares(self.store.jobs([JobState.PENDING, *ACTIVE]))

    def changed(self) -> None:
        """Something the plan depends on changed outside the scheduler (a hold, a release, a
        pending job's new spec, a drain): tell the watchers and plan again."""
        self._changed()

    def retimed(self, job: JobRow) -> None:
        """A running job's time limit changed (its row holds the new spec): its monitor, which
        enforces the limit, and the planner, which reckons with it, get the new deadline,
        counted as at the launch: from the attempt's start, less what earlier attempts ran."""
        attempt = self.store.attempt(job.id, job.attempt_count)
        remaining = remaining_runtime(job)
        if attempt is None or attempt.ended_at is not None:
            return  # it ended meanwhile: nothing runs to the old deadline
        deadline = None if remaining is None else attempt.started_at + remaining
        if deadline is None:
            self.deadlines.pop(job.id, None)
        else:
            self.deadlines[job.id] = deadline
        self.watcher.set_deadline(job.id, deadline)
        self._changed()
