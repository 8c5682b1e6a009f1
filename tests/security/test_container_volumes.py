"""An image's VOLUMEs leave nothing on the host's disk once its job has ended.

An image may declare `VOLUME` paths; the engine then makes an anonymous volume for each on
every run, on the host's disk, where neither `trainq rm` nor retention reaches it. Any user
may run such an image, every run of it: trainq removes a container with its anonymous
volumes, whether its monitor ends the attempt or trainqd cleans up after a monitor that
vanished. Tested with a real podman and a variant of the test image, built here from the
local one, that declares a VOLUME.
"""

from __future__ import annotations

import json
import os
import signal
import tempfile
from pathlib import Path

import pytest

from tests.support.containers import IMAGE, Engine, attempt_log, container_job, ml_path
from tests.support.daemon import Daemon
from tests.support.waiting import wait_for

pytestmark = pytest.mark.containers

VOLUME_IMAGE = "localhost/trainq-test:volume"
RELEASE = "/opt/ml/checkpoints/release"  # until_released.py ends once this exists


@pytest.fixture(scope="module")
def volume_image(engine: Engine) -> str:
    """The test image with `VOLUME /scratch`, built from the local image (nothing pulled)."""
    with tempfile.TemporaryDirectory() as context:
        containerfile = Path(context) / "Containerfile"
        containerfile.write_text(f"FROM {IMAGE}\nVOLUME /scratch\n")
        done = engine.run(
            "build", "--quiet", "--pull=never", "--file", str(containerfile),
            "--tag", VOLUME_IMAGE, context, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    return VOLUME_IMAGE


def _volumes(engine: Engine) -> set[str]:
    done = engine.run("volume", "ls", "--quiet")
    assert done.returncode == 0, done.stderr
    return set(done.stdout.split())


def _started(daemon: Daemon, job_id: int) -> None:
    wait_for(ml_path(daemon, job_id, "output", "data", "pid").exists, timeout=30,
             what=f"job {job_id}'s trainer to start")  # fmt: skip


@pytest.fixture(params=["podman", "docker"])
def either_daemon(request: pytest.FixtureRequest) -> Daemon:
    """trainqd on podman, or on the docker CLI (against podman's Docker-compatible service)."""
    daemon: Daemon = request.getfixturevalue(f"{request.param}_daemon")
    return daemon


def test_a_jobs_anonymous_volume_goes_with_its_container(
    either_daemon: Daemon, engine: Engine, volume_image: str
) -> None:
    daemon = either_daemon
    before = _volumes(engine)
    spec = container_job("until_released.py", RELEASE, image=volume_image)
    job_id = daemon.submit(spec)["id"]
    _started(daemon, job_id)
    # The image really makes one: it exists while the job runs.
    assert len(_volumes(engine) - before) == 1
    ml_path(daemon, job_id, "checkpoints", "release").touch()
    done = daemon.wait_state(job_id, timeout=60)
    assert done["state"] == "COMPLETED", attempt_log(daemon, job_id)
    wait_for(lambda: not engine.job_containers(), timeout=15, what="the container to go")
    assert _volumes(engine) == before
    assert daemon.cli("rm", str(job_id)).returncode == 0
    assert _volumes(engine) == before
    assert daemon.cli("ls").returncode == 0


def test_the_volume_of_a_vanished_monitors_container_goes_too(
    podman_daemon: Daemon, engine: Engine, volume_image: str
) -> None:
    before = _volumes(engine)
    spec = container_job("until_released.py", RELEASE, image=volume_image)
    job_id = podman_daemon.submit(spec)["id"]
    _started(podman_daemon, job_id)
    [first] = _volumes(engine) - before
    ml_path(podman_daemon, job_id, "output", "data", "pid").unlink()  # to see the next start
    # The monitor dies without an exit record; trainqd removes what it left, then tries
    # the job again (a lost monitor is not the job's doing).
    record = podman_daemon.state_dir / "jobs" / str(job_id) / "attempts" / "1.monitor"
    os.kill(json.loads(record.read_text())["monitor_pid"], signal.SIGKILL)
    _started(podman_daemon, job_id)
    assert podman_daemon.job(job_id)["attempts"][0]["outcome"] == "lost"
    wait_for(lambda: first not in _volumes(engine), timeout=30, what="the first volume to go")
    assert len(_volumes(engine) - before) == 1  # the second attempt's own
    assert podman_daemon.cli("stop", "--grace", "0", str(job_id)).returncode == 0
    done = podman_daemon.wait_state(job_id, timeout=60)
    assert done["state"] == "STOPPED", attempt_log(podman_daemon, job_id, 2)
    wait_for(lambda: not engine.job_containers(), timeout=30, what="the container to go")
    assert _volumes(engine) == before
    result = podman_daemon.cli("rm", str(job_id))
    assert result.returncode == 0, result.stderr
    assert _volumes(engine) == before
    assert podman_daemon.cli("ls").returncode == 0
