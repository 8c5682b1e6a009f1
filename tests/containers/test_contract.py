"""The trainer's contract inside a container (docs/architecture.md): `IMAGE train` with
the ml root at /opt/ml, File channels mounted read-only, Pipe mode FIFOs through the bind
mount, the job's environment and GPUs, and a container named and labelled after the job."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support.containers import (
    Engine,
    attempt_log,
    container_job,
    ml_path,
)
from tests.support.daemon import Daemon
from tests.support.waiting import wait_for

pytestmark = pytest.mark.containers

# What an env file might mangle: blanks at both ends, quotes, "$", "#", "=".
ODD_VALUE = """ lead 'single' "double" $HOME ${X} #not-a-comment a=b trail """


def test_the_trainer_finds_the_contract_at_opt_ml(podman_daemon: Daemon, tmp_path: Path) -> None:
    data = tmp_path / "train"
    (data / "sub").mkdir(parents=True)
    (data / "a.csv").write_text("1,2\n")
    (data / "sub" / "b.csv").write_text("3,4\n")
    labels = tmp_path / "labels.txt"
    labels.write_text("cat\ndog\n")
    spec = container_job(
        "contract_dump.py",
        name="resnet-c",
        gpus=2,
        hyperparameters={"lr": 0.1, "epochs": 3, "arch": "resnet50"},
        environment={"WANDB_MODE": "offline", "ODD": ODD_VALUE},
        channels={
            "train": {"source": str(data), "content_type": "text/csv"},
            "labels": {"source": str(labels)},
        },
    )
    job_id = podman_daemon.submit(spec)["id"]
    job = podman_daemon.wait_state(job_id)
    assert job["state"] == "COMPLETED", attempt_log(podman_daemon, job_id)
    assert job["runtime"] == "container"
    ml = Path(job["job_dir"])
    report = json.loads((ml / "output" / "data" / "contract.json").read_text())
    env = report["env"]

    # The image ran as `IMAGE train`, as root (the submitter), from the image's own workdir.
    assert report["argv"] == ["/opt/trainq/trainers/contract_dump.py"]
    assert env["TRAINER"] == "contract_dump.py"  # the job's environment came along
    assert (report["uid"], report["gid"]) == (0, 0)

    # The ml root is /opt/ml, laid out as SageMaker lays it out, and it is the job dir's.
    assert env["SAGEMAKER_BASE_DIR"] == "/opt/ml"
    assert all(report["layout"].values()), report["layout"]
    assert report["config"]["hyperparameters.json"] == {
        "lr": "0.1", "epochs": "3", "arch": "resnet50",
    }  # fmt: skip
    assert report["config"]["inputdataconfig.json"] == {
        "train": {
            "ContentType": "text/csv",
            "TrainingInputMode": "File",
            "S3DistributionType": "FullyReplicated",
            "RecordWrapperType": "None",
        },
        "labels": {
            "TrainingInputMode": "File",
            "S3DistributionType": "FullyReplicated",
            "RecordWrapperType": "None",
        },
    }
    assert report["config"]["resourceconfig.json"]["hosts"] == ["algo-1"]
    assert (ml / "model" / "model.txt").read_text() == "weights\n"

    # File channels: the sources' files, read-only. A single file is mounted inside the
    # channel's directory, which is the job's own (as for a subprocess trainer).
    assert report["channels"]["train"] == {
        "files": {"a.csv": "1,2\n", "sub/b.csv": "3,4\n"}, "write": "EROFS",
    }  # fmt: skip
    assert report["channels"]["labels"]["files"] == {"labels.txt": "cat\ndog\n"}
    assert sorted(os.listdir(data)) == ["a.csv", "sub"]  # nothing written to the sources
    assert sorted(os.listdir(tmp_path)) == ["labels.txt", "train"]

    # The toolkit's variables name paths under /opt/ml; hyperparameters stay strings.
    assert env["SM_MODEL_DIR"] == "/opt/ml/model"
    assert env["SM_INPUT_DIR"] == "/opt/ml/input"
    assert env["SM_INPUT_CONFIG_DIR"] == "/opt/ml/input/config"
    assert env["SM_OUTPUT_DATA_DIR"] == "/opt/ml/output/data"
    assert env["SM_CHANNEL_TRAIN"] == "/opt/ml/input/data/train"
    assert env["SM_CHANNEL_LABELS"] == "/opt/ml/input/data/labels"
    assert json.loads(env["SM_CHANNELS"]) == ["labels", "train"]
    assert json.loads(env["SM_HPS"]) == {"lr": 0.1, "epochs": 3, "arch": "resnet50"}
    assert env["SM_HP_ARCH"] == "resnet50"
    assert env["SM_NUM_GPUS"] == "2"

    # Who the job is, and its GPUs: simulated ones come as the variables alone.
    attempt = job["attempts"][0]
    assert env["TRAINING_JOB_NAME"] == "resnet-c"
    assert env["TRAINING_JOB_ARN"].endswith("training-job/resnet-c-" + str(job_id))
    assert env["TRAINQ_ATTEMPT"] == "1"
    assert env["WANDB_MODE"] == "offline"
    assert env["ODD"] == ODD_VALUE  # byte for byte, through the env file
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert [int(i) for i in env["CUDA_VISIBLE_DEVICES"].split(",")] == attempt["gpus"]
    uuids = env["NVIDIA_VISIBLE_DEVICES"].split(",")
    assert len(uuids) == 2
    assert all(u.startswith("GPU-") for u in uuids)
    assert attempt["outcome"] == "exited"
    assert attempt["exit_code"] == 0


def test_the_container_is_named_and_labelled_after_the_job(
    podman_daemon: Daemon, engine: Engine
) -> None:
    job_id = podman_daemon.submit(
        container_job("until_released.py", "/opt/ml/checkpoints/release")
    )["id"]
    wait_for(ml_path(podman_daemon, job_id, "output", "data", "pid").exists,
             what="the trainer to start")  # fmt: skip
    name = podman_daemon.job(job_id)["attempts"][0]["container"]
    assert name.startswith("trainq-")
    assert name.endswith(f"-{job_id}-1")
    labels = engine.job_containers()[name]
    assert name == f"trainq-{labels['trainq.instance']}-{job_id}-1"
    assert labels["trainq.job"] == str(job_id)
    assert labels["trainq.attempt"] == "1"
    assert labels["trainq.owner"] == "0"
    state = engine.container_state(name)
    assert state is not None
    assert state["Running"] is True

    ml_path(podman_daemon, job_id, "checkpoints", "release").touch()
    assert podman_daemon.wait_state(job_id)["state"] == "COMPLETED"
    # Removed once the job ended (by the monitor, right after its exit record).
    wait_for(lambda: name not in engine.job_containers(), timeout=10,
             what=f"{name} to be removed")  # fmt: skip


def test_pipe_mode_streams_through_the_bind_mount(podman_daemon: Daemon, tmp_path: Path) -> None:
    source = tmp_path / "shards"
    source.mkdir()
    shards = {"part-0": os.urandom(300_000), "part-1": os.urandom(700_001), "part-2": b"end\n"}
    for name, content in shards.items():
        (source / name).write_bytes(content)
    spec = container_job(
        "pipe_reader.py",
        "/opt/ml/output/data",
        "train:2",
        channels={"train": {"source": str(source), "mode": "Pipe", "epochs": 2}},
    )
    job_id = podman_daemon.submit(spec)["id"]
    job = podman_daemon.wait_state(job_id)
    assert job["state"] == "COMPLETED", attempt_log(podman_daemon, job_id)
    whole = b"".join(shards[name] for name in sorted(shards))
    data = Path(job["job_dir"]) / "output" / "data"
    assert (data / "train_0").read_bytes() == whole
    assert (data / "train_1").read_bytes() == whole
    # The feeder removed its FIFOs when the epochs were over.
    assert not list((Path(job["job_dir"]) / "input" / "data").glob("train_*"))


def test_a_channel_path_with_colons_and_commas(podman_daemon: Daemon, tmp_path: Path) -> None:
    # A directory named after a time (and a version): --volume's SRC:DST syntax cannot hold
    # it, --mount with the path quoted can.
    data = tmp_path / "2026-01-01T10:00:00,v2"
    data.mkdir()
    (data / "x.csv").write_text("5,6\n")
    spec = container_job("contract_dump.py", channels={"train": {"source": str(data)}})
    job_id = podman_daemon.submit(spec)["id"]
    job = podman_daemon.wait_state(job_id)
    assert job["state"] == "COMPLETED", attempt_log(podman_daemon, job_id)
    report = json.loads((Path(job["job_dir"]) / "output" / "data" / "contract.json").read_text())
    assert report["channels"]["train"] == {"files": {"x.csv": "5,6\n"}, "write": "EROFS"}


def test_long_hyperparameters_reach_the_container(podman_daemon: Daemon) -> None:
    # 13 values of SageMaker's maximum length, just under trainq's cap on their JSON: then
    # SM_TRAINING_ENV (which holds them too) is over the engines' 64 KiB --env-file lines.
    hyperparameters = {f"p{n:02d}": chr(ord("a") + n) * 2500 for n in range(13)}
    spec = container_job("contract_dump.py", hyperparameters=hyperparameters)
    job_id = podman_daemon.submit(spec)["id"]
    job = podman_daemon.wait_state(job_id)
    assert job["state"] == "COMPLETED", job["failure_reason"]
    report = json.loads((Path(job["job_dir"]) / "output" / "data" / "contract.json").read_text())
    assert report["config"]["hyperparameters.json"] == hyperparameters
    assert json.loads(report["env"]["SM_TRAINING_ENV"])["hyperparameters"] == hyperparameters
