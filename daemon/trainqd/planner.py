"""The scheduling decision: which queued jobs start now, on which GPUs, and why the others
wait (docs/architecture.md).

`plan` is a pure function of the queue, the running jobs, the capacity, the limits and the
time it is given; it reads no clock and does no I/O, so the daemon can call it on every
event and tests can replay any situation.

The policy is a priority queue with EASY backfill, as batch schedulers have run it for
decades:

- Jobs are considered in order: higher priority first, then earlier submission, then id.
- A job that fits on free GPUs starts, on the closest free GPUs (topology.choose_gpus).
- The first GPU job that does not fit becomes the *head*: it gets a reservation, the
  earliest time enough GPUs will be free counting the running jobs' expected ends (never,
  when that depends on a job without a time limit), and the number of GPUs that will be
  free then beyond its need (the *spare*).
- A later job that fits now may still start, but only if it cannot delay the head: it ends
  (now + its time limit) no later than the reservation, or it fits in the spare.
- CPU jobs (gpus = 0) have their own pool of slots; they never wait for, nor hold back,
  GPU jobs. Per-user limits, retry backoff and holds keep a job back without it reserving
  anything. Drained GPUs take no new job (a drained host starts nothing); the jobs running
  on them go on.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from trainq.core.reasons import Wait, WaitReason
from trainqd.topology import choose_gpus


@dataclass(frozen=True)
class QueuedJob:
    id: int
    priority: int
    submitted_at: float
    owner_uid: int
    gpus: int
    runtime_limit: float | None  # seconds it may run once started; None = no limit
    not_before: float | None = None  # retry backoff: not startable before this time
    held_by: str | None = None  # held by this user until released: never started


@dataclass(frozen=True)
class RunningJob:
    id: int
    owner_uid: int
    gpus: tuple[int, ...]  # () for a CPU job, which holds a CPU slot
    expected_end: float | None  # None = no time limit


@dataclass(frozen=True)
class Capacity:
    gpus: tuple[int, ...]  # every GPU index trainq manages
    blocked: frozenset[int]  # busy with a process trainq did not start: never handed out
    cpu_slots: int  # concurrent jobs with gpus == 0
    distance: Callable[[int, int], int]
    drained: frozenset[int] = frozenset()  # take no new job; their running jobs go on
    host_drained: bool = False  # nothing new starts at all


@dataclass(frozen=True)
class Limits:
    max_running_jobs_per_user: int = 0  # 0 = no limit
    max_gpus_per_user: int = 0  # 0 = no limit


@dataclass(frozen=True)
class Start:
    job_id: int
    gpus: tuple[int, ...]


@dataclass(frozen=True)
class Plan:
    starts: list[Start] = field(default_factory=list)
    waiting: dict[int, WaitReason] = field(default_factory=dict)  # job id -> why it waits
    wake_at: float | None = None  # plan again then: a held job becomes startable


@dataclass(frozen=True)
class Reservation:
    """What the head job is promised: `count` GPUs at `time` (math.inf: not foreseeable),
    with `spare` more free then that later jobs may hold past `time`."""

    job_id: int
    count: int
    time: float
    spare: int


def queue_order(job: QueuedJob) -> tuple[int, float, int]:
    return (-job.priority, job.submitted_at, job.id)


@dataclass
class _Pool:
    """What is in use while the plan is being built: running jobs plus the starts so far."""

    free_gpus: set[int]
    cpu_jobs: int
    jobs_by_user: Counter[int]
    gpus_by_user: Counter[int]
    # (expected end, GPUs it gives back that trainq may hand out again)
    releases: list[tuple[float, int]]

    def take(self, job: QueuedJob, gpus: tuple[int, ...], end: float) -> None:
        self.free_gpus.difference_update(gpus)
        self.jobs_by_user[job.owner_uid] += 1
        self.gpus_by_user[job.owner_uid] += len(gpus)
        if gpus:
            self.releases.append((end, len(gpus)))
        else:
            self.cpu_jobs += 1


def _pool_of(running: Sequence[RunningJob], capacity: Capacity) -> _Pool:
    usable = set(capacity.gpus) - capacity.blocked - capacity.drained
    taken = {gpu for job in running for gpu in job.gpus}
    pool = _Pool(
        free_gpus=usable - taken,
        cpu_jobs=sum(1 for job in running if not job.gpus),
        jobs_by_user=Counter(job.owner_uid for job in running),
        gpus_by_user=Counter(),
        releases=[],
    )
    for job in running:
        pool.gpus_by_user[job.owner_uid] += len(job.gpus)
        returned = len(set(job.gpus) & usable)
        if returned:
            end = math.inf if job.expected_end is None else job.expected_end
            pool.releases.append((end, returned))
    return pool


def _reserve(job: QueuedJob, pool: _Pool) -> Reservation:
    """When the head can start if everything running ends as expected, and what is spare."""
    available = len(pool.free_gpus)
    time = math.inf
    for end, count in sorted(pool.releases):
        available += count
        if available >= job.gpus:
            time = end
            break
    # Everything else that ends by then is free then too.
    at_time = len(pool.free_gpus) + sum(count for end, count in pool.releases if end <= time)
    return Reservation(job.id, job.gpus, time, max(0, at_time - job.gpus))


def _held_by_limits(job: QueuedJob, pool: _Pool, limits: Limits) -> WaitReason | None:
    jobs_limit, gpus_limit = limits.max_running_jobs_per_user, limits.max_gpus_per_user
    if jobs_limit and pool.jobs_by_user[job.owner_uid] >= jobs_limit:
        return WaitReason(Wait.USER_JOB_LIMIT, limit=jobs_limit)
    if gpus_limit and pool.gpus_by_user[job.owner_uid] + job.gpus > gpus_limit:
        return WaitReason(Wait.USER_GPU_LIMIT, limit=gpus_limit)
    return None


def plan(
    queue: Sequence[QueuedJob],
    running: Sequence[RunningJob],
    capacity: Capacity,
    limits: Limits,
    now: float,
) -> Plan:
    """Decide which of `queue` start now; see the module docstring for the policy."""
    pool = _pool_of(running, capacity)
    managed = len(capacity.gpus)
    starts: list[Start] = []
    waiting: dict[int, WaitReason] = {}
    wake_at: float | None = None
    head: Reservation | None = None
    foreign = len(set(capacity.gpus) & capacity.blocked)

    undrained = len(set(capacity.gpus) - capacity.drained)

    for job in sorted(queue, key=queue_order):
        if not 0 <= job.gpus <= managed:
            waiting[job.id] = WaitReason(Wait.TOO_BIG, gpus=job.gpus, host_gpus=managed)
            continue
        if job.held_by is not None:
            waiting[job.id] = WaitReason(Wait.HELD, by=job.held_by)
            continue
        if capacity.host_drained:
            waiting[job.id] = WaitReason(Wait.DRAINED)
            continue
        if job.gpus > undrained:
            waiting[job.id] = WaitReason(Wait.DRAINED, gpus=job.gpus, host_gpus=undrained)
            continue
        if job.not_before is not None and job.not_before > now:
            waiting[job.id] = WaitReason(Wait.BACKOFF, until=job.not_before)
            wake_at = job.not_before if wake_at is None else min(wake_at, job.not_before)
            continue
        held = _held_by_limits(job, pool, limits)
        if held is not None:
            waiting[job.id] = held
            continue
        end = math.inf if job.runtime_limit is None else now + job.runtime_limit

        if job.gpus == 0:
            if pool.cpu_jobs >= capacity.cpu_slots:
                waiting[job.id] = (
                    WaitReason(Wait.CPU_SLOT, limit=capacity.cpu_slots)
                    if capacity.cpu_slots
                    else WaitReason(Wait.NO_CPU_SLOTS)
                )
                continue
            pool.take(job, (), end)
            starts.append(Start(job.id, ()))
            continue

        free = len(pool.free_gpus)
        if free < job.gpus:
            expected = None
            if head is None:
                head = _reserve(job, pool)
                if not math.isinf(head.time):
                    # A job past its expected end is still stopping: "now", not the past.
                    expected = max(head.time, now)
            waiting[job.id] = WaitReason(
                Wait.GPUS, gpus=job.gpus, free=free, foreign=foreign or None, until=expected
            )
            continue
        if head is not None:
            # A job without a time limit never ends "before" anything, even a reservation
            # that cannot be foreseen: it must fit in the spare.
            done_in_time = end <= head.time and not math.isinf(end)
            if not done_in_time and job.gpus > head.spare:
                waiting[job.id] = WaitReason(Wait.RESERVED, job_id=head.job_id)
                continue
            if not done_in_time:
                # It will still hold its GPUs when the head starts: they come off the spare.
                head = Reservation(head.job_id, head.count, head.time, head.spare - job.gpus)
        gpus = choose_gpus(pool.free_gpus, job.gpus, capacity.distance)
        assert gpus is not None  # there were enough free GPUs
        pool.take(job, gpus, end)
        starts.append(Start(job.id, gpus))

    return Plan(starts=starts, waiting=waiting, wake_at=wake_at)
