from __future__ import annotations

from trainq.core.spec import JobSpec
from trainq.core.states import JobState
from trainqd.gpus.base import GpuUsage
from trainqd.planning import planner
from trainqd.planning.inputs import capacity, left_after, queued, running
from trainqd.store import JobOwner, JobRow


def row(
    job_id: int, state: JobState = JobState.PENDING, held: tuple[int, ...] = (), **spec: object
) -> JobRow:
    return JobRow(
        id=job_id, name=None, state=state, priority=int(str(spec.pop("priority", 0))),
        owner=JobOwner(1000, 1000, "alice"),
        spec=JobSpec.model_validate({"command": ["x"], **spec}),
        gpus=held, gpu_uuids=(), created_at=float(job_id), started_at=None, ended_at=None,
        failure_reason=None, stop_reason=None, not_before=None, runtime_used=30.0,
        attempt_count=0, lost_count=0,
    )  # fmt: skip


def test_a_limit_counts_what_earlier_attempts_used_and_the_grace() -> None:
    job = queued(row(1, max_runtime_seconds=100, stop_grace_seconds=5), 120)
    assert job.runtime_limit == 100 - 30 + 5
    assert queued(row(2), 120).runtime_limit is None
    assert running(row(3, JobState.RUNNING, (0,)), 50.0, 120).expected_end == 170.0
    assert running(row(4, JobState.RUNNING, (0,)), None, 120).expected_end is None


def test_only_gpus_nobody_of_ours_holds_are_blocked_by_processes() -> None:
    active = [row(1, JobState.RUNNING, (0,))]
    usage = [
        GpuUsage(0, 100, frozenset({11})),  # our job's process
        GpuUsage(1, 100, frozenset({12})),  # someone else's
        GpuUsage(2, None, frozenset(), error="NVML: unknown error"),  # unknown: busy
        GpuUsage(3, 0, frozenset()),
    ]
    cap = capacity(range(4), active, usage, 2, lambda a, b: 0)
    assert cap.blocked == {1, 2}
    assert capacity(range(4), active, None, 2, lambda a, b: 0).blocked == frozenset()


def test_what_a_plan_left() -> None:
    cap = planner.Capacity(gpus=(0, 1, 2, 3), blocked=frozenset({3}), cpu_slots=2,
                           distance=lambda a, b: 0)  # fmt: skip
    pending = [row(5, priority=3), row(6, priority=7, gpus=2)]
    active = [row(1, JobState.RUNNING, (0,)), row(2, JobState.RUNNING, ())]
    head = (0, 0, 0, 0.0, -7, 6.0, 6)
    left = left_after(cap, planner.Plan(head_key=head), pending, active)
    assert left == (2, 1, head)  # GPUs 1 and 2; one CPU slot; job 6 heads the GPU queue
    started = left_after(cap, planner.Plan(starts=[planner.Start(6, (1, 2))]), pending, active)
    assert started.head is None
