"""The real SageMaker training toolkit in a container job, as in SageMaker's framework
images: the image's command `train` is the toolkit's, `sagemaker_program` names the user
script, and the toolkit waits for `algo-1` before it runs it. A script that dies by SIGSEGV
on its first attempt is retried (the toolkit reports `ExitCode -11`) and resumes from
/opt/ml/checkpoints."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.containers import attempt_log
from tests.support.daemon import Daemon

pytestmark = pytest.mark.containers

TOOLKIT_IMAGE = "localhost/trainq-test:toolkit"  # built by tests/containers/prepare


def toolkit_job(**hyperparameters: str) -> dict[str, Any]:
    return {
        "image": TOOLKIT_IMAGE,
        "network": "none",
        "hyperparameters": {
            "sagemaker_program": '"user_script.py"',
            "sagemaker_submit_directory": '"/opt/trainq/toolkit_code"',
            **hyperparameters,
        },
        "retry_backoff_seconds": 0.0,
    }


def test_toolkit_train_in_a_container(podman_daemon: Daemon) -> None:
    job_id = podman_daemon.submit(toolkit_job(epochs="2"))["id"]
    done = podman_daemon.wait_state(job_id, timeout=90)
    assert done["state"] == "COMPLETED", attempt_log(podman_daemon, job_id)
    assert len(done["attempts"]) == 1
    ml_root = Path(done["job_dir"])
    model = json.loads((ml_root / "model" / "model.json").read_text())
    assert (model["epochs"], model["resumed_from"], model["hps"]) == (2, 0, {"epochs": 2})
    assert (ml_root / "output" / "success").exists()


def test_a_segfault_under_the_toolkit_in_a_container_resumes(podman_daemon: Daemon) -> None:
    job_id = podman_daemon.submit(toolkit_job(epochs="3", crash='"SEGV"'))["id"]
    done = podman_daemon.wait_state(job_id, timeout=120)
    assert done["state"] == "COMPLETED", attempt_log(podman_daemon, job_id)
    first, second = done["attempts"]
    assert first["exit_code"] == 1
    assert "ExitCode -11" in first["reason"]
    assert second["exit_code"] == 0
    model = json.loads((Path(done["job_dir"]) / "model" / "model.json").read_text())
    assert (model["resumed_from"], model["attempt"]) == (1, 2)


def test_toolkit_train_through_the_docker_cli(docker_daemon: Daemon) -> None:
    job_id = docker_daemon.submit(toolkit_job(epochs="1"))["id"]
    done = docker_daemon.wait_state(job_id, timeout=90)
    assert done["state"] == "COMPLETED", attempt_log(docker_daemon, job_id)
    assert (Path(done["job_dir"]) / "output" / "success").exists()


def test_the_containers_environment_is_the_toolkits(podman_daemon: Daemon) -> None:
    # The toolkit's `train` hands over to a framework module (as the framework images do),
    # which compares the toolkit's view of the job with the SM_* variables trainq gave it.
    spec = toolkit_job(lr="0.1", amp="true", layers='{"sizes": [64, 128], "on": false}')
    spec["hyperparameters"].pop("sagemaker_program")
    spec["environment"] = {
        "SAGEMAKER_TRAINING_MODULE": "env_report:main",
        "PYTHONPATH": "/opt/trainq/toolkit_code",
    }
    job_id = podman_daemon.submit(spec)["id"]
    done = podman_daemon.wait_state(job_id, timeout=90)
    assert done["state"] == "COMPLETED", attempt_log(podman_daemon, job_id)
    report = json.loads((Path(done["job_dir"]) / "output/data/toolkit_env.json").read_text())
    toolkit, given = report["toolkit"], report["environ"]
    assert sorted(toolkit) == sorted(given)
    for name, value in toolkit.items():
        assert given[name] == value, name
    assert given["SM_FRAMEWORK_MODULE"] == "env_report:main"
    assert given["SM_MODEL_DIR"] == "/opt/ml/model"
