"""Daemon restarts lose nothing (issue: supervision, item 5): trainers keep running through
SIGTERM and SIGKILL of trainqd, exits that happen while it is down are recorded with their
real status, and no GPU is given to two jobs meanwhile."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import Daemon, pids_alive, python_job
from tests.support.waiting import wait_for


def started(daemon: Daemon, job_id: int) -> int:
    pid_file = Path(daemon.job(job_id)["job_dir"]) / "output" / "data" / "pid"
    # Its content too: the trainer creates the file, then writes to it.
    wait_for(
        lambda: pid_file.exists() and pid_file.read_text().strip(),
        what=f"job {job_id}'s trainer to start",
    )
    return int(pid_file.read_text())


def second_attempt(daemon: Daemon, job_id: int) -> dict[str, Any]:
    def begun() -> dict[str, Any] | None:
        job = daemon.job(job_id)
        return job if len(job["attempts"]) == 2 else None

    return wait_for(begun, what=f"job {job_id}'s second attempt")


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL])
def test_trainers_outlive_the_daemon(daemon: Daemon, tmp_path: Path, how: int) -> None:
    release = tmp_path / "release"
    keeps = daemon.submit(python_job("until_released.py", str(release), "0", gpus=2))["id"]
    exits = daemon.submit(
        python_job("until_released.py", str(tmp_path / "early"), "3", gpus=2, max_retries=0)
    )["id"]
    waits = daemon.submit(python_job("until_released.py", str(release), "0", gpus=2))["id"]
    pids = {job: started(daemon, job) for job in (keeps, exits)}
    assert daemon.job(waits)["state"] == "PENDING"
    held = {job: daemon.job(job)["gpus"] for job in (keeps, exits)}

    daemon.stop(how)
    assert pids_alive(list(pids.values())) == list(pids.values())
    # One trainer ends while no daemon is watching.
    (tmp_path / "early").touch()
    attempt_dir = daemon.state_dir / "jobs" / str(exits) / "attempts" / "1"
    wait_for((attempt_dir / "exit.json").exists, what="the exit record of a trainer")
    daemon.start()

    assert daemon.job(exits)["state"] == "FAILED"
    assert daemon.job(exits)["attempts"][0]["exit_code"] == 3
    still = daemon.job(keeps)
    assert still["state"] == "RUNNING"
    assert still["gpus"] == held[keeps]  # the same GPUs, still its own
    assert len(still["attempts"]) == 1
    # The queued job gets the GPUs the failed one gave back, never the running one's.
    running = daemon.wait_state(waits, "RUNNING")
    assert not set(running["gpus"]) & set(held[keeps])
    release.touch()
    assert daemon.wait_state(keeps)["state"] == "COMPLETED"
    assert daemon.wait_state(waits)["state"] == "COMPLETED"


def test_stop_requested_before_a_restart_completes_after_it(daemon: Daemon) -> None:
    job = daemon.submit(python_job("sleeper.py", "--ignore-sigterm", stop_grace_seconds=2))
    started(daemon, job["id"])
    daemon.cli("stop", str(job["id"]))
    assert daemon.job(job["id"])["state"] == "STOPPING"
    daemon.kill()
    daemon.start()
    done = daemon.wait_state(job["id"], timeout=15)
    assert done["state"] == "STOPPED"
    assert done["stop_reason"].startswith("stopped by")


def test_a_time_limit_falls_due_while_the_daemon_is_down(daemon: Daemon) -> None:
    job = daemon.submit(python_job("sleeper.py", max_runtime_seconds=2, stop_grace_seconds=1))
    started(daemon, job["id"])
    daemon.kill()
    attempt_dir = daemon.state_dir / "jobs" / str(job["id"]) / "attempts" / "1"
    wait_for(
        (attempt_dir / "exit.json").exists,
        timeout=10,
        what="the monitor to enforce the limit alone",
    )
    daemon.start()
    done = daemon.job(job["id"])
    assert done["state"] == "STOPPED"
    assert done["stop_reason"] == "time limit of 2 s reached"


def test_a_vanished_monitor_is_cleaned_up_and_retried(daemon: Daemon, tmp_path: Path) -> None:
    release = tmp_path / "release"
    job = daemon.submit(python_job("until_released.py", str(release), "0", gpus=1, max_retries=0))[
        "id"
    ]
    trainer = started(daemon, job)
    daemon.kill()
    # Its monitor dies without a record, as in a crash (or a reboot, for the monitor).
    info = daemon.state_dir / "jobs" / str(job) / "attempts" / "1.monitor"
    os.kill(json.loads(info.read_text())["monitor_pid"], signal.SIGKILL)
    daemon.start()
    # The orphaned trainer is killed before the job runs again, and the retry does not
    # spend the job's own retries (max_retries is 0 here).
    wait_for(lambda: not pids_alive([trainer]), timeout=5, what="the orphan to be killed")
    retried = second_attempt(daemon, job)
    assert retried["attempts"][0]["outcome"] == "lost"
    release.touch()
    assert daemon.wait_state(job)["state"] == "COMPLETED"


def test_a_monitor_killed_under_a_running_daemon(daemon: Daemon, tmp_path: Path) -> None:
    release = tmp_path / "release"
    job = daemon.submit(python_job("until_released.py", str(release), "0", gpus=1))["id"]
    trainer = started(daemon, job)
    info = daemon.state_dir / "jobs" / str(job) / "attempts" / "1.monitor"
    os.kill(json.loads(info.read_text())["monitor_pid"], signal.SIGKILL)
    wait_for(lambda: not pids_alive([trainer]), timeout=5, what="the orphan to be killed")
    retried = second_attempt(daemon, job)
    assert retried["attempts"][0]["outcome"] == "lost"
    release.touch()
    assert daemon.wait_state(job)["state"] == "COMPLETED"
