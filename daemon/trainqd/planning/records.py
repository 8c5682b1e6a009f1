"""What the planner (planner.py) is given and what it returns: plain frozen records, free
of jobs' specs, rows and clocks (plan_inputs.py makes them from the store's rows)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from trainq.core.reasons import Wait, WaitReason

DEFAULT_CLASS = "default"


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
    boost: int = 0  # an admin's raise above other users' work
    job_class: str = DEFAULT_CLASS
    weight: int = 0  # its class's order weight
    may_preempt: bool = False  # its class may take GPUs from preemptible jobs
    # Running jobs were just preempted for it: it goes first within its rank (boost, weight),
    # so that the GPUs they free are its own and not taken again by a job of that rank
    # before it, its victims included.
    claiming: bool = False
    # Running jobs (these ids) were just preempted for it behind the head, as a backfill:
    # it is considered right after the head, so that the GPUs they free go to it rather
    # than to jobs sorting before it (its victims, queued again, among them), and their
    # stopping is its room coming, not a reason to preempt again.
    backfill_claim: frozenset[int] = frozenset()
    cpu_nodes: int | None = None  # see slots_of

    @property
    def slots(self) -> int:
        return slots_of(self.gpus, self.cpu_nodes)


def slots_of(gpus: int, cpu_nodes: int | None) -> int:
    """The CPU slots a job takes: one per node of it that has no GPU (trainq.core.nodes'
    cpu_nodes); None, as for a job of one node: one if it has no GPU at all."""
    if cpu_nodes is None:
        return 0 if gpus else 1
    return cpu_nodes


def slots_wait(slots: int, free: int, total: int) -> WaitReason:
    """Why a job of `slots` CPU slots waits with `free` of the host's `total` free."""
    if not total:
        return WaitReason(Wait.NO_CPU_SLOTS)
    if slots == 1:
        return WaitReason(Wait.CPU_SLOT, limit=total)
    return WaitReason(Wait.CPU_SLOT, limit=total, slots=slots, free=max(0, free))


@dataclass(frozen=True)
class RunningJob:
    id: int
    owner_uid: int
    gpus: tuple[int, ...]  # () for a CPU job, which holds a CPU slot
    expected_end: float | None  # None = no time limit
    job_class: str = DEFAULT_CLASS
    boost: int = 0
    weight: int = 0
    preemptible: bool = False  # its class's jobs may be preempted
    attempt_started: float | None = None  # when its current attempt started
    stopping: bool = False  # being stopped: its GPUs come free within its grace
    grace: float = 0.0  # how long a stop may take
    cpu_nodes: int | None = None  # see slots_of

    @property
    def slots(self) -> int:
        return slots_of(len(self.gpus), self.cpu_nodes)


@dataclass(frozen=True)
class Capacity:
    gpus: tuple[int, ...]  # every GPU index trainq manages
    blocked: frozenset[int]  # busy with a process trainq did not start: never handed out
    cpu_slots: int  # concurrent nodes without GPUs (a job of one node: gpus == 0)
    distance: Callable[[int, int], int]
    drained: frozenset[int] = frozenset()  # take no new job; their running jobs go on
    host_drained: bool = False  # nothing new starts at all


@dataclass(frozen=True)
class ClassLimits:
    max_running_jobs_per_user: int = 0  # 0 = no limit
    max_gpus_per_user: int = 0  # 0 = no limit


@dataclass(frozen=True)
class Limits:
    max_running_jobs_per_user: int = 0  # 0 = no limit
    max_gpus_per_user: int = 0  # 0 = no limit
    classes: Mapping[str, ClassLimits] = field(default_factory=dict)  # a class's own limits


@dataclass(frozen=True)
class Sharing:
    """Fair share and preemption settings, and each user's recent usage."""

    fair: bool = False  # order users by usage (off: boost, weight, priority, submit order)
    gpu_usage: Mapping[int, float] = field(default_factory=dict)  # uid -> decayed GPU-seconds
    cpu_usage: Mapping[int, float] = field(default_factory=dict)  # uid -> CPU-slot-seconds
    preempt_after: float = 300.0  # preempt only when GPUs would not come free sooner
    min_runtime: float = 600.0  # never preempt an attempt younger than this
    # Also preempt jobs of the head's own rank, of users who would still hold at least as
    # many GPUs as the head's owner then (with fair share only).
    share_preemption: bool = False
    # Users whose last fair-share preemptor ran too briefly (share_preemptors.py): their jobs
    # may not preempt for fair share.
    share_barred: frozenset[int] = frozenset()


@dataclass(frozen=True)
class Start:
    job_id: int
    gpus: tuple[int, ...]


@dataclass(frozen=True)
class Preemption:
    victim: int  # the running job to stop and queue again
    for_job: int  # the waiting job it makes room for


@dataclass(frozen=True)
class Plan:
    starts: list[Start] = field(default_factory=list)
    waiting: dict[int, WaitReason] = field(default_factory=dict)  # job id -> why it waits
    # Plan again then: a job in backoff becomes startable, or a running job old enough to
    # be preempted for a job that waits.
    wake_at: float | None = None
    preemptions: list[Preemption] = field(default_factory=list)
    # The queue's job ids in order (`trainq ls`'s place); not part of the decision.
    order: list[int] = field(default_factory=list, compare=False)
    # The head's order key: a job submitted later that sorts after it cannot start before
    # the next plan (Scheduler.submitted_many).
    head_key: OrderKey | None = field(default=None, compare=False)
    # Each user's GPU usage as the plan ended (running and started jobs' next hour
    # counted): what the next plan begins with, less the little that passing time takes.
    gpu_usage: dict[int, float] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class Reservation:
    """What the head job is promised: `count` GPUs at `time` (math.inf: not foreseeable),
    with `spare` more free then that later jobs may hold past `time`."""

    job_id: int
    count: int
    time: float
    spare: int

    def ends_before(self, end: float) -> bool:
        """Whether a job ending at `end` is gone by the reservation's time. A job without a
        time limit never ends "before" anything, even a reservation that cannot be
        foreseen."""
        return end <= self.time and not math.isinf(end)

    def admits(self, gpus: int, end: float) -> bool:
        """Whether a later job may run beside it (backfill) without delaying its job: it
        ends before the reservation's time, or fits in the spare."""
        return self.ends_before(end) or gpus <= self.spare

    def beside(self, gpus: int, end: float) -> Reservation:
        """The reservation once such a job runs: GPUs still held at its time come off the
        spare."""
        if self.ends_before(end):
            return self
        return dataclasses.replace(self, spare=self.spare - gpus)


OrderKey = tuple[int, int, int, float, int, float, int]
