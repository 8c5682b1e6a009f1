"""The same basics through the real `docker` CLI (issue 5, item 4), pointed at podman's
Docker-compatible service: the contract at /opt/ml, and a stop through `docker stop`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.containers import (
    IMAGE,
    NO_ENTRYPOINT_IMAGE,
    DockerService,
    Engine,
    attempt_log,
    container_job,
    ml_path,
)
from tests.support.daemon import Daemon
from tests.support.waiting import wait_for
from trainqd.attempts import engine as engines

pytestmark = pytest.mark.containers


def clients(name: str) -> list[list[str]]:
    """The command lines of the engine clients running container `name`."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().decode().split("\0")
        except OSError:
            continue
        if name in argv and Path(argv[0]).name in ("docker", "podman"):
            found.append([Path(argv[0]).name, *argv[1:]])
    return found


def test_the_contract_through_the_docker_cli(docker_daemon: Daemon, tmp_path: Path) -> None:
    data = tmp_path / "train"
    data.mkdir()
    (data / "a.csv").write_text("1,2\n")
    spec = container_job(
        "contract_dump.py",
        name="docker-c",
        gpus=1,
        hyperparameters={"lr": 0.5},
        channels={"train": {"source": str(data)}},
    )
    job_id = docker_daemon.submit(spec)["id"]
    job = docker_daemon.wait_state(job_id)
    assert job["state"] == "COMPLETED", attempt_log(docker_daemon, job_id)
    report = json.loads((Path(job["job_dir"]) / "output" / "data" / "contract.json").read_text())
    env = report["env"]
    assert report["argv"] == ["/opt/trainq/trainers/contract_dump.py"]
    assert (report["uid"], report["gid"]) == (0, 0)
    assert all(report["layout"].values()), report["layout"]
    assert report["config"]["hyperparameters.json"] == {"lr": "0.5"}
    assert report["channels"]["train"] == {"files": {"a.csv": "1,2\n"}, "write": "EROFS"}
    assert env["SAGEMAKER_BASE_DIR"] == "/opt/ml"
    assert env["SM_CHANNEL_TRAIN"] == "/opt/ml/input/data/train"
    assert env["TRAINING_JOB_NAME"] == "docker-c"
    assert env["TRAINQ_ATTEMPT"] == "1"
    assert env["CUDA_VISIBLE_DEVICES"] == str(job["attempts"][0]["gpus"][0])
    assert env["NVIDIA_VISIBLE_DEVICES"].startswith("GPU-")


def test_a_stop_through_the_docker_cli(
    docker_daemon: Daemon, docker_service: DockerService
) -> None:
    job_id = docker_daemon.submit(container_job("sleeper.py", stop_grace_seconds=30))["id"]
    wait_for(ml_path(docker_daemon, job_id, "output", "data", "pid").exists, timeout=15,
             what="the trainer to start")  # fmt: skip
    name = docker_daemon.job(job_id)["attempts"][0]["container"]
    # The attempt's trainer, to its monitor, is the docker client attached to the container.
    assert [argv[:4] for argv in clients(name)] == [["docker", "run", "--name", name]]
    seen = docker_service.run("inspect", "--format", "{{json .Config.Labels}}", name)
    assert seen.returncode == 0, seen.stderr
    labels = json.loads(seen.stdout)
    assert (labels["trainq.job"], labels["trainq.attempt"]) == (str(job_id), "1")

    assert docker_daemon.cli("stop", str(job_id)).returncode == 0
    done = docker_daemon.wait_state(job_id, timeout=20)
    assert done["state"] == "STOPPED", attempt_log(docker_daemon, job_id)
    assert (done["attempts"][0]["outcome"], done["attempts"][0]["exit_code"]) == ("stopped", 0)
    assert (Path(done["job_dir"]) / "checkpoints" / "on-sigterm").read_text() == "1"

    def removed() -> bool:
        return docker_service.run("inspect", name).returncode != 0

    wait_for(removed, timeout=10, what=f"{name} to be removed")


def test_the_docker_cli_takes_trainqs_run_command_for_two_gpus(
    engine: Engine, docker_service: DockerService, tmp_path: Path
) -> None:
    """The `docker run` trainqd would start for a job on two real GPUs, given to the real
    docker CLI. podman's service ignores the GPU request; what this shows is that the CLI
    accepts the flags (with NVIDIA's runtime, on a GPU host, they pass the devices)."""
    env_file = tmp_path / "env"
    env_file.write_text(engines.env_file_text({"TRAINER": "exit_with.py", "TRAINER_ARGS": "0"}))
    ml_root = tmp_path / "ml"
    ml_root.mkdir()
    argv = engines.run_argv(
        engines.Engine("docker", docker_service.docker),
        image=IMAGE,
        name=engines.container_name("test", 0, 1),
        instance="test",
        job_id=0,
        attempt=1,
        owner_uid=0,
        user=(0, 0),
        groups=[0],
        env_file=str(env_file),
        mounts=[engines.Mount(str(ml_root), "/opt/ml", read_only=False)],
        network="none",
        gpu_uuids=["GPU-5a1f0c3e-0000-4000-8000-000000000001",
                   "GPU-5a1f0c3e-0000-4000-8000-000000000002"],
        real_gpus=True,
    )  # fmt: skip
    assert "--gpus" in argv
    try:
        ran = docker_service.run(*argv[1:])
        assert ran.returncode == 0, ran.stderr
        assert "stdout line from a trainer exiting 0" in ran.stdout
    finally:
        engine.run("rm", "--force", engines.container_name("test", 0, 1))


def test_an_entrypoint_the_engine_cannot_start_through_the_docker_cli(
    docker_daemon: Daemon,
) -> None:
    spec = container_job("exit_with.py", "0")
    spec["image"] = NO_ENTRYPOINT_IMAGE
    job_id = docker_daemon.submit(spec)["id"]
    done = docker_daemon.wait_state(job_id)
    assert done["state"] == "FAILED"
    assert done["attempts"][0]["outcome"] == "engine_error", done["attempts"][0]
