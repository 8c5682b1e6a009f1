"""What the planner is given, made from the store's rows (pure functions).

The planner (planner.py) knows nothing of jobs' specs or of GPU backends; these turn a job
into the few numbers it plans with, and summarise what a plan left free so a submission
that cannot start can skip planning (Scheduler.submitted).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from trainq.core.nodes import cpu_nodes, is_gang
from trainq.core.states import JobState
from trainqd.attempts.launch import remaining_runtime, stop_grace
from trainqd.gpus.base import GpuUsage
from trainqd.planning import classes, planner
from trainqd.planning.classes import JobClass
from trainqd.store import JobRow
from trainqd.store.rows import HOST

grace = stop_grace  # the planner's name for it: time a stopping job still holds its GPUs


IMPLICIT = (planner.DEFAULT_CLASS, JobClass())  # the class when none is configured


def class_of(
    job: JobRow, defined: Mapping[str, JobClass], default_class: str
) -> tuple[str, JobClass]:
    """The job's class, its name and definition."""
    name = classes.class_of(job.spec.job_class, default_class)
    # A class the administrator has since removed: the job is planned as a plain one.
    return name, defined.get(name) or IMPLICIT[1]


@dataclass(frozen=True)
class Snapshot:
    """The sharing policy's state as one plan sees it (policy.SharingPolicy.prepare): copies
    taken on the event loop, so that `jobs` can run on a worker thread while the loop goes
    on changing the originals."""

    classes: Mapping[str, JobClass]
    default_class: str
    default_grace: float
    deadlines: Mapping[int, float]  # running job -> when its time limit falls due
    attempt_starts: Mapping[int, float]  # running job -> its attempt's start
    stop_due: Mapping[int, float]  # preemption victims -> when their grace is over
    # Jobs that running jobs were just preempted for, each with its row then: first within
    # their rank while the row is the same (policy.SharingPolicy.claims).
    claims: Mapping[int, JobRow]
    settings: planner.Sharing
    # Jobs behind the head that running jobs were just preempted for, each with its row
    # then and its victims: right after the head while the row is the same.
    backfill_claims: Mapping[int, tuple[JobRow, frozenset[int]]] = field(default_factory=dict)

    def jobs(
        self, pending: Sequence[JobRow], active: Sequence[JobRow]
    ) -> tuple[list[planner.QueuedJob], list[planner.RunningJob]]:
        """The planner's queue and running jobs."""
        grace = self.default_grace
        queue = [
            queued(
                job,
                grace,
                class_of(job, self.classes, self.default_class),
                claiming=self.claims.get(job.id) is job,
                backfill_claim=_backfill_claim(self.backfill_claims.get(job.id), job),
            )
            for job in pending
        ]
        running_jobs = [
            running(
                job,
                self.deadlines.get(job.id),
                grace,
                class_of(job, self.classes, self.default_class),
                attempt_started=self.attempt_starts.get(job.id),
                stop_due=self.stop_due.get(job.id),
            )
            for job in active
        ]
        return queue, running_jobs


def _backfill_claim(claim: tuple[JobRow, frozenset[int]] | None, job: JobRow) -> frozenset[int]:
    return claim[1] if claim is not None and claim[0] is job else frozenset()


def gang_cpu_nodes(job: JobRow) -> int | None:
    """A job of several nodes' nodes without GPUs; None for a job of one node, whose GPUs
    alone say whether it takes a CPU slot (records.slots_of)."""
    return cpu_nodes(job.spec) if is_gang(job.spec) else None


def slots(job: JobRow) -> int:
    """The CPU slots an active job holds."""
    return planner.slots_of(len(job.gpus), gang_cpu_nodes(job))


def queued(
    job: JobRow,
    default_grace: float,
    job_class: tuple[str, JobClass] = IMPLICIT,
    *,
    claiming: bool = False,
    backfill_claim: frozenset[int] = frozenset(),
) -> planner.QueuedJob:
    """`job_class`: the job's class, its name and definition (sharing.py resolves it)."""
    remaining = remaining_runtime(job)
    name, defined = job_class
    return planner.QueuedJob(
        id=job.id,
        priority=job.priority,
        submitted_at=job.created_at,
        owner_uid=job.owner.uid,
        gpus=job.spec.total_gpus,
        # A job holds its GPUs until its stop's grace is over, not just to its limit.
        runtime_limit=(
            None if remaining is None else max(0.0, remaining) + grace(job, default_grace)
        ),
        not_before=job.not_before,
        held_by=job.held_by,
        boost=job.boost,
        job_class=name,
        weight=defined.weight,
        may_preempt=defined.may_preempt,
        claiming=claiming,
        backfill_claim=backfill_claim,
        cpu_nodes=gang_cpu_nodes(job),
    )


def running(
    job: JobRow,
    deadline: float | None,
    default_grace: float,
    job_class: tuple[str, JobClass] = IMPLICIT,
    *,
    attempt_started: float | None = None,
    stop_due: float | None = None,
) -> planner.RunningJob:
    """`stop_due`: when a stop trainq asked for (a preemption) has ended it at the latest."""
    name, defined = job_class
    own_grace = grace(job, default_grace)
    expected_end = None if deadline is None else deadline + own_grace
    if stop_due is not None:
        expected_end = stop_due if expected_end is None else min(expected_end, stop_due)
    return planner.RunningJob(
        id=job.id,
        owner_uid=job.owner.uid,
        gpus=job.gpus,
        expected_end=expected_end,
        job_class=name,
        boost=job.boost,
        weight=defined.weight,
        preemptible=defined.preemptible,
        attempt_started=attempt_started,
        stopping=job.state == JobState.STOPPING,
        grace=own_grace,
        cpu_nodes=gang_cpu_nodes(job),
    )


def capacity(
    gpus: Iterable[int],
    active: Iterable[JobRow],
    usage: Sequence[GpuUsage] | None,
    cpu_slots: int,
    distance: Callable[[int, int], int],
    *,
    drains: Collection[int] = (),
) -> planner.Capacity:
    """`drains`: the drained GPUs' indices, rows.HOST for the whole host (Store.drains)."""
    blocked: set[int] = set()
    if usage:
        assigned = {gpu for job in active for gpu in job.gpus}
        for gpu in usage:
            if gpu.taken_by_others(held_by_trainq=gpu.index in assigned):
                blocked.add(gpu.index)
    return planner.Capacity(
        gpus=tuple(sorted(gpus)),
        blocked=frozenset(blocked),
        cpu_slots=cpu_slots,
        distance=distance,
        drained=frozenset(gpu for gpu in drains if gpu != HOST),
        host_drained=HOST in drains,
    )


class Left(NamedTuple):
    """What a plan left: free GPUs, free CPU slots, and the order key (planner.queue_order)
    of the head, the first GPU job left waiting for GPUs (None: none does)."""

    free_gpus: int
    free_slots: int
    head: planner.OrderKey | None


NOTHING_LEFT = Left(0, 0, None)


def left_after(
    cap: planner.Capacity, plan: planner.Plan, pending: Sequence[JobRow], active: Sequence[JobRow]
) -> Left:
    """`active` as it is after the plan's starts were made."""
    held = {gpu for job in active for gpu in job.gpus}
    return Left(
        free_gpus=len(set(cap.gpus) - cap.blocked - cap.drained - held),
        free_slots=cap.cpu_slots - sum(slots(job) for job in active),
        head=plan.head_key,
    )
