"""Stopping jobs through the CLI."""

from __future__ import annotations

from pathlib import Path

from tests.support.daemon import Daemon, python_job
from tests.support.waiting import wait_for


def test_stop_a_running_job(daemon: Daemon) -> None:
    job = daemon.submit(python_job("sleeper.py", gpus=1))
    ml = Path(job["job_dir"])
    wait_for((ml / "output" / "data" / "pid").exists, what="the trainer to start")
    result = daemon.cli("stop", str(job["id"]))
    assert result.returncode == 0, result.stderr
    done = daemon.wait_state(job["id"])
    assert done["state"] == "STOPPED"
    assert done["stop_reason"].startswith("stopped by")
    assert (ml / "checkpoints" / "on-sigterm").read_text() == "1"
    assert daemon.cli("wait", str(job["id"])).returncode == 3


def test_stop_a_pending_job(daemon: Daemon) -> None:
    blocker = daemon.submit(python_job("sleeper.py", gpus=4))["id"]
    daemon.wait_state(blocker, "RUNNING")
    queued = daemon.submit({"command": ["true"], "gpus": 1})["id"]
    assert daemon.cli("stop", str(queued)).returncode == 0
    done = daemon.job(queued)
    assert done["state"] == "STOPPED"
    assert done["attempts"] == []
    assert "before it started" in done["stop_reason"]
    again = daemon.cli("stop", str(queued))
    assert again.returncode == 6
    assert "already ended" in again.stderr
    daemon.cli("stop", "--grace", "0", str(blocker))
    daemon.wait_state(blocker)


def test_stop_a_job_waiting_to_run_again(daemon: Daemon) -> None:
    # Exit 139 is a transient crash: the job waits out its retry backoff, PENDING again.
    job = daemon.submit({**python_job("exit_with.py", "139"), "retry_backoff_seconds": 600})
    wait_for(
        lambda: (j := daemon.job(job["id"]))["state"] == "PENDING" and j["attempts"],
        what="the first attempt to end and the retry to wait",
    )
    assert daemon.cli("stop", str(job["id"])).returncode == 0
    done = daemon.job(job["id"])
    assert done["state"] == "STOPPED"
    assert done["stop_reason"].endswith("while it waited to run again")
