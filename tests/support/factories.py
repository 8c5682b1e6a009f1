"""Values tests build their cases from: owners, the store's rows, exit records,
configurations, the tune example."""

from __future__ import annotations

from pathlib import Path

from trainq.core.outcomes import ExitRecord
from trainq.core.spec import JobSpec
from trainq.core.states import JobState
from trainqd.store import AttemptRow, JobOwner, JobRow

REPO = Path(__file__).resolve().parents[2]

# The owner of the jobs the store's own tests submit (no such user need exist).
OWNER = JobOwner(uid=1000, gid=1000, user="alice")


def job(state: JobState = JobState.RUNNING, **spec: object) -> JobRow:
    """Job 1 of alice's as the store holds it, in `state`, on GPU 0, in its first attempt."""
    return JobRow(
        id=1,
        name="j",
        state=state,
        priority=0,
        owner=OWNER,
        spec=JobSpec.model_validate({"command": ["x"], "retry_backoff_seconds": 1, **spec}),
        gpus=(0,),
        gpu_uuids=("u",),
        created_at=0.0,
        started_at=1.0,
        ended_at=None,
        failure_reason=None,
        stop_reason="stopped by bob" if state == JobState.STOPPING else None,
        not_before=None,
        runtime_used=0.0,
        attempt_count=1,
        lost_count=0,
    )


def record(
    outcome: str,
    *,
    exit_code: int | None = None,
    signal: int | None = None,
    reason: str | None = None,
) -> ExitRecord:
    """The exit record of job 1's first attempt, as its monitor writes it."""
    return ExitRecord(1, 1, outcome, 1.0, 2.0, exit_code=exit_code, signal=signal, reason=reason)


def attempt(number: int, outcome: str, exit_code: int | None = None) -> AttemptRow:
    """Attempt `number` of job 1 as the store holds it."""
    return AttemptRow(
        1, number, (0,), 0.0, 1.0, exit_code, None, outcome, None, True, None, None, None
    )


# preemptible batch jobs, urgent ones that may preempt them at once
PREEMPTION_CONFIG = """
default_stop_grace_seconds = 10
preempt_after_seconds = 0
min_runtime_before_preemption_seconds = 0
default_class = "batch"

[classes.batch]
preemptible = true

[classes.urgent]
weight = 10
may_preempt = true
max_runtime_seconds = 600

[classes.staff]
weight = 5
users = ["daemon"]
"""


# examples/tune and the metric its trainer prints
TUNE_EXAMPLE = REPO / "examples" / "tune"
TUNE_OBJECTIVE = {"name": "val_loss", "regex": r"epoch (?P<step>[0-9]+) val_loss=([-+0-9.eE]+)"}
