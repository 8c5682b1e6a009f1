"""When trainqd expects an attempt to have ended, and what it records if it ends the attempt
itself (watcher.py): the rules a frozen monitor is held to."""

from __future__ import annotations

from pathlib import Path

from trainqd.attempts.watcher import StopCause, WatchedMonitor, forced_record


def monitor() -> WatchedMonitor:
    return WatchedMonitor(7, 2, 100, 1, Path("/nowhere/2"), Path("/nowhere/2.stop"))


def test_a_stop_before_the_time_limit_brings_the_due_forward_with_its_cause() -> None:
    watched = monitor()
    watched.expect_end(1000.0, "time_limit", 5)
    watched.expect_end(500.0, "user", 3)
    assert (watched.end_due, watched.due_cause, watched.due_grace) == (500.0, "user", 3)


def test_a_later_stop_never_puts_the_due_off() -> None:
    watched = monitor()
    watched.expect_end(500.0, "time_limit", 5)
    watched.expect_end(900.0, "user", 30)
    assert (watched.end_due, watched.due_cause, watched.due_grace) == (500.0, "time_limit", 5)


def test_the_first_stops_cause_stays_when_a_second_shortens_its_grace() -> None:
    watched = monitor()
    watched.expect_end(500.0, "preempt", 10)
    watched.expect_end(400.0, "user", 0)
    assert (watched.end_due, watched.due_cause, watched.due_grace) == (400.0, "preempt", 0)


def test_the_record_of_an_attempt_trainqd_ended_is_the_stop_asked_for() -> None:
    cases: list[tuple[StopCause, str, str]] = [
        ("user", "stopped", "its stop"),
        ("time_limit", "timed_out", "its time limit"),
        ("preempt", "preempted", "its preemption"),
    ]
    for cause, outcome, words in cases:
        watched = monitor()
        watched.expect_end(500.0, cause, 3)
        record = forced_record(watched, 60, now=560.0)
        assert (record.job_id, record.attempt, record.outcome) == (7, 2, outcome)
        assert (record.started_at, record.ended_at, record.exit_code) == (None, 560.0, None)
        assert record.reason == (
            f"its monitor did not end the attempt within the 3 s grace of {words} and 60 s "
            "more: trainqd ended it"
        )
