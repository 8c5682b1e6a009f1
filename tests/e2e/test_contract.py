"""The core issue's "done when": a job with two GPUs, two hyperparameters and a File-mode
channel, submitted with the real CLI to a real daemon, finds all the contract promises."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from tests.support.daemon import Daemon, trainer


def test_trainer_finds_the_contract(daemon: Daemon, tmp_path: Path) -> None:
    data = tmp_path / "train"
    (data / "sub").mkdir(parents=True)
    (data / "a.csv").write_text("1,2\n")
    (data / "sub" / "b.csv").write_text("3,4\n")
    result = daemon.cli(
        "submit",
        "--name",
        "resnet-a",
        "--gpus",
        "2",
        "--hp",
        "lr=0.1",
        "--hp",
        "epochs=3",
        "--channel",
        f"train={data}",
        "--env",
        "WANDB_MODE=offline",
        "--",
        sys.executable,
        trainer("contract_dump.py"),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    job_id = int(result.stdout.strip())
    assert result.stdout.strip() == str(job_id)  # the id alone
    assert daemon.cli("wait", str(job_id)).returncode == 0
    job = daemon.job(job_id)
    assert job["state"] == "COMPLETED"
    assert job["name"] == "resnet-a"
    ml = Path(job["job_dir"])
    assert ml == daemon.state_dir / "jobs" / str(job_id) / "ml"
    report = json.loads((ml / "output" / "data" / "contract.json").read_text())
    env = report["env"]

    # The files of input/config/.
    assert report["config"]["hyperparameters.json"] == {"lr": "0.1", "epochs": "3"}
    assert report["config"]["inputdataconfig.json"] == {
        "train": {
            "TrainingInputMode": "File",
            "S3DistributionType": "FullyReplicated",
            "RecordWrapperType": "None",
        }
    }
    assert report["config"]["resourceconfig.json"]["current_host"] == "algo-1"
    assert report["config"]["resourceconfig.json"]["hosts"] == ["algo-1"]
    assert all(report["layout"].values()), report["layout"]
    assert (ml / "model" / "model.txt").read_text() == "weights\n"

    # The channel: the source's files, read-only.
    channel = report["channels"]["train"]
    assert channel["files"] == {"a.csv": "1,2\n", "sub/b.csv": "3,4\n"}
    assert channel["write"] == "EROFS"
    assert not (data / "written-by-trainer").exists()

    # The environment.
    gpus = env["CUDA_VISIBLE_DEVICES"].split(",")
    assert len(gpus) == 2
    assert sorted(map(int, gpus)) == sorted(job["attempts"][0]["gpus"])
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert len(env["NVIDIA_VISIBLE_DEVICES"].split(",")) == 2
    assert all(u.startswith("GPU-") for u in env["NVIDIA_VISIBLE_DEVICES"].split(","))
    assert env["TRAINING_JOB_NAME"] == "resnet-a"
    assert env["TRAINING_JOB_ARN"].startswith("arn:")
    assert env["SAGEMAKER_BASE_DIR"] == str(ml)
    assert env["SM_MODEL_DIR"] == str(ml / "model")
    assert env["SM_CHANNEL_TRAIN"] == str(ml / "input" / "data" / "train")
    assert env["SM_CHANNELS"] == '["train"]'
    assert json.loads(env["SM_HPS"]) == {"lr": 0.1, "epochs": 3}
    assert env["SM_HP_LR"] == "0.1"
    assert env["SM_NUM_GPUS"] == "2"
    assert env["TRAINQ_ATTEMPT"] == "1"
    assert env["WANDB_MODE"] == "offline"
    assert env["PATH"] == os.environ["PATH"]  # the submitter's PATH came along
    assert report["cwd"] == str(tmp_path)  # where it was submitted from
    assert report["pgid_is_own"]

    # The record.
    attempt = job["attempts"][0]
    assert (attempt["number"], attempt["exit_code"], attempt["outcome"]) == (1, 0, "exited")
    assert job["owner"]["uid"] == os.getuid()
    assert job["started_at"]
    assert job["ended_at"]
    logs = daemon.cli("logs", str(job_id))
    assert logs.returncode == 0
    assert "contract recorded" in logs.stdout


def test_json_output_of_submit_and_show(daemon: Daemon, tmp_path: Path) -> None:
    result = daemon.cli("submit", "--json", "--", "true", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["state"] in ("PENDING", "RUNNING", "COMPLETED")
    daemon.wait_state(record["id"], "COMPLETED")
    shown = json.loads(daemon.cli("show", str(record["id"]), "--json").stdout)
    assert shown["id"] == record["id"]
    assert shown["state"] == "COMPLETED"
