"""Failures of the engine are reported as such, never as the trainer's (issue 5, item 2): a
missing image, an entrypoint the engine cannot start (exit 127 from the engine, told apart
from a trainer exiting 127 itself), an engine that is not running, and one that is not
installed at all."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.containers import (
    IMAGE,
    NO_ENTRYPOINT_IMAGE,
    DockerService,
    Engine,
    attempt_log,
    container_job,
    engine_daemon,
)
from tests.support.daemon import Daemon
from tests.support.waiting import wait_for

pytestmark = pytest.mark.containers

MISSING_IMAGE = "localhost/trainq-test-no-such-image:latest"


def test_a_missing_image_is_an_engine_error_and_not_retried(podman_daemon: Daemon) -> None:
    # Even with 125 listed as transient, an engine failure is not the trainer's to retry.
    spec = container_job("exit_with.py", "0", retry_exit_codes=[125], retry_backoff_seconds=0)
    spec["image"] = MISSING_IMAGE
    job_id = podman_daemon.submit(spec)["id"]
    done = podman_daemon.wait_state(job_id, timeout=30)
    assert done["state"] == "FAILED"
    assert len(done["attempts"]) == 1
    attempt = done["attempts"][0]
    assert (attempt["outcome"], attempt["exit_code"]) == ("engine_error", 125)
    assert attempt["retried"] is False
    reason = done["failure_reason"]
    assert reason.startswith("podman failed (exit 125): Error: "), reason
    assert MISSING_IMAGE in reason
    # The error, not the pull's progress and retries that came before it.
    assert "Trying to pull" not in reason
    assert "level=warning" not in reason


def test_an_entrypoint_the_engine_cannot_start_is_an_engine_error(podman_daemon: Daemon) -> None:
    spec = container_job("exit_with.py", "0", retry_exit_codes=[127])
    spec["image"] = NO_ENTRYPOINT_IMAGE
    job_id = podman_daemon.submit(spec)["id"]
    done = podman_daemon.wait_state(job_id)
    assert done["state"] == "FAILED", attempt_log(podman_daemon, job_id)
    assert len(done["attempts"]) == 1
    attempt = done["attempts"][0]
    assert (attempt["outcome"], attempt["exit_code"]) == ("engine_error", 127)
    assert done["failure_reason"].startswith("podman failed (exit 127): ")
    assert "/usr/local/bin/no-such-entrypoint" in done["failure_reason"]


def test_a_trainer_exiting_127_itself_is_a_trainer_exit(podman_daemon: Daemon) -> None:
    job_id = podman_daemon.submit(container_job("exit_with.py", "127", max_retries=0))["id"]
    done = podman_daemon.wait_state(job_id)
    assert done["state"] == "FAILED", attempt_log(podman_daemon, job_id)
    attempt = done["attempts"][0]
    assert (attempt["outcome"], attempt["exit_code"]) == ("exited", 127)
    assert "stderr line 2" in done["failure_reason"]  # the trainer's own words
    assert "podman failed" not in done["failure_reason"]


def test_an_engine_that_is_not_installed_is_refused_at_submit(
    engine: Engine, tmp_path: Path
) -> None:
    # trainqd's PATH holds podman and nothing of docker.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    os.symlink(engine.podman, bin_dir / "podman")
    env = {**engine.env, "PATH": str(bin_dir)}
    with engine_daemon(engine, env, "podman") as daemon:
        result = daemon.cli("submit", "--image", "localhost/trainq-test:latest",
                            "--engine", "docker")  # fmt: skip
        assert result.returncode != 0
        assert result.stdout == ""
        line = result.stderr.strip()
        assert "\n" not in line, result.stderr
        assert "docker" in line
        assert "not installed" in line
        assert daemon.get("/v1/jobs").json()["jobs"] == []


def test_an_engine_that_is_not_running_is_an_engine_error(
    engine: Engine, docker_service: DockerService, tmp_path: Path
) -> None:
    # The docker CLI, pointed at a socket nothing listens on.
    env = {**docker_service.env, "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}
    with engine_daemon(engine, env, "docker") as daemon:
        job_id = daemon.submit(container_job("exit_with.py", "0"))["id"]
        done = daemon.wait_state(job_id)
    assert done["state"] == "FAILED"
    assert len(done["attempts"]) == 1
    attempt = done["attempts"][0]
    assert (attempt["outcome"], attempt["exit_code"]) == ("engine_error", 125)
    assert done["failure_reason"].startswith("docker failed (exit 125): ")
    assert "no-engine.sock" in done["failure_reason"]


def monitor_processes(daemon: Daemon, job_id: int) -> list[int]:
    """The attempt's monitor and its children (their stderr is its monitor.log)."""
    log = str(daemon.state_dir / "jobs" / str(job_id) / "attempts" / "1" / "monitor.log")
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if os.readlink(proc / "fd" / "2") == log:
                found.append(int(proc.name))
        except (OSError, ValueError):
            continue
    return found


def test_another_trainqds_container_is_neither_in_the_way_nor_touched(
    podman_daemon: Daemon, engine: Engine
) -> None:
    # Another trainqd's container for its job 1, attempt 1, which ran and exited.
    other = engine.run(
        "run",
        "--name",
        "trainq-0ther1d-1-1",
        "--label",
        "trainq.instance=0ther1d",
        "--label",
        "trainq.job=1",
        "--network",
        "none",
        "--env",
        "TRAINER=exit_with.py",
        "--env",
        "TRAINER_ARGS=0",
        IMAGE,
        "train",
    )
    assert other.returncode == 0, other.stderr  # fmt: skip
    job_id = podman_daemon.submit(container_job("exit_with.py", "0"))["id"]
    assert job_id == 1
    done = podman_daemon.wait_state(job_id)
    wait_for(lambda: not monitor_processes(podman_daemon, job_id), timeout=20,
             what="the monitor and its removal of the container to end")  # fmt: skip
    assert "trainq-0ther1d-1-1" in engine.job_containers()  # not this trainqd's to remove
    assert done["state"] == "COMPLETED", done
    assert done["attempts"][0]["container"] != "trainq-0ther1d-1-1"
    engine.run("rm", "--force", "trainq-0ther1d-1-1")
