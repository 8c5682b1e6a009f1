"""GPU use per running job: sampled while it runs, summed up when its attempt ends.

Every `gpu_sample_seconds` the GPU backend is read on a worker thread (NVML calls can block
on a GPU in trouble) and each running attempt gets one sample of its own GPUs: their mean
utilization, the memory used on them, the memory of the job's own processes where the
backend reports it, and their power. An attempt keeps its last `gpu_sample_history` samples
in memory (what `trainq top` and the metrics show) and running totals, from which its peak
and mean are written to its attempt record when it ends.

The idle rule lives in idle.py; this module only feeds it.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import anyio
import structlog

from trainq.core.errors import DiskFull, TrainqError
from trainq.core.states import JobState, TransitionError
from trainqd.attempts.leftovers import job_of_process
from trainqd.config import Config
from trainqd.gpus.base import GpuBackend, GpuSample
from trainqd.scheduling.idle import IdlePolicy, IdleWatch, duration
from trainqd.store.store import Store

log = structlog.get_logger("trainqd.sampling")


@dataclass(frozen=True)
class RunningAttempt:
    """What the sampler needs to know of a running attempt."""

    job_id: int
    number: int
    gpus: tuple[int, ...]


@dataclass(frozen=True)
class JobSample:
    """One reading of one attempt's GPUs taken together."""

    time: float
    utilization_percent: float | None  # the mean over its GPUs
    memory_used_mib: int | None  # everything on its GPUs
    process_memory_mib: int | None  # the job's own processes, where the backend tells
    power_watts: float | None


@dataclass(frozen=True)
class GpuUseSummary:
    """What is kept of an attempt's GPU use once it has ended."""

    samples: int
    utilization_peak: float | None
    utilization_mean: float | None
    memory_peak_mib: int | None
    idle_seconds: float


@dataclass
class AttemptUse:
    """One running attempt's samples and running totals."""

    attempt: RunningAttempt
    history: deque[JobSample]
    idle: IdleWatch
    samples: int = 0
    utilization_sum: float = 0.0
    utilization_count: int = 0
    utilization_peak: float | None = None
    memory_peak_mib: int | None = None

    @property
    def latest(self) -> JobSample | None:
        return self.history[-1] if self.history else None

    def add(self, sample: JobSample) -> None:
        self.history.append(sample)
        self.samples += 1
        if sample.utilization_percent is not None:
            self.utilization_sum += sample.utilization_percent
            self.utilization_count += 1
            self.utilization_peak = max(self.utilization_peak or 0.0, sample.utilization_percent)
        if sample.memory_used_mib is not None:
            self.memory_peak_mib = max(self.memory_peak_mib or 0, sample.memory_used_mib)

    def summary(self) -> GpuUseSummary:
        mean = self.utilization_sum / self.utilization_count if self.utilization_count else None
        return GpuUseSummary(
            samples=self.samples,
            utilization_peak=self.utilization_peak,
            utilization_mean=None if mean is None else round(mean, 2),
            memory_peak_mib=self.memory_peak_mib,
            idle_seconds=round(self.idle.idle_seconds, 3),
        )


def job_sample(
    now: float,
    gpus: Sequence[int],
    readings: Mapping[int, GpuSample],
    job_pids: Iterable[int] = (),
) -> JobSample:
    """One attempt's sample from the readings of every GPU; a reading missing on any of its
    GPUs makes that figure unknown rather than wrong."""
    mine = [readings.get(index) for index in gpus]
    known = [r for r in mine if r is not None]
    pids = set(job_pids)

    def total(values: list[float | int | None]) -> float | None:
        if not values or any(v is None for v in values):
            return None
        return float(sum(v for v in values if v is not None))

    utilization = total([r.utilization_percent for r in known] if len(known) == len(mine) else [])
    memory = total([r.memory_used_mib for r in known] if len(known) == len(mine) else [])
    power = total([r.power_watts for r in known] if len(known) == len(mine) else [])
    own = [m for r in known for pid, m in r.process_memory_mib.items() if pid in pids]
    return JobSample(
        time=now,
        utilization_percent=None if utilization is None else utilization / len(mine),
        memory_used_mib=None if memory is None else int(memory),
        process_memory_mib=sum(own) if own else None,
        power_watts=power,
    )


@dataclass
class Sampler:
    """The samples of every running attempt, and the latest reading of every GPU."""

    backend: GpuBackend
    interval: float
    history: int
    idle_policy: IdlePolicy
    jobs_dir: str
    attempts: dict[int, AttemptUse] = field(default_factory=dict)  # by job id
    gpus: dict[int, GpuSample] = field(default_factory=dict)  # by GPU index
    sampled_at: float | None = None

    def observe(
        self,
        now: float,
        readings: Sequence[GpuSample],
        running: Sequence[RunningAttempt],
        pids_by_job: Mapping[int, set[int]] | None = None,
    ) -> list[AttemptUse]:
        """Take one round of readings; return the attempts whose idle state changed (newly
        flagged, or due to be stopped), for the caller to act on."""
        self.gpus = {r.index: r for r in readings}
        self.sampled_at = now
        alive = {(a.job_id, a.number) for a in running}
        for job_id, use in list(self.attempts.items()):
            if (job_id, use.attempt.number) not in alive:
                del self.attempts[job_id]  # ended without `finish` (a lost monitor)
        changed = []
        for attempt in running:
            if not attempt.gpus:
                continue
            known = self.attempts.get(attempt.job_id)
            if known is not None and known.attempt.number == attempt.number:
                use = known
            else:
                use = AttemptUse(attempt, deque(maxlen=self.history), IdleWatch(self.idle_policy))
                self.attempts[attempt.job_id] = use
            sample = job_sample(
                now, attempt.gpus, self.gpus, (pids_by_job or {}).get(attempt.job_id, ())
            )
            use.add(sample)
            if use.idle.observe(now, sample.utilization_percent):
                changed.append(use)
        return changed

    def finish(self, job_id: int, number: int) -> GpuUseSummary | None:
        """The summary of an attempt that has ended, forgetting its samples; None when it
        was never sampled."""
        use = self.attempts.get(job_id)
        if use is None or use.attempt.number != number:
            return None
        del self.attempts[job_id]
        return use.summary() if use.history else None

    def idle_since(self, job_id: int) -> float | None:
        """When the job's GPUs went idle, if it is flagged idle now."""
        use = self.attempts.get(job_id)
        return None if use is None else use.idle.flagged_since

    def read(self) -> tuple[list[GpuSample], dict[int, set[int]]]:
        """The backend's readings and which job each GPU process belongs to; blocking (NVML
        and /proc), so run on a worker thread."""
        readings = self.backend.sample()
        pids_by_job: dict[int, set[int]] = {}
        for reading in readings:
            for pid in reading.process_memory_mib:
                job_id = job_of_process(pid, self.jobs_dir)
                if job_id is not None:
                    pids_by_job.setdefault(job_id, set()).add(pid)
        return readings, pids_by_job

    async def run(
        self,
        running: Callable[[], list[RunningAttempt]],
        on_change: Callable[[AttemptUse, float], None],
    ) -> None:
        """Sample forever; `on_change` hears of every attempt whose idle state changed."""
        while True:
            try:
                readings, pids_by_job = await anyio.to_thread.run_sync(self.read)
            except Exception:  # a backend failure costs one round of samples, never the daemon
                log.exception("GPU sampling failed")
            else:
                now = time.time()
                for use in self.observe(now, readings, running(), pids_by_job):
                    try:
                        on_change(use, now)
                    except Exception:  # acting on one idle job must not end the sampling
                        log.exception("idle job not acted on", job_id=use.attempt.job_id)
            await anyio.sleep(self.interval)


def new_sampler(config: Config, backend: GpuBackend) -> Sampler:
    return Sampler(
        backend=backend,
        interval=config.gpu_sample_seconds,
        history=config.gpu_sample_history,
        idle_policy=IdlePolicy(
            threshold_percent=config.idle_utilization_percent,
            after_seconds=config.idle_after_seconds,
            action=config.idle_action,
            stop_after_seconds=config.idle_stop_after_seconds,
        ),
        jobs_dir=str(config.jobs_dir),
    )


def keep_summary(store: Store, sampler: Sampler, job_id: int, number: int) -> None:
    """Write an ended attempt's GPU use to its record; a full disk loses only the summary."""
    summary = sampler.finish(job_id, number)
    if summary is None:
        return
    try:
        store.record_gpu_use(
            job_id,
            number,
            utilization_peak=summary.utilization_peak,
            utilization_mean=summary.utilization_mean,
            memory_peak_mib=summary.memory_peak_mib,
            idle_seconds=summary.idle_seconds,
        )
    except DiskFull:
        log.warning("disk full: an attempt's GPU use is not recorded", job_id=job_id)


class IdleStops(Protocol):
    """What acting on an idle job asks of trainqd's stopping (stopping.py)."""

    def stop_by_trainq(self, job_id: int, now: float, event: str, reason: str) -> None: ...


def running_attempts(store: Store) -> list[RunningAttempt]:
    # STOPPING too: its trainer still holds its GPUs, and its summary must cover the end.
    return [
        RunningAttempt(job.id, job.attempt_count, tuple(job.gpus))
        for job in store.jobs([JobState.RUNNING, JobState.STOPPING])
    ]


def act_on_idle(
    store: Store, stopping: IdleStops, notify: Callable[[], None], use: AttemptUse, now: float
) -> None:
    """Flag a job whose GPUs went idle (an event on the stream) and, when the policy says so
    and the spell has lasted, stop it as a time limit would."""
    job_id, policy = use.attempt.job_id, use.idle.policy
    try:
        if store.get(job_id).state != JobState.RUNNING:
            return  # already on its way out
        if use.idle.stop_due:
            spell = duration(now - (use.idle.idle_since or now))
            reason = f"stopped by trainq: its GPUs were idle for {spell}"
            stopping.stop_by_trainq(job_id, now, "GPUs idle", reason)
            log.info("stopping an idle job", job_id=job_id)
        else:
            threshold = f"{policy.threshold_percent:g}%"
            reason = f"GPUs idle: under {threshold} for {duration(policy.after_seconds)}"
            store.note(job_id, now, reason)
            # "notify" also tells the administrators, in the log their alerting reads.
            say = log.warning if policy.action == "notify" else log.info
            say("job's GPUs idle", job_id=job_id, threshold=threshold)
    except (TransitionError, TrainqError):  # it ended meanwhile, or the disk is full
        log.info("idle job not acted on", job_id=job_id)
        return
    notify()


async def watch(
    sampler: Sampler, store: Store, stopping: IdleStops, notify: Callable[[], None]
) -> None:
    """Sample the running jobs' GPUs, and act on idle ones, for as long as trainqd runs."""
    await sampler.run(
        lambda: running_attempts(store),
        lambda use, now: act_on_idle(store, stopping, notify, use, now),
    )
