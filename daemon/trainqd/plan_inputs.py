"""What the planner is given, made from the store's rows (pure functions).

The planner (planner.py) knows nothing of jobs' specs or of GPU backends; these turn a job
into the few numbers it plans with, and summarise what a plan left free so a submission
that cannot start can skip planning (Scheduler.submitted).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

from trainqd import planner
from trainqd.gpus.base import GpuUsage
from trainqd.launch import remaining_runtime, stop_grace
from trainqd.store import JobRow

grace = stop_grace  # the planner's name for it: time a stopping job still holds its GPUs


def queued(job: JobRow, default_grace: float) -> planner.QueuedJob:
    remaining = remaining_runtime(job)
    return planner.QueuedJob(
        id=job.id,
        priority=job.priority,
        submitted_at=job.created_at,
        owner_uid=job.owner.uid,
        gpus=job.spec.gpus,
        # A job holds its GPUs until its stop's grace is over, not just to its limit.
        runtime_limit=(
            None if remaining is None else max(0.0, remaining) + grace(job, default_grace)
        ),
        not_before=job.not_before,
        held_by=job.held_by,
    )


def running(job: JobRow, deadline: float | None, default_grace: float) -> planner.RunningJob:
    return planner.RunningJob(
        id=job.id,
        owner_uid=job.owner.uid,
        gpus=job.gpus,
        expected_end=None if deadline is None else deadline + grace(job, default_grace),
    )


def capacity(
    gpus: Iterable[int],
    active: Iterable[JobRow],
    usage: Sequence[GpuUsage] | None,
    cpu_slots: int,
    distance: Callable[[int, int], int],
) -> planner.Capacity:
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
    )


class Left(NamedTuple):
    """What a plan left: free GPUs, free CPU slots, and the priority of the first GPU job
    left waiting (None: none waits)."""

    free_gpus: int
    free_slots: int
    head_priority: int | None


NOTHING_LEFT = Left(0, 0, None)


def left_after(
    cap: planner.Capacity, plan: planner.Plan, pending: Sequence[JobRow], active: Sequence[JobRow]
) -> Left:
    """`active` as it is after the plan's starts were made."""
    held = {gpu for job in active for gpu in job.gpus}
    started = {start.job_id for start in plan.starts}
    waiting = [j.priority for j in pending if j.spec.gpus and j.id not in started]
    return Left(
        free_gpus=len(set(cap.gpus) - cap.blocked - held),
        free_slots=cap.cpu_slots - sum(1 for job in active if not job.gpus),
        head_priority=max(waiting, default=None),
    )
