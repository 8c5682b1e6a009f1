"""Container jobs outlive trainqd (docs/architecture.md): the attempt's monitor keeps
the container supervised while the daemon is down, and the restarted daemon finds it again.
When the monitor is gone too, the container is found by its name and removed before the
job is tried again."""

from __future__ import annotations

import json
import os
import signal

import pytest

from tests.support.containers import (
    RELEASE,
    Engine,
    attempt_log,
    container_job,
    ml_path,
    running_container,
)
from tests.support.daemon import Daemon
from tests.support.waiting import wait_for

pytestmark = pytest.mark.containers


def test_a_container_job_completes_across_a_daemon_kill(
    podman_daemon: Daemon, engine: Engine
) -> None:
    job_id = podman_daemon.submit(container_job("until_released.py", RELEASE, gpus=1))["id"]
    name = running_container(podman_daemon, engine, job_id, 1)
    gpus = podman_daemon.job(job_id)["gpus"]

    podman_daemon.kill()
    state = engine.container_state(name)
    assert state is not None
    assert state["Running"] is True  # trainqd's death is nothing to the container
    podman_daemon.start()

    job = podman_daemon.job(job_id)
    assert (job["state"], job["gpus"], len(job["attempts"])) == ("RUNNING", gpus, 1)
    ml_path(podman_daemon, job_id, "checkpoints", "release").touch()
    done = podman_daemon.wait_state(job_id)
    assert done["state"] == "COMPLETED", attempt_log(podman_daemon, job_id)
    assert done["attempts"][0]["exit_code"] == 0
    wait_for(lambda: name not in engine.job_containers(), timeout=10,
             what=f"{name} to be removed")  # fmt: skip


def test_the_container_of_a_vanished_monitor_is_removed_before_the_retry(
    podman_daemon: Daemon, engine: Engine
) -> None:
    job_id = podman_daemon.submit(container_job("until_released.py", RELEASE, gpus=1))["id"]
    first = running_container(podman_daemon, engine, job_id, 1)
    podman_daemon.kill()
    # The monitor dies without an exit record, as in a crash; the container runs on.
    record = podman_daemon.state_dir / "jobs" / str(job_id) / "attempts" / "1.monitor"
    os.kill(json.loads(record.read_text())["monitor_pid"], signal.SIGKILL)
    podman_daemon.start()

    second = running_container(podman_daemon, engine, job_id, 2)
    # Attempt 1's container was removed before attempt 2 was given the GPU.
    assert first not in engine.job_containers()
    job = podman_daemon.job(job_id)
    assert job["attempts"][0]["outcome"] == "lost"
    ml_path(podman_daemon, job_id, "checkpoints", "release").touch()
    done = podman_daemon.wait_state(job_id)
    assert done["state"] == "COMPLETED", attempt_log(podman_daemon, job_id, 2)
    wait_for(lambda: second not in engine.job_containers(), timeout=10,
             what=f"{second} to be removed")  # fmt: skip
