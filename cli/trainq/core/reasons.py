"""Why a queued job waits: structured on the wire, put in words here, once.

trainqd decides the reason (`own_reason`, then its planner); the API sends it as data
(`JobRecord.waiting`) along with the words (`JobRecord.pending_reason`, made by `render`),
so a client can render it as it likes or read the numbers. Standard library only: the
CLI's fast path may import it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from trainq.core.dependencies import parse as parse_dependency


class Wait(StrEnum):
    QUEUED = "queued"  # not planned yet
    TOO_BIG = "too_big"  # needs more GPUs than the host has
    BACKOFF = "backoff"  # a retry waits for its backoff to run out
    USER_JOB_LIMIT = "user_job_limit"  # max_running_jobs_per_user
    USER_GPU_LIMIT = "user_gpu_limit"  # max_gpus_per_user
    CPU_SLOT = "cpu_slot"  # every CPU slot is in use
    NO_CPU_SLOTS = "no_cpu_slots"  # cpu_slots = 0
    GPUS = "gpus"  # not enough free GPUs
    RESERVED = "reserved"  # the free GPUs (or CPU slots: `slots`) are kept for an earlier job
    HELD = "held"  # held by its owner or an admin until released
    PAUSED = "paused"  # held after a running attempt was paused (`trainq hold` of it)
    DRAINED = "drained"  # an admin drained the host, or too many of its GPUs
    PREEMPTING = "preempting"  # running jobs of lower classes are being stopped for it
    # running jobs of users holding more GPUs than its owner will are being stopped for it
    PREEMPTING_SHARE = "preempting_share"
    SLURM = "slurm"  # handed to Slurm (backend = "slurm"), which has not started it yet
    DEPENDENCY = "dependency"  # a job (or group) in its `after` has not ended as it must


@dataclass(frozen=True)
class WaitReason:
    kind: Wait
    gpus: int | None = None  # GPUs the job needs
    free: int | None = None  # GPUs free now (GPUS); CPU slots free now (CPU_SLOT of `slots`)
    foreign: int | None = None  # GPUs busy with processes trainq did not start (GPUS)
    host_gpus: int | None = None  # GPUs trainq manages (TOO_BIG)
    limit: int | None = None  # the per-user limit, or the number of CPU slots
    until: float | None = None  # backoff's end, or when the GPUs are expected (epoch s)
    job_id: int | None = None  # the job the GPUs are reserved for (RESERVED)
    by: str | None = None  # who held the job (HELD)
    of_class: str | None = None  # the class whose per-user limit holds it (USER_*_LIMIT)
    slurm_job: int | None = None  # the Slurm job id (SLURM)
    after: str | None = None  # the first dependency not met yet, as written: "12:ok" (DEPENDENCY)
    # CPU slots a job of several nodes needs, one per CPU node (CPU_SLOT); those a job needs
    # that are kept for a job of several nodes before it (RESERVED)
    slots: int | None = None


def own_reason(
    held_by: str | None,
    not_before: float | None,
    now: float,
    *,
    paused: bool = False,
    unmet: str | None = None,
) -> WaitReason | None:
    """Why a queued job waits whatever the host has free, from its own record alone: the
    first of its hold (PAUSED where the hold paused it running), its retry's backoff and
    its first unmet dependency (`unmet`, as written in `after`); None if none holds it.

    The one order trainqd's planner, its Slurm back end, its dependencies and the API's
    views all take; what only a plan knows (too big, drained, limits, GPUs) comes after."""
    if held_by is not None:
        return WaitReason(Wait.PAUSED if paused else Wait.HELD, by=held_by)
    if not_before is not None and not_before > now:
        return WaitReason(Wait.BACKOFF, until=not_before)
    if unmet is not None:
        return WaitReason(Wait.DEPENDENCY, after=unmet)
    return None


def count_gpus(count: int) -> str:
    return "1 GPU" if count == 1 else f"{count} GPUs"


def clock(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp).strftime("%H:%M:%S")


def render(reason: WaitReason) -> str:
    """The reason in one line, as `trainq ls` and `trainq show` print it."""
    k, gpus = reason.kind, reason.gpus or 0
    if k == Wait.TOO_BIG:
        return f"needs {count_gpus(gpus)}; this host has {reason.host_gpus}"
    if k == Wait.BACKOFF:
        return f"retry backoff until {clock(reason.until or 0.0)}"
    of_class = "" if reason.of_class is None else f" of class {reason.of_class}"
    if k == Wait.USER_JOB_LIMIT:
        return f"held: max_running_jobs_per_user{of_class} ({reason.limit})"
    if k == Wait.USER_GPU_LIMIT:
        return f"held: max_gpus_per_user{of_class} ({reason.limit})"
    if k == Wait.CPU_SLOT and reason.slots is not None and reason.slots > 1:
        return f"waiting for {reason.slots} CPU slots ({reason.free} of {reason.limit} free)"
    if k == Wait.CPU_SLOT:
        return f"waiting for a CPU slot (all {reason.limit} in use)"
    if k == Wait.NO_CPU_SLOTS:
        return "no CPU slots: this daemon runs GPU jobs only (cpu_slots = 0)"
    if k == Wait.GPUS:
        why = f"waiting for {count_gpus(gpus)} ({reason.free} free"
        if reason.foreign:
            why += f", {reason.foreign} busy with processes trainq did not start"
        why += ")"
        if reason.until is not None:
            why += f", expected by {clock(reason.until)}"
        return why
    if k == Wait.RESERVED and reason.slots is not None:
        return f"CPU slots reserved for job {reason.job_id}"
    if k == Wait.RESERVED:
        return f"reserved GPUs for job {reason.job_id}"
    if k == Wait.HELD:
        return f"held by {reason.by}; `trainq release` lets it start"
    if k == Wait.PAUSED:
        return f"paused by {reason.by}; `trainq release` resumes it from its checkpoints"
    if k == Wait.DRAINED:
        if reason.host_gpus is None:
            return "the host is drained: nothing new starts until an admin resumes it"
        return (
            f"needs {count_gpus(gpus)}; {reason.host_gpus} are not drained"
            " (an admin drained the others)"
        )
    if k == Wait.DEPENDENCY and reason.after is not None:
        return f"waiting for {parse_dependency(reason.after).waiting_words()}"
    if k == Wait.SLURM:
        return f"queued in Slurm as job {reason.slurm_job}"
    if k == Wait.PREEMPTING:
        return f"preempting jobs of lower classes for {count_gpus(gpus)} ({reason.free} free)"
    if k == Wait.PREEMPTING_SHARE:
        return (
            f"preempting jobs of users over their share for {count_gpus(gpus)} ({reason.free} free)"
        )
    return "queued"
