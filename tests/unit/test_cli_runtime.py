"""A job's RUNTIME (`ls`, `show`'s "ran for", `top`) is the time its attempts ran: a job
preempted or retried after a backoff does not count its time back in the queue."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from trainq.humanize import job_runtime

NOW = datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC)


def at(minutes_ago: float | None) -> str | None:
    return None if minutes_ago is None else (NOW - timedelta(minutes=minutes_ago)).isoformat()


def record(
    state: str, ended: float | None, *attempts: tuple[float, float | None]
) -> dict[str, Any]:
    return {
        "state": state,
        "started_at": at(attempts[0][0]) if attempts else None,
        "ended_at": at(ended),
        "attempts": [{"started_at": at(s), "ended_at": at(e)} for s, e in attempts],
    }


def test_time_back_in_the_queue_is_not_runtime() -> None:
    # Ran 10 minutes, preempted, waited 60 in the queue, ran 5 more and completed.
    preempted = record("COMPLETED", 5, (80, 70), (10, 5))
    assert job_runtime(preempted, NOW) == "15m00s"
    # Running again now: its open attempt counts until now.
    running = record("RUNNING", None, (80, 70), (3, None))
    assert job_runtime(running, NOW) == "13m00s"
    # Back in the queue after a preemption: only what it ran.
    waiting = record("PENDING", None, (80, 70))
    assert job_runtime(waiting, NOW) == "10m00s"


def test_records_without_attempts_and_never_started() -> None:
    assert job_runtime(record("PENDING", None), NOW) == "-"
    bare = {"state": "COMPLETED", "started_at": at(30), "ended_at": at(10), "attempts": []}
    assert job_runtime(bare, NOW) == "20m00s"
    # An attempt whose end was lost ends with the job.
    lost = record("FAILED", 2, (12, None))
    assert job_runtime(lost, NOW) == "10m00s"
