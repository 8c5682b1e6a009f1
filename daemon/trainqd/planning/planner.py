"""The scheduling decision: which queued jobs start now, on which GPUs, which running jobs
are preempted for them, and why the others wait (docs/architecture.md).

`plan` is a pure function of the queue, the running jobs, the capacity, the limits, the
users' recent usage and the time it is given; it reads no clock and does no I/O, so the
daemon can call it on every event and tests can replay any situation.

The policy is a fair-share priority queue with EASY backfill and preemption:

- Jobs are considered in order: an admin's boost first, then the class's weight, then a
  job that running jobs were just preempted for (it takes the GPUs they free), then the
  owner's usage (fair share: the decayed GPU time, or CPU-slot time for CPU jobs, of their
  recent attempts, plus what their running jobs will use in the next hour), then the
  owner's own priority, then earlier submission, then id. A user's priority so orders only
  their own jobs. Once a job starts, its owner's usage counts what it will use in the next
  hour, so users' jobs interleave even when one of them queued a thousand at once.
- A job that fits on free GPUs starts, on the closest free GPUs (topology.choose_gpus).
- The first GPU job that does not fit becomes the *head*: it gets a reservation, the
  earliest time enough GPUs will be free counting the running jobs' expected ends (never,
  when that depends on a job without a time limit), and the number of GPUs that will be
  free then beyond its need (the *spare*).
- A head whose class may preempt, and whose reservation is not within `preempt_after`
  seconds, takes GPUs from running jobs of preemptible classes with a lower rank (boost,
  weight) that have run at least `min_runtime` in their attempt: those that lose the least
  work (GPU time since their attempt started), as few as let it start, and only if they
  do. GPUs already being freed by stopping jobs count first. With `share_preemption` (and
  fair share), jobs of the head's own rank may be taken too, from users who would still
  hold at least as many GPUs as the head's owner then (choose_victims); and a job behind
  the head may take such GPUs as well, when it could then start as a backfill. Such a job
  is then considered right after the head (QueuedJob.backfill_claim), so that the GPUs its
  victims free are its own.
- A later job that fits now may still start, but only if it cannot delay the head: it ends
  (now + its time limit) no later than the reservation, or it fits in the spare.
- CPU jobs (gpus = 0) have their own pool of slots, one per node without GPUs (a job of
  several nodes may take slots and GPUs together); they never wait for, nor hold back,
  GPU jobs, and are never preempted. The first job of several CPU nodes that waits for
  slots keeps them: no later job takes a slot before it starts. Per-user and per-class
  limits, retry backoff and holds keep a job back without it reserving anything. Drained
  GPUs take no new job (a drained host starts nothing); the jobs running on them go on.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from trainq.core.reasons import Wait, WaitReason, own_reason
from trainqd.planning.order import (
    LOOKAHEAD,
    ClaimantsAfterHead,
    Lane,
    QueueOrder,
    committed,
    expected_use,
    queue_order,
)
from trainqd.planning.records import (
    DEFAULT_CLASS,
    Capacity,
    ClassLimits,
    Limits,
    OrderKey,
    Plan,
    Preemption,
    QueuedJob,
    Reservation,
    RunningJob,
    Sharing,
    Start,
    slots_of,
    slots_wait,
)
from trainqd.planning.topology import choose_gpus
from trainqd.planning.victims import choose_victims, next_ripe

# The planner's vocabulary, for the modules that give it inputs and read its plans.
__all__ = [
    "DEFAULT_CLASS",
    "LOOKAHEAD",
    "Capacity",
    "ClassLimits",
    "Limits",
    "OrderKey",
    "Plan",
    "Preemption",
    "QueuedJob",
    "RunningJob",
    "Sharing",
    "Start",
    "choose_victims",
    "expected_use",
    "plan",
    "queue_order",
    "slots_of",
    "slots_wait",
]


@dataclass
class _Pool:
    """What is in use while the plan is being built: running jobs plus the starts so far."""

    free_gpus: set[int]
    cpu_slots: int  # CPU slots taken: one per node without GPUs
    jobs_by_user: Counter[int]
    gpus_by_user: Counter[int]
    jobs_by_class: Counter[tuple[int, str]]
    gpus_by_class: Counter[tuple[int, str]]
    # (expected end, GPUs it gives back that trainq may hand out again)
    releases: list[tuple[float, int]]

    def take(self, job: QueuedJob, gpus: tuple[int, ...], end: float) -> None:
        self.free_gpus.difference_update(gpus)
        self.jobs_by_user[job.owner_uid] += 1
        self.gpus_by_user[job.owner_uid] += len(gpus)
        self.jobs_by_class[job.owner_uid, job.job_class] += 1
        self.gpus_by_class[job.owner_uid, job.job_class] += len(gpus)
        if gpus:
            self.releases.append((end, len(gpus)))
        self.cpu_slots += job.slots


def _usable(capacity: Capacity) -> set[int]:
    return set(capacity.gpus) - capacity.blocked - capacity.drained


def _pool_of(running: Sequence[RunningJob], capacity: Capacity) -> _Pool:
    usable = _usable(capacity)
    taken = {gpu for job in running for gpu in job.gpus}
    pool = _Pool(
        free_gpus=usable - taken,
        cpu_slots=sum(job.slots for job in running),
        jobs_by_user=Counter(job.owner_uid for job in running),
        gpus_by_user=Counter(),
        jobs_by_class=Counter((job.owner_uid, job.job_class) for job in running),
        gpus_by_class=Counter(),
        releases=[],
    )
    for job in running:
        pool.gpus_by_user[job.owner_uid] += len(job.gpus)
        pool.gpus_by_class[job.owner_uid, job.job_class] += len(job.gpus)
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
    own = limits.classes.get(job.job_class)
    if own is not None:
        key = (job.owner_uid, job.job_class)
        jobs_limit, gpus_limit = own.max_running_jobs_per_user, own.max_gpus_per_user
        if jobs_limit and pool.jobs_by_class[key] >= jobs_limit:
            return WaitReason(Wait.USER_JOB_LIMIT, limit=jobs_limit, of_class=job.job_class)
        if gpus_limit and pool.gpus_by_class[key] + job.gpus > gpus_limit:
            return WaitReason(Wait.USER_GPU_LIMIT, limit=gpus_limit, of_class=job.job_class)
    return None


def _ready(job: QueuedJob, pool: _Pool, capacity: Capacity, limits: Limits, now: float) -> bool:
    """Whether a GPU job may start now on the free GPUs, nothing else considered."""
    return (
        job.held_by is None
        and not capacity.host_drained
        and (job.not_before is None or job.not_before <= now)
        and _held_by_limits(job, pool, limits) is None
        and 0 < job.gpus <= len(pool.free_gpus)
        and pool.cpu_slots + job.slots <= capacity.cpu_slots
    )


def _held(
    pool: _Pool, running: Sequence[RunningJob], preempted: Mapping[int, QueuedJob]
) -> Counter[int]:
    """Each user's GPUs as far as the plan has got: what their running jobs hold and go on
    holding (not stopping, nor preempted by this plan), what the plan has started for them,
    and what it has preempted for them (victim id -> the job it makes room for)."""
    held = Counter(pool.gpus_by_user)
    for r in running:
        if r.stopping or r.id in preempted:
            held[r.owner_uid] -= len(r.gpus)
    for job in {j.id: j for j in preempted.values()}.values():
        held[job.owner_uid] += job.gpus
    return held


def _earliest(when: float | None, other: float | None) -> float | None:
    return other if when is None else when if other is None else min(when, other)


def plan(
    queue: Sequence[QueuedJob],
    running: Sequence[RunningJob],
    capacity: Capacity,
    limits: Limits,
    now: float,
    *,
    sharing: Sharing | None = None,
) -> Plan:
    """Decide which of `queue` start now; see the module docstring for the policy."""
    sharing = sharing or Sharing()
    pool = _pool_of(running, capacity)
    usable = _usable(capacity)
    managed = len(capacity.gpus)
    starts: list[Start] = []
    waiting: dict[int, WaitReason] = {}
    preemptions: list[Preemption] = []
    order: list[int] = []
    wake_at: float | None = None
    head: Reservation | None = None
    head_key: OrderKey | None = None
    # The first job of several CPU nodes that waits for CPU slots keeps them: no later job
    # takes one before it has started (else it would wait behind every job of one slot).
    slots_head: int | None = None
    foreign = len(set(capacity.gpus) & capacity.blocked)
    # Users one of whose GPU jobs, ahead of the head, waits for a per-user limit: preempting
    # their job would free that limit, and the freed GPUs could go to that job instead.
    limited: set[int] = set()
    # Victims of this plan's preemptions -> the job each makes room for.
    preempted: dict[int, QueuedJob] = {}

    def preempt(victims: Sequence[RunningJob], job: QueuedJob) -> None:
        preemptions.extend(Preemption(v.id, job.id) for v in victims)
        preempted.update((v.id, job) for v in victims)

    undrained = len(set(capacity.gpus) - capacity.drained)
    share_preemption = sharing.fair and sharing.share_preemption

    def shares(job: QueuedJob) -> bool:
        """Whether the job may preempt for fair share (share_preemptors.py)."""
        return share_preemption and job.owner_uid not in sharing.share_barred

    usage: dict[Lane, float] | None = None
    if sharing.fair:
        usage = {}
        for uid, used in sharing.gpu_usage.items():
            usage[uid, True] = used
        for uid, used in sharing.cpu_usage.items():
            usage[uid, False] = used
        for r in running:
            lane = (r.owner_uid, bool(r.gpus))
            usage[lane] = usage.get(lane, 0.0) + committed(r, now)

    # A job that preempted behind the head starts first within its rank once its victims'
    # GPUs are free: jobs sorting before it (its victims, queued again, among them) would
    # otherwise take them back. One that cannot start now waits right after the head, never
    # in its place (which would take the head's reservation).
    claimants = sorted((j for j in queue if j.backfill_claim), key=queue_order)
    early: set[int] = set()
    if claimants:
        top = min((-j.boost, -j.weight) for j in queue)
        for job in claimants:
            if (-job.boost, -job.weight) != top or not _ready(job, pool, capacity, limits, now):
                continue
            gpus = choose_gpus(pool.free_gpus, job.gpus, capacity.distance)
            assert gpus is not None  # _ready: there are enough free GPUs
            end = math.inf if job.runtime_limit is None else now + job.runtime_limit
            pool.take(job, gpus, end)
            starts.append(Start(job.id, gpus))
            order.append(job.id)
            early.add(job.id)
            if usage is not None:
                lane = (job.owner_uid, True)
                usage[lane] = usage.get(lane, 0.0) + expected_use(job.gpus, job.runtime_limit)
    ordered = QueueOrder(queue, usage)

    turns = ClaimantsAfterHead(ordered, [j for j in claimants if j.id not in early], early)
    for job in turns:
        order.append(job.id)
        own = own_reason(job.held_by, job.not_before, now)
        if own is not None:
            waiting[job.id] = own
            if own.kind == Wait.BACKOFF and job.not_before is not None:
                wake_at = _earliest(wake_at, job.not_before)
            continue
        if not 0 <= job.gpus <= managed:
            waiting[job.id] = WaitReason(Wait.TOO_BIG, gpus=job.gpus, host_gpus=managed)
            continue
        if capacity.host_drained:
            waiting[job.id] = WaitReason(Wait.DRAINED)
            continue
        if job.gpus > undrained:
            waiting[job.id] = WaitReason(Wait.DRAINED, gpus=job.gpus, host_gpus=undrained)
            continue
        held = _held_by_limits(job, pool, limits)
        if held is not None:
            waiting[job.id] = held
            if job.gpus and head is None:
                limited.add(job.owner_uid)
            continue
        end = math.inf if job.runtime_limit is None else now + job.runtime_limit

        # A job of several nodes takes a CPU slot for each node without GPUs, beside the
        # GPUs of the others; it waits for them without reserving GPUs meanwhile.
        if job.slots and slots_head is not None:
            waiting[job.id] = WaitReason(Wait.RESERVED, job_id=slots_head, slots=job.slots)
            continue
        if job.slots and pool.cpu_slots + job.slots > capacity.cpu_slots:
            free_slots = capacity.cpu_slots - pool.cpu_slots
            waiting[job.id] = slots_wait(job.slots, free_slots, capacity.cpu_slots)
            if job.slots > 1 and capacity.cpu_slots >= job.slots:
                slots_head = job.id
            continue
        if job.gpus == 0:
            pool.take(job, (), end)
            starts.append(Start(job.id, ()))
            if sharing.fair:
                ordered.charge(job, expected_use(job.slots, job.runtime_limit))
            continue

        free = len(pool.free_gpus)
        if free < job.gpus:
            expected = None
            if head is None:
                head = _reserve(job, pool)
                turns.head_found = True
                head_key = queue_order(job, ordered.used(job))
                soon = head.time <= now + sharing.preempt_after
                victims = None
                if job.may_preempt and not soon:
                    victims = choose_victims(
                        job,
                        free=free,
                        running=running,
                        usable=usable,
                        sharing=sharing,
                        now=now,
                        spared_users=limited,
                        held=_held(pool, running, preempted) if shares(job) else None,
                    )
                if victims is None and job.may_preempt and not soon:
                    wake_at = _earliest(wake_at, next_ripe(running, sharing, now))
                if victims is not None:
                    preempt(victims, job)
                    stopping = [r for r in running if r.stopping or r in victims]
                    freed = sum(len(set(r.gpus) & usable) for r in stopping)
                    # The head starts once its victims (and other stopping jobs) are gone.
                    time = now + max((r.grace for r in stopping), default=0.0)
                    head = Reservation(job.id, job.gpus, time, max(0, free + freed - job.gpus))
                    # What it waits for: its victims, or, once they are all stopping, the jobs
                    # stopping (for it, as far as the plan can tell).
                    rank = (job.boost, job.weight)
                    lower = all((r.boost, r.weight) < rank for r in victims or stopping)
                    kind = Wait.PREEMPTING if lower else Wait.PREEMPTING_SHARE
                    waiting[job.id] = WaitReason(kind, gpus=job.gpus, free=free)
                    continue
                if not math.isinf(head.time):
                    # A job past its expected end is still stopping: "now", not the past.
                    expected = max(head.time, now)
            elif shares(job) and job.may_preempt:
                # Behind the head, fair share may still make room for a job, from users over
                # their share, when the job could then start as a backfill: ending before
                # the head's reservation, or within its spare.
                soon = _reserve(job, pool).time <= now + sharing.preempt_after
                # The GPUs its own victims are freeing (it comes right after the head).
                freeing = sum(
                    len(set(r.gpus) & usable)
                    for r in running
                    if r.stopping and r.id in job.backfill_claim
                )
                victims = None
                if head.admits(job.gpus, end) and (freeing or not soon):
                    # Its victims alone must make the room: the free GPUs and others being
                    # freed may go to jobs before it (the head first) or to later backfills.
                    victims = choose_victims(
                        job,
                        free=freeing,
                        running=[r for r in running if r.id not in preempted and not r.stopping],
                        usable=usable,
                        sharing=sharing,
                        now=now,
                        spared_users=limited,
                        held=_held(pool, running, preempted),
                        only_share=True,
                    )
                if victims is None and head.admits(job.gpus, end) and not soon:
                    wake_at = _earliest(wake_at, next_ripe(running, sharing, now))
                if victims is not None:  # [] when its own victims' GPUs are enough
                    preempt(victims, job)
                    head = head.beside(job.gpus, end)
                    waiting[job.id] = WaitReason(Wait.PREEMPTING_SHARE, gpus=job.gpus, free=free)
                    continue
            waiting[job.id] = WaitReason(
                Wait.GPUS, gpus=job.gpus, free=free, foreign=foreign or None, until=expected
            )
            continue
        if head is not None:
            if not head.admits(job.gpus, end):
                waiting[job.id] = WaitReason(Wait.RESERVED, job_id=head.job_id)
                continue
            head = head.beside(job.gpus, end)
        gpus = choose_gpus(pool.free_gpus, job.gpus, capacity.distance)
        assert gpus is not None  # there were enough free GPUs
        pool.take(job, gpus, end)
        starts.append(Start(job.id, gpus))
        if sharing.fair:
            ordered.charge(job, expected_use(job.gpus, job.runtime_limit))

    return Plan(
        starts=starts,
        waiting=waiting,
        wake_at=wake_at,
        preemptions=preemptions,
        order=order,
        head_key=head_key,
        gpu_usage={uid: used for (uid, gpu), used in (usage or {}).items() if gpu},
    )
