"""Container attempts supervised as subprocesses are (issue 5, item 2): a stop goes through
the engine (`ENGINE stop -t GRACE`: SIGTERM, the grace, SIGKILL), time limits, and transient
exits retried from the checkpoint, each attempt a container of its own."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.support.containers import Engine, attempt_log, container_job, ml_path
from tests.support.daemon import Daemon
from tests.support.waiting import wait_for

pytestmark = pytest.mark.containers


def started(daemon: Daemon, job_id: int) -> None:
    wait_for(ml_path(daemon, job_id, "output", "data", "pid").exists, timeout=15,
             what=f"job {job_id}'s trainer to start")  # fmt: skip


def test_stop_lets_the_trainer_checkpoint(podman_daemon: Daemon, engine: Engine) -> None:
    job_id = podman_daemon.submit(container_job("sleeper.py", stop_grace_seconds=30))["id"]
    started(podman_daemon, job_id)
    result = podman_daemon.cli("stop", str(job_id))
    assert result.returncode == 0, result.stderr
    done = podman_daemon.wait_state(job_id, timeout=20)
    assert done["state"] == "STOPPED", attempt_log(podman_daemon, job_id)
    assert done["stop_reason"].startswith("stopped by")
    attempt = done["attempts"][0]
    assert (attempt["outcome"], attempt["exit_code"]) == ("stopped", 0)
    # SIGTERM reached the trainer inside the container, which saved its checkpoint.
    assert (Path(done["job_dir"]) / "checkpoints" / "on-sigterm").read_text() == "1"
    wait_for(lambda: not engine.job_containers(), timeout=10, what="the container to go")


def test_a_trainer_that_ignores_sigterm_is_killed_after_the_grace(
    podman_daemon: Daemon,
) -> None:
    grace = 1
    spec = container_job("sleeper.py", "--ignore-sigterm", stop_grace_seconds=grace)
    job_id = podman_daemon.submit(spec)["id"]
    started(podman_daemon, job_id)
    asked = time.monotonic()
    assert podman_daemon.cli("stop", str(job_id)).returncode == 0
    done = podman_daemon.wait_state(job_id, timeout=20)
    took = time.monotonic() - asked
    assert done["state"] == "STOPPED", attempt_log(podman_daemon, job_id)
    attempt = done["attempts"][0]
    assert attempt["outcome"] == "stopped"
    assert attempt["exit_code"] == 128 + 9  # the engine's SIGKILL, as its client reports it
    assert not (Path(done["job_dir"]) / "checkpoints" / "on-sigterm").exists()
    assert took >= grace  # the grace was given in full, then no more than needed
    assert took < grace + 10


def test_a_time_limit_stops_the_container(podman_daemon: Daemon) -> None:
    spec = container_job("sleeper.py", max_runtime_seconds=1, stop_grace_seconds=10)
    job_id = podman_daemon.submit(spec)["id"]
    done = podman_daemon.wait_state(job_id, timeout=20)
    assert done["state"] == "STOPPED", attempt_log(podman_daemon, job_id)
    assert done["stop_reason"] == "time limit of 1 s reached"
    assert done["attempts"][0]["outcome"] == "timed_out"
    assert (Path(done["job_dir"]) / "checkpoints" / "on-sigterm").read_text() == "1"


def test_a_transient_exit_is_retried_and_resumes(podman_daemon: Daemon, engine: Engine) -> None:
    spec = container_job("crash_then_resume.py", "exit:134", retry_backoff_seconds=0)
    job_id = podman_daemon.submit(spec)["id"]
    done = podman_daemon.wait_state(job_id, timeout=30)
    assert done["state"] == "COMPLETED", attempt_log(podman_daemon, job_id, 2)
    first, second = done["attempts"]
    assert (first["outcome"], first["exit_code"], first["retried"]) == ("exited", 134, True)
    assert (second["number"], second["exit_code"]) == (2, 0)
    resumed = json.loads((Path(done["job_dir"]) / "model" / "resumed.json").read_text())
    assert resumed == {"step": 100, "saved_on": 1, "resumed_on": 2}
    wait_for(lambda: not engine.job_containers(), timeout=10,
             what="both attempts' containers to go")  # fmt: skip


def test_a_containers_output_is_relayed_with_its_streams(podman_daemon: Daemon) -> None:
    job_id = podman_daemon.submit(container_job("exit_with.py", "0"))["id"]
    done = podman_daemon.wait_state(job_id, timeout=30)
    assert done["state"] == "COMPLETED", attempt_log(podman_daemon, job_id)
    stamped = podman_daemon.cli("logs", "-t", str(job_id)).stdout.splitlines()
    streams = {line.split(" ", 2)[2]: line.split(" ", 2)[1] for line in stamped}
    assert streams == {
        "stdout line from a trainer exiting 0": "stdout",
        **{f"stderr line {i}": "stderr" for i in range(3)},
    }
    assert podman_daemon.cli("logs", "-n", "1", "--stderr", str(job_id)).stdout == (
        "stderr line 2\n"
    )
