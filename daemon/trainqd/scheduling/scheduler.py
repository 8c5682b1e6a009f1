"""The scheduler's loop: plans on every event and starts what the plan says
(docs/architecture.md).

It sleeps until something can change the plan: a submission, a stop, an attempt's end, a
retry's backoff running out, or (only while jobs wait for GPUs) the slow GPU rescan that
notices a foreign process leaving a GPU. Planning itself is `planner.plan`, a pure function;
this module gathers its inputs and hands the plan's starts to the launcher. A long queue is
planned on a worker thread (`PlanRound`), so that planning thousands of jobs never holds the
event loop; the plan's starts and preemptions are then carried out on the loop, each only
if its job is still as it was planned. Its parts:
launcher.py starts attempts, endings.py records their ends, stopping.py stops jobs,
reconcile.py takes over live monitors at start-up. Time limits are the monitors' to enforce;
the watcher ends an attempt whose monitor is overdue (watcher.py).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import anyio
import anyio.lowlevel
import structlog

from trainq.core.errors import DiskFull
from trainq.core.reasons import Wait, WaitReason
from trainq.core.states import ACTIVE, JobState
from trainq.core.wire import UserShare
from trainqd.access.authorization import Authorizer
from trainqd.attempts.jobdir import JobDirs
from trainqd.attempts.launch import LaunchSettings, remaining_runtime
from trainqd.attempts.watcher import MonitorWatcher, Watcher, WatcherFactory
from trainqd.backends.slurm import SlurmBackend
from trainqd.config import Config
from trainqd.experiments.metric_watch import MetricWatch
from trainqd.experiments.tuner import Tuner
from trainqd.gpus.base import GpuBackend, GpuDevice, GpuUsage
from trainqd.planning import inputs as plan_inputs
from trainqd.planning import planner
from trainqd.planning.policy import SharingPolicy
from trainqd.scheduling import dependencies, sampling
from trainqd.scheduling.endings import AttemptEnds
from trainqd.scheduling.events import ChangeNotifier
from trainqd.scheduling.launcher import Launcher
from trainqd.scheduling.reconcile import reconcile
from trainqd.scheduling.stopping import Stopping
from trainqd.scheduling.unrecorded import FIRST_PAUSE, Backlog
from trainqd.store.store import AttemptRow, JobRow, Store

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


class JobControl(Protocol):
    """What the API asks of the scheduler, and nothing more."""

    @property
    def waiting(self) -> Mapping[int, WaitReason]: ...

    def submitted(self, job: JobRow) -> None: ...

    def submitted_many(self, jobs: Sequence[JobRow]) -> None: ...

    def stop(self, job_id: int, uid: int, grace: float | None) -> JobRow: ...

    def pause(self, job_id: int, uid: int) -> JobRow: ...

    async def stop_many(
        self, jobs: Sequence[JobRow], uid: int, grace: float | None
    ) -> tuple[list[int], int]: ...

    def changed(self) -> None: ...

    def retimed(self, job: JobRow) -> None: ...

    def place(self, job_id: int) -> int | None: ...

    def shares(self) -> list[UserShare]: ...


class Scheduler:
    def __init__(
        self,
        *,
        config: Config,
        store: Store,
        gpus: GpuBackend,
        dirs: JobDirs,
        notifier: ChangeNotifier,
        authorizer: Authorizer,
        watcher: WatcherFactory | None = None,
    ) -> None:
        self.config = config
        self._new_watcher: WatcherFactory = watcher or (
            lambda tg, on_end: MonitorWatcher(tg, on_end, margin=config.end_margin_seconds)
        )
        self.store = store
        self.gpus = gpus
        self.dirs = dirs
        self.notifier = notifier
        self.authorizer = authorizer
        self.devices: dict[int, GpuDevice] = {d.index: d for d in gpus.devices()}
        self.settings = LaunchSettings(
            default_stop_grace_seconds=config.default_stop_grace_seconds,
            default_engine=config.default_engine,
            real_gpus=gpus.kind == "nvml",
            instance=store.instance,
            container_capabilities=tuple(config.container_capabilities),
            allowed_images=tuple(config.allowed_images),
            max_processes=config.process_cap(),
        )
        self.waiting: dict[int, WaitReason] = {}  # why each pending job waits, from the last plan
        # When each running attempt's time limit falls due: its monitor enforces it, the
        # planner only reckons with it to know when GPUs come free.
        self.deadlines: dict[int, float] = {}
        self._wake = anyio.Event()
        self._watcher: Watcher | None = None
        self._usage: tuple[float, list[GpuUsage]] | None = None
        # Jobs being stopped a batch at a time (`stop_many`): planned for no start meanwhile.
        self._stopping_soon: set[int] = set()
        self._left = plan_inputs.NOTHING_LEFT  # what the last plan left; see `submitted`
        self._dependency_waits: dict[int, WaitReason] = {}  # pending jobs waiting for others
        self.unrecorded = Backlog()  # attempt ends the full disk kept out of the database
        self._launch_retry_at: float | None = None  # a launch the full disk refused
        self.sampler = sampling.new_sampler(config, gpus)  # GPU use of running jobs
        self.metric_watch = MetricWatch(store, dirs)  # metrics the trainers report
        self.ends = AttemptEnds(
            store=store,
            dirs=dirs,
            sampler=self.sampler,
            unrecorded=self.unrecorded,
            deadlines=self.deadlines,
            default_engine=config.default_engine,
            instance=self.settings.instance,
            changed=self._changed,
            # Fair share counts each ended attempt; the policy is made below, with Stopping.
            on_ended=self._attempt_ended,
        )
        self.launcher = Launcher(
            store=store,
            dirs=dirs,
            devices=self.devices,
            settings=self.settings,
            watcher=lambda: self.watcher,
            ends=self.ends,
            deadlines=self.deadlines,
            notify=notifier.notify,
            changed=self._changed,
        )
        self.stopping = Stopping(
            store=store,
            authorizer=authorizer,
            watcher=lambda: self.watcher,
            default_grace=config.default_stop_grace_seconds,
            changed=self._changed,
        )
        # Tuning experiments: their trials are jobs like any other (tuner.py).
        self.tuner = Tuner(
            store=store,
            dirs=dirs,
            metric_watch=self.metric_watch,
            stopping=self.stopping,
            submitted=self.submitted,
            changed=self._changed,
            max_unfinished=config.max_unfinished_jobs_per_user,
        )
        # Classes, fair share and preemption (policy.py); the limits include the classes'.
        self.policy = SharingPolicy(config, store, self.stopping)
        self.limits = self.policy.limits
        self.policy.seed(time.time())
        # backend = "slurm": every job is handed to Slurm, which plans and runs it instead.
        self.slurm: SlurmBackend | None = None
        if config.backend == "slurm":
            self.slurm = SlurmBackend(
                config=config, store=store, dirs=dirs, ends=self.ends, changed=self._changed
            )
            self._new_watcher = self.slurm.watching

    def _attempt_ended(self, job: JobRow, attempt: AttemptRow, ended: float) -> None:
        # Fair share counts each ended attempt; a tune hears of its trial's end at once.
        self.policy.attempt_ended(job, attempt, ended)
        self.tuner.wake()

    @property
    def dispatched(self) -> Callable[[float], None]:
        """Told each start's time from plan to running monitor (metrics.py's hook)."""
        return self.launcher.dispatched

    @dispatched.setter
    def dispatched(self, hook: Callable[[float], None]) -> None:
        self.launcher.dispatched = hook

    @property
    def watcher(self) -> Watcher:
        assert self._watcher is not None, "the scheduler is not running"
        return self._watcher

    def wake(self) -> None:
        self._wake.set()

    def _changed(self) -> None:
        self.notifier.notify()
        self.wake()

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        async with anyio.create_task_group() as tg:
            self._watcher = self._new_watcher(tg, self.ends.ended)
            try:
                if self.slurm is not None:
                    await self.slurm.take_over()
                else:
                    await reconcile(
                        store=self.store,
                        dirs=self.dirs,
                        watcher=self._watcher,
                        ends=self.ends,
                        deadlines=self.deadlines,
                        default_grace=self.config.default_stop_grace_seconds,
                    )
                tg.start_soon(sampling.watch, self)
                tg.start_soon(self.metric_watch.run)
                tg.start_soon(self.tuner.run)
                task_status.started()
                while True:
                    usage = await self._gpu_usage()
                    wake_at = await self._plan_round(time.time(), usage)
                    delay = math.inf if wake_at is None else max(0.0, wake_at - time.time())
                    with anyio.move_on_after(delay):
                        await self._wake.wait()
                    self._wake = anyio.Event()
            finally:
                self._watcher.close()

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
        if self.slurm is None:
            return None
        self.waiting = {}
        ready = self._settle_dependencies(self.store.jobs([JobState.PENDING]), now)
        handoff = self.slurm.tick(now, ready, self.waiting)
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
            usage if any(j.spec.gpus for j in pending) else None,
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
        self._left = plan_inputs.left_after(
            planned.capacity, result, planned.pending, self.store.jobs(list(ACTIVE))
        )
        candidates = [result.wake_at, self.unrecorded.next_due(), self._launch_retry_at]
        if any(job.spec.gpus for job in planned.pending) and self.devices:
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
        if self.slurm is not None:  # each is handed to Slurm at once
            self.wake()
            return
        free_gpus, free_slots, head = self._left
        plan = False
        for job in jobs:
            gpus = job.spec.gpus
            if job.spec.after:  # whether it may be planned at all is the next round's to say
                plan = True
            elif gpus == 0 and free_slots <= 0:
                self.waiting[job.id] = WaitReason(Wait.CPU_SLOT, limit=self.config.cpu_slots)
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
