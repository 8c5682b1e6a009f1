"""SageMaker's host name inside a container job: resourceconfig.json says the job runs on
`algo-1`, and that name is the container's and resolves in it (the SageMaker toolkit waits
for it before it trains), with podman and through the docker CLI, whatever the network."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.containers import attempt_log, container_job
from tests.support.daemon import Daemon

pytestmark = pytest.mark.containers


def run_paths_job(daemon: Daemon, **spec: Any) -> dict[str, Any]:
    job_id = daemon.submit(container_job("sagemaker_paths.py", **spec))["id"]
    job = daemon.wait_state(job_id, timeout=60)
    assert job["state"] == "COMPLETED", attempt_log(daemon, job_id)
    ml_root = Path(job["job_dir"])
    assert (ml_root / "checkpoints" / "x").read_text() == "attempt 1\n"
    report: dict[str, Any] = json.loads((ml_root / "output" / "data" / "paths.json").read_text())
    return report


def assert_algo_1(report: dict[str, Any]) -> None:
    assert report["current_host"] == "algo-1"
    assert report["resolved"] == "127.0.0.1"
    assert report["getent"][:2] == ["127.0.0.1", "algo-1"]
    assert report["hostname"] == "algo-1"


@pytest.mark.parametrize("network", ["none", "bridge", "host"])
def test_algo_1_resolves_in_a_podman_job(podman_daemon: Daemon, network: str) -> None:
    assert_algo_1(run_paths_job(podman_daemon, network=network))


def test_algo_1_resolves_in_a_docker_job(docker_daemon: Daemon) -> None:
    assert_algo_1(run_paths_job(docker_daemon))
