"""A preempted attempt, end to end in the pure parts: the stop order's cause, the monitor's
ending, and the job's next state (monitor/outcome.py, outcomes.py)."""

from __future__ import annotations

import json
import signal
from dataclasses import replace
from pathlib import Path

from tests.support.factories import attempt, job, record
from trainq.core.outcomes import Outcome
from trainq.core.states import JobState
from trainqd.monitor.outcome import Stop, conclude, not_started, read_stop_request
from trainqd.scheduling.outcomes import judge_end

PREEMPTED_BY = "preempted by job 12 (bob)"


def test_the_stop_file_carries_the_cause(tmp_path: Path) -> None:
    stop_file = tmp_path / "stop"
    stop_file.write_text(json.dumps({"grace_seconds": 3, "reason": "preempt"}))
    assert read_stop_request(str(stop_file), 9.0) == (3.0, "preempt")
    stop_file.write_text(json.dumps({"grace_seconds": 3, "reason": "anything else"}))
    assert read_stop_request(str(stop_file), 9.0) == (3.0, "user")


def test_a_preempted_trainer_is_preempted_however_it_exits(tmp_path: Path) -> None:
    for status in (0, 1 << 8, signal.SIGKILL):  # saved and exited 0, failed, killed at the end
        ending = conclude(status, Stop("preempt", 5.0, forced=True), str(tmp_path), -1)
        assert ending.outcome == Outcome.PREEMPTED
        assert ending.reason is not None
        assert ending.reason.startswith("preempted: ")
    assert not_started("preempt").outcome == Outcome.PREEMPTED


def test_a_preempted_job_is_queued_again_without_spending_retries() -> None:
    victim = replace(job(JobState.STOPPING), stop_reason=PREEMPTED_BY, preempted_count=2)
    ended = record("preempted", exit_code=0, reason="preempted: exited with status 0")
    result = judge_end(victim, [attempt(1, "exited", 134)], ended, 5.0)
    assert result.target == JobState.PENDING
    assert result.event_reason == PREEMPTED_BY
    assert result.reason == f"{PREEMPTED_BY}: exited with status 0"
    assert result.changes.preempted_count == 3
    assert result.changes.not_before is None  # no backoff: it may start again at once
    assert result.changes.ended_at is None
