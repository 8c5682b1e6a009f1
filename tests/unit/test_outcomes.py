from __future__ import annotations

import signal

from trainq.core.outcomes import ExitRecord
from trainq.core.spec import JobSpec
from trainq.core.states import JobState
from trainqd.scheduling.outcomes import LOST_REASON, judge_end
from trainqd.store.store import AttemptRow, JobOwner, JobRow


def job(state: JobState = JobState.RUNNING, **spec: object) -> JobRow:
    return JobRow(
        id=1,
        name="j",
        state=state,
        priority=0,
        owner=JobOwner(1000, 1000, "alice"),
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
    return ExitRecord(1, 1, outcome, 1.0, 2.0, exit_code=exit_code, signal=signal, reason=reason)


def attempt(number: int, outcome: str, exit_code: int | None = None) -> AttemptRow:
    return AttemptRow(
        1, number, (0,), 0.0, 1.0, exit_code, None, outcome, None, True, None, None, None
    )


def test_success() -> None:
    result = judge_end(job(), [], record("exited", exit_code=0), 5.0)
    assert result.target == JobState.COMPLETED
    assert result.changes.ended_at == 5.0


def test_failure_reason_is_the_failure_file_or_a_description() -> None:
    failed = judge_end(job(), [], record("exited", exit_code=3, reason="x" * 2000), 5.0)
    assert failed.target == JobState.FAILED
    assert failed.changes.failure_reason == "x" * 1024
    bare = judge_end(job(), [], record("signaled", signal=signal.SIGKILL), 5.0)
    assert bare.changes.failure_reason == "killed by SIGKILL"


def test_transient_crash_goes_back_to_pending_with_backoff() -> None:
    result = judge_end(job(), [], record("exited", exit_code=134), 5.0)
    assert (result.target, result.retried) == (JobState.PENDING, True)
    assert result.changes.not_before == 6.0
    capped = judge_end(
        job(max_retries=1), [attempt(1, "exited", 134)], record("exited", exit_code=134), 5.0
    )
    assert capped.target == JobState.FAILED


def test_a_stop_wins_over_the_exit_status_unless_it_completed() -> None:
    stopping = job(JobState.STOPPING)
    assert judge_end(stopping, [], record("exited", exit_code=143), 5.0).target == JobState.STOPPED
    assert judge_end(stopping, [], record("signaled", signal=11), 5.0).target == JobState.STOPPED
    assert judge_end(stopping, [], record("exited", exit_code=0), 5.0).target == JobState.COMPLETED
    stopped = judge_end(stopping, [], record("stopped", exit_code=0), 5.0)
    assert stopped.changes.stop_reason == "stopped by bob"


def test_time_limit() -> None:
    result = judge_end(job(max_runtime_seconds=60), [], record("timed_out", signal=9), 5.0)
    assert result.target == JobState.STOPPED
    assert result.changes.stop_reason == "time limit of 60 s reached"


def test_a_host_shutdown_requeues_unless_the_user_stopped_it() -> None:
    interrupted = record("interrupted", exit_code=0)
    again = judge_end(job(max_retries=0), [], interrupted, 5.0)
    assert (again.target, again.retried) == (JobState.PENDING, True)
    stopped = judge_end(job(JobState.STOPPING), [], interrupted, 5.0)
    assert stopped.target == JobState.STOPPED


def test_lost_monitor_is_retried_without_spending_retries() -> None:
    result = judge_end(job(max_retries=0), [], None, 5.0)
    assert result.target == JobState.PENDING
    assert result.outcome == "lost"
    assert result.reason == LOST_REASON
    assert result.changes.lost_count == 1
