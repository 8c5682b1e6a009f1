"""The scheduler: plans on every event and starts what the plan says (DESIGN §4, §5).

It sleeps until something can change the plan: a submission, a stop, an attempt's end, a
retry's backoff running out, a time limit falling due, or (only while jobs wait for GPUs) the
slow GPU rescan that notices a foreign process leaving a GPU. Planning itself is
`planner.plan`, a pure function; this module gathers its inputs and applies its result.

On start it reconciles with what happened while no trainqd was running: attempts that ended
get the exit their monitor recorded, live monitors are watched again (their GPUs stay
theirs), and attempts whose monitor vanished are cleaned up and retried.
"""

from __future__ import annotations

import math
import time

import anyio
import structlog

from trainq.core.errors import Conflict, DiskFull, InvalidSpec
from trainq.core.states import ACTIVE, TERMINAL, JobState, TransitionError
from trainqd import engine, plan_inputs, planner
from trainqd.config import Config
from trainqd.contract import Assignment
from trainqd.events import ChangeNotifier
from trainqd.gpus.base import GpuBackend, GpuDevice, GpuUsage
from trainqd.identity import Authorizer, account, job_account
from trainqd.jobdir import JobDirs
from trainqd.launch import Attempt, LaunchSettings, build_launch, remaining_runtime
from trainqd.leftovers import end_attempt_cgroup, kill_attempt
from trainqd.monitor.records import ExitRecord
from trainqd.outcomes import settle, time_limit_reason
from trainqd.store import JobRow, Store
from trainqd.supervisor import Supervisor, read_exit_record, read_monitor_info
from trainqd.unrecorded import FIRST_PAUSE, Backlog

log = structlog.get_logger("trainqd.scheduler")

USAGE_FRESH = 0.5  # seconds a reading of who holds the GPUs is reused for


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
    ) -> None:
        self.config = config
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
        )
        self.limits = planner.Limits(
            max_running_jobs_per_user=config.max_running_jobs_per_user,
            max_gpus_per_user=config.max_gpus_per_user,
        )
        self.waiting: dict[int, str] = {}  # why each pending job waits, from the last plan
        self.deadlines: dict[int, float] = {}  # running job -> when its time limit falls due
        self._wake = anyio.Event()
        self._supervisor: Supervisor | None = None
        self._usage: tuple[float, list[GpuUsage]] | None = None
        self._left = plan_inputs.NOTHING_LEFT  # what the last plan left; see `submitted`
        self.unrecorded = Backlog()  # attempt ends the full disk kept out of the database
        self._launch_retry_at: float | None = None  # a launch the full disk refused

    @property
    def supervisor(self) -> Supervisor:
        assert self._supervisor is not None, "the scheduler is not running"
        return self._supervisor

    def wake(self) -> None:
        self._wake.set()

    def _changed(self) -> None:
        self.notifier.notify()
        self.wake()

    # -- the loop ------------------------------------------------------------------------

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        async with anyio.create_task_group() as tg:
            self._supervisor = Supervisor(tg, self._attempt_ended)
            try:
                self.reconcile()
                task_status.started()
                while True:
                    usage = await self._gpu_usage()
                    wake_at = self.tick(time.time(), usage)
                    delay = math.inf if wake_at is None else max(0.0, wake_at - time.time())
                    with anyio.move_on_after(delay):
                        await self._wake.wait()
                    self._wake = anyio.Event()
            finally:
                self._supervisor.close()

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
        """Enforce due time limits, plan, start; return when to plan again at the latest."""
        for end in self.unrecorded.due(now):
            self._settle(end.job_id, end.number, end.record)
        self._launch_retry_at = None
        for job_id, deadline in list(self.deadlines.items()):
            if deadline <= now:
                self._stop_for_time_limit(job_id, now)
        pending = self.store.jobs([JobState.PENDING])
        active = self.store.jobs(list(ACTIVE))
        default_grace = self.config.default_stop_grace_seconds
        capacity = plan_inputs.capacity(
            self.devices,
            active,
            usage if any(j.spec.gpus for j in pending) else None,
            self.config.cpu_slots,
            self.gpus.distance,
        )
        result = planner.plan(
            [plan_inputs.queued(job, default_grace) for job in pending],
            [plan_inputs.running(job, self.deadlines.get(job.id), default_grace) for job in active],
            capacity,
            self.limits,
            now,
        )
        self.waiting = result.waiting
        for start in result.starts:
            try:
                self._launch(start, time.time())
            except DiskFull:  # the job waits, PENDING, until its start can be recorded
                log.warning("disk full: a job's start is put off", job_id=start.job_id)
                self._launch_retry_at = now + FIRST_PAUSE
        self._left = plan_inputs.left_after(
            capacity, result, pending, self.store.jobs(list(ACTIVE))
        )
        candidates = [
            result.wake_at,
            *self.deadlines.values(),
            self.unrecorded.next_due(),
            self._launch_retry_at,
        ]
        if any(job.spec.gpus for job in pending) and self.devices:
            candidates.append(now + self.config.gpu_rescan_seconds)
        due = [c for c in candidates if c is not None]
        return min(due) if due else None

    def submitted(self, job: JobRow) -> None:
        """A new job is queued. Without preemption a submission can start nothing but itself,
        so planning again is needed only if it could start now, or if it would become the
        first GPU job to wait (its reservation then changes what may backfill). A queue of
        thousands is then not re-planned for each of a sweep's submissions."""
        self.notifier.notify()
        free_gpus, free_slots, head = self._left
        gpus = job.spec.gpus
        if gpus == 0 and free_slots <= 0:
            self.waiting[job.id] = f"waiting for a CPU slot (all {self.config.cpu_slots} in use)"
        elif gpus > 0 and free_gpus < gpus and head is not None and job.priority <= head:
            self.waiting[job.id] = f"waiting for {gpus} GPUs ({free_gpus} free)"
        else:
            self.wake()

    def _container(self, job: JobRow, attempt: int) -> tuple[str, str] | None:
        """(engine path, container name) of a container attempt; None for a subprocess."""
        if job.spec.image is None:
            return None
        try:
            eng = engine.find_engine(job.spec.engine, self.config.default_engine)
        except InvalidSpec:  # the engine went away: nothing of the attempt can be left in it
            return None
        return eng.path, engine.container_name(self.settings.instance, job.id, attempt)

    def _grace(self, job: JobRow) -> float:
        return plan_inputs.grace(job, self.config.default_stop_grace_seconds)

    # -- starting and ending attempts ----------------------------------------------------

    def _launch(self, start: planner.Start, now: float) -> None:
        job = self.store.get(start.job_id)
        remaining = remaining_runtime(job)
        if remaining is not None and remaining <= 0:
            self.store.transition(
                job.id,
                JobState.STOPPED,
                now,
                "time limit",
                stop_reason=time_limit_reason(job),
                ended_at=now,
            )
            self._changed()
            return
        uuids = [self.devices[i].uuid for i in start.gpus]
        job, number = self.store.begin_attempt(job.id, start.gpus, uuids, now)
        self.notifier.notify()
        bound = log.bind(job_id=job.id, attempt=number)
        try:
            acct = job_account(job.owner)
            paths = self.dirs.create_attempt(
                job.id, number, acct.uid, acct.gid, monitor_is_owner=job.spec.image is None
            )
            launch = build_launch(
                Attempt(
                    job,
                    number,
                    Assignment(start.gpus, tuple(uuids)),
                    acct,
                    paths,
                    self.settings,
                ),
                now,
            )
            monitor = self.supervisor.start(launch, paths.attempt_dir, paths.stop_file)
        except Exception as exc:  # any failure to start is this attempt's, never the daemon's
            bound.exception("could not start the attempt")
            self._settle(
                job.id,
                number,
                ExitRecord(
                    job.id,
                    number,
                    "start_failed",
                    now,
                    time.time(),
                    reason=f"trainq could not start the attempt: {exc}",
                ),
            )
            return
        try:
            self.store.record_monitor(
                job.id, number, monitor.pid, monitor.start_ticks, self.supervisor.boot_id
            )
        except DiskFull:  # the trainer runs: a later trainqd finds its monitor in monitor.json
            bound.warning("disk full: the monitor's pid is not recorded", monitor=monitor.pid)
        if launch.deadline is not None:
            self.deadlines[job.id] = launch.deadline
        bound.info("started", gpus=list(start.gpus), monitor=monitor.pid)

    async def _attempt_ended(self, job_id: int, number: int, record: ExitRecord | None) -> None:
        if record is None or record.outcome == "lost":
            # The monitor died without a word (killed, crashed) or left a record that cannot
            # be trusted: what it supervised may live on, and must be gone before the job runs
            # again on those GPUs.
            job = self.store.get(job_id)
            await anyio.to_thread.run_sync(
                kill_attempt,
                str(self.dirs.ml_root(job_id)),
                job_id,
                number,
                self._container(job, number),
            )
        else:
            # The monitor has ended the cgroup itself, unless it could not (monitor/cgroup.py):
            # nothing of the attempt may outlive it, and its cgroup is root's to remove.
            await anyio.to_thread.run_sync(
                end_attempt_cgroup, str(self.dirs.ml_root(job_id)), job_id, number
            )
        self._settle(job_id, number, record)

    def _settle(self, job_id: int, number: int, record: ExitRecord | None) -> None:
        now = time.time()
        self.deadlines.pop(job_id, None)
        job = self.store.get(job_id)
        attempts = self.store.attempts([job_id])[job_id]
        result = settle(job, [a for a in attempts if a.number < number], record, now)
        try:
            self.store.end_attempt(
                job_id,
                number,
                result.target,
                now,
                attempt_started=result.started_at,
                attempt_ended=result.ended_at,
                exit_code=result.exit_code,
                signal=result.signal,
                outcome=result.outcome,
                reason=result.reason,
                retried=result.retried,
                event_reason=result.event_reason,
                **result.job_fields,
            )
        except TransitionError as exc:
            self.unrecorded.recorded(job_id)
            log.exception("attempt end not applied", job_id=job_id, attempt=number, error=str(exc))
            return
        except DiskFull:
            # Kept and written again later; meanwhile the job stays RUNNING in the database,
            # so it keeps its GPUs and is not launched again (unrecorded.py).
            log.warning("disk full: an attempt's end is kept to record later", job_id=job_id)
            self.unrecorded.keep(job_id, number, record, now)
            return
        self.unrecorded.recorded(job_id)
        log.info(
            "attempt ended",
            job_id=job_id,
            attempt=number,
            outcome=result.outcome,
            exit_code=result.exit_code,
            state=str(result.target),
        )
        self._changed()

    # -- stopping ------------------------------------------------------------------------

    def stop(self, job_id: int, uid: int, grace: float | None) -> JobRow:
        job = self.store.get(job_id)
        self.authorizer.require_manage(uid, job)
        now = time.time()
        who = account(uid).user if uid != job.owner.uid else job.owner.user
        if job.state in TERMINAL:
            raise Conflict(f"job {job_id} has already ended ({job.state})")
        if job.state == JobState.PENDING:
            self.store.transition(
                job_id,
                JobState.STOPPED,
                now,
                f"stopped by {who}",
                stop_reason=f"stopped by {who} before it started",
                ended_at=now,
            )
        else:
            if job.state == JobState.RUNNING:
                self.store.transition(
                    job_id,
                    JobState.STOPPING,
                    now,
                    f"stopped by {who}",
                    stop_reason=f"stopped by {who}",
                )
            # A second stop may shorten the grace; the monitor never lengthens it.
            self.supervisor.request_stop(
                job_id, self._grace(job) if grace is None else grace, "user", uid
            )
        self._changed()
        return self.store.get(job_id)

    def _stop_for_time_limit(self, job_id: int, now: float) -> None:
        self.deadlines.pop(job_id, None)
        job = self.store.get(job_id)
        if job.state != JobState.RUNNING or job_id in self.unrecorded:
            return
        try:
            self.store.transition(
                job_id, JobState.STOPPING, now, "time limit", stop_reason=time_limit_reason(job)
            )
        except DiskFull:  # due again at the next tick
            self.deadlines[job_id] = now + FIRST_PAUSE
            return
        self.supervisor.request_stop(job_id, self._grace(job), "time_limit", None)
        self.notifier.notify()

    # -- after a restart -----------------------------------------------------------------

    def reconcile(self) -> None:
        for job in self.store.jobs(list(ACTIVE)):
            number = job.attempt_count
            attempt = self.store.attempt(job.id, number)
            if attempt is None or attempt.ended_at is not None:
                log.error("active job without an open attempt", job_id=job.id)
                continue
            attempt_dir = self.dirs.attempt_dir(job.id, number)
            # A live monitor is watched again whatever its directory holds: an exit record is
            # only the monitor's word once the monitor has ended (the trainer could write one).
            pid, start, boot = attempt.monitor_pid, attempt.monitor_start, attempt.boot_id
            if pid is None:
                info = read_monitor_info(attempt_dir)
                if info is not None:
                    pid, start, boot = info.monitor_pid, info.monitor_start, info.boot_id
            monitor = None
            if pid is not None:
                monitor = self.supervisor.attach(
                    job.id,
                    attempt=number,
                    pid=pid,
                    start_ticks=start,
                    boot_id=boot,
                    attempt_dir=attempt_dir,
                    stop_file=self.dirs.stop_file(job.id, number),
                )
            if monitor is not None:
                remaining = remaining_runtime(job)
                if remaining is not None:
                    self.deadlines[job.id] = attempt.started_at + remaining
                log.info("re-attached", job_id=job.id, attempt=number, monitor=pid)
                continue
            record = read_exit_record(attempt_dir, job.id, number)
            if record is None:
                log.info("attempt lost while trainqd was down", job_id=job.id, attempt=number)
            else:
                log.info("attempt ended while trainqd was down", job_id=job.id, attempt=number)
            if record is None or record.outcome == "lost":
                kill_attempt(
                    str(self.dirs.ml_root(job.id)), job.id, number, self._container(job, number)
                )
            else:
                end_attempt_cgroup(str(self.dirs.ml_root(job.id)), job.id, number)
            self._settle(job.id, number, record)
