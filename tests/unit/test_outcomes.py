from __future__ import annotations

import signal

from trainq.core.spec import JobSpec
from trainq.core.states import JobState
from trainqd.monitor.records import ExitRecord
from trainqd.outcomes import LOST_REASON, settle
from trainqd.store import AttemptRow, JobRow, Owner


def job(state: JobState = JobState.RUNNING, **spec: object) -> JobRow:
    return JobRow(
        id=1,
        name="j",
        state=state,
        priority=0,
        owner=Owner(1000, 1000, "alice"),
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


def record(outcome: str, **kw: object) -> ExitRecord:
    return ExitRecord(job_id=1, attempt=1, outcome=outcome, started_at=1.0, ended_at=2.0, **kw)  # type: ignore[arg-type]


def attempt(number: int, outcome: str, exit_code: int | None = None) -> AttemptRow:
    return AttemptRow(
        1, number, (0,), 0.0, 1.0, exit_code, None, outcome, None, True, None, None, None
    )


def test_success() -> None:
    result = settle(job(), [], record("exited", exit_code=0), 5.0)
    assert result.target == JobState.COMPLETED
    assert result.job_fields["ended_at"] == 5.0


def test_failure_reason_is_the_failure_file_or_a_description() -> None:
    failed = settle(job(), [], record("exited", exit_code=3, reason="x" * 2000), 5.0)
    assert failed.target == JobState.FAILED
    assert failed.job_fields["failure_reason"] == "x" * 1024
    bare = settle(job(), [], record("signaled", signal=signal.SIGKILL), 5.0)
    assert bare.job_fields["failure_reason"] == "killed by SIGKILL"


def test_transient_crash_goes_back_to_pending_with_backoff() -> None:
    result = settle(job(), [], record("exited", exit_code=134), 5.0)
    assert (result.target, result.retried) == (JobState.PENDING, True)
    assert result.job_fields["not_before"] == 6.0
    capped = settle(
        job(max_retries=1), [attempt(1, "exited", 134)], record("exited", exit_code=134), 5.0
    )
    assert capped.target == JobState.FAILED


def test_a_stop_wins_over_the_exit_status_unless_it_completed() -> None:
    stopping = job(JobState.STOPPING)
    assert settle(stopping, [], record("exited", exit_code=143), 5.0).target == JobState.STOPPED
    assert settle(stopping, [], record("signaled", signal=11), 5.0).target == JobState.STOPPED
    assert settle(stopping, [], record("exited", exit_code=0), 5.0).target == JobState.COMPLETED
    stopped = settle(stopping, [], record("stopped", exit_code=0), 5.0)
    assert stopped.job_fields["stop_reason"] == "stopped by bob"


def test_time_limit() -> None:
    result = settle(job(max_runtime_seconds=60), [], record("timed_out", signal=9), 5.0)
    assert result.target == JobState.STOPPED
    assert result.job_fields["stop_reason"] == "time limit of 60 s reached"


def test_a_host_shutdown_requeues_unless_the_user_stopped_it() -> None:
    interrupted = record("interrupted", exit_code=0)
    again = settle(job(max_retries=0), [], interrupted, 5.0)
    assert (again.target, again.retried) == (JobState.PENDING, True)
    stopped = settle(job(JobState.STOPPING), [], interrupted, 5.0)
    assert stopped.target == JobState.STOPPED


def test_lost_monitor_is_retried_without_spending_retries() -> None:
    result = settle(job(max_retries=0), [], None, 5.0)
    assert result.target == JobState.PENDING
    assert result.outcome == "lost"
    assert result.reason == LOST_REASON
    assert result.job_fields["lost_count"] == 1
