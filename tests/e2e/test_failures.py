"""How a failed trainer is reported: the failure file, else stderr's tail."""

from __future__ import annotations

from tests.support.daemon import Daemon, python_job


def test_failure_file_becomes_the_reason(daemon: Daemon) -> None:
    reason = "CUDA out of memory. " + "x" * 2000
    job = daemon.submit(python_job("exit_with.py", "3", reason, max_retries=0))
    done = daemon.wait_state(job["id"])
    assert done["state"] == "FAILED"
    assert done["failure_reason"] == reason[:1024]
    assert done["attempts"][0]["exit_code"] == 3


def test_stderr_tail_is_the_reason_without_a_failure_file(daemon: Daemon) -> None:
    job = daemon.submit(python_job("exit_with.py", "2", max_retries=0))
    done = daemon.wait_state(job["id"])
    assert done["state"] == "FAILED"
    assert "stderr line 2" in done["failure_reason"]
    assert "stdout line" not in done["failure_reason"]


def test_a_program_that_does_not_exist(daemon: Daemon) -> None:
    job = daemon.submit({"command": ["/nonexistent/trainer"]})
    done = daemon.wait_state(job["id"])
    assert done["state"] == "FAILED"
    assert done["attempts"][0]["outcome"] == "start_failed"
    assert "/nonexistent/trainer" in done["failure_reason"]


def test_wait_exit_statuses(daemon: Daemon) -> None:
    ok = daemon.submit({"command": ["true"]})["id"]
    bad = daemon.submit({"command": ["false"], "max_retries": 0})["id"]
    assert daemon.cli("wait", str(ok)).returncode == 0
    failed = daemon.cli("wait", str(bad))
    assert failed.returncode == 1
    assert "FAILED" in failed.stderr
