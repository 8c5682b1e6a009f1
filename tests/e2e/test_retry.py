"""Transient crashes are retried and resume from their checkpoint; permanent ones are not
(issue: supervision, items 3 and 4)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.daemon import Daemon, python_job


@pytest.mark.parametrize(
    "crash",
    [
        "exit:6",
        "exit:134",
        "exit:11",
        "exit:139",
        "signal:ABRT",
        "signal:SEGV",
        "toolkit:134",
        "toolkit:139",
    ],
)
def test_transient_crash_resumes_from_checkpoint(daemon: Daemon, crash: str) -> None:
    job = daemon.submit(python_job("crash_then_resume.py", crash, gpus=1, retry_backoff_seconds=0))
    done = daemon.wait_state(job["id"])
    assert done["state"] == "COMPLETED", done
    first, second = done["attempts"]
    assert (first["number"], first["retried"]) == (1, True)
    assert (second["number"], second["exit_code"], second["retried"]) == (2, 0, False)
    kind, _, value = crash.partition(":")
    if kind == "signal":
        assert first["outcome"] == "signaled"
        assert first["signal_name"] == f"SIG{value}"
        assert first["exit_code"] is None
    else:
        assert first["outcome"] == "exited"
        assert first["exit_code"] == (1 if kind == "toolkit" else int(value))
    if kind == "toolkit":
        assert first["reason"].startswith(f"ExitCode {value}")
    resumed = json.loads((Path(done["job_dir"]) / "model" / "resumed.json").read_text())
    assert resumed == {"step": 100, "saved_on": 1, "resumed_on": 2}


@pytest.mark.parametrize("crash", ["exit:1", "exit:137", "toolkit:1", "signal:KILL"])
def test_permanent_failures_are_not_retried(daemon: Daemon, crash: str) -> None:
    job = daemon.submit(python_job("crash_then_resume.py", crash, retry_backoff_seconds=0))
    done = daemon.wait_state(job["id"])
    assert done["state"] == "FAILED"
    assert len(done["attempts"]) == 1
    assert done["attempts"][0]["retried"] is False


def test_retries_are_capped(daemon: Daemon) -> None:
    job = daemon.submit(python_job("exit_with.py", "139", max_retries=2, retry_backoff_seconds=0))
    done = daemon.wait_state(job["id"])
    assert done["state"] == "FAILED"
    assert [a["retried"] for a in done["attempts"]] == [True, True, False]
    assert all(a["exit_code"] == 139 for a in done["attempts"])


def test_a_retry_waits_its_backoff(daemon: Daemon) -> None:
    job = daemon.submit(
        python_job("crash_then_resume.py", "exit:134", gpus=1, retry_backoff_seconds=1.0)
    )
    pending = daemon.wait_state(job["id"], "PENDING", timeout=10)
    if pending["attempts"]:  # seen between the attempts, not before the first
        assert pending["next_attempt_at"] is not None
        assert "backoff" in (pending["pending_reason"] or "")
    done = daemon.wait_state(job["id"])
    assert done["state"] == "COMPLETED"
    gap = _seconds(done["attempts"][1]["started_at"]) - _seconds(done["attempts"][0]["ended_at"])
    assert gap >= 0.9


def _seconds(stamp: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(stamp).timestamp()
