"""`trainq export` end to end through the CLI's entry point: a spec file with submit's flags
over it, or an existing job's spec from the API (the stub on a real socket); the artifact on
stdout or in -o FILE; refusals as one line and exit status 2."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.support.apistub import ApiStub, Reply
from trainq.cli import main

IMAGE_JOB: dict[str, Any] = {
    "id": 5,
    "name": "resnet-a",
    "state": "RUNNING",
    "spec": {
        "name": "resnet-a",
        "image": "registry.example/resnet:1",
        "gpus": 1,
        "hyperparameters": {"lr": "0.1"},
        "channels": {"train": {"source": "/data/train", "mode": "File"}},
        "environment": {"WANDB_MODE": "offline"},
        "max_retries": 3,
    },
}


def trainq(stub: ApiStub, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(["--socket", stub.socket_path, *argv])
    out, err = capsys.readouterr()
    return status, out, err


@pytest.fixture
def in_tmp(tmp_path: Path) -> Any:
    before = os.getcwd()
    os.chdir(tmp_path)
    try:
        yield tmp_path
    finally:
        os.chdir(before)


def test_a_spec_file_with_flags_over_it_to_slurm(
    stub: ApiStub, capsys: pytest.CaptureFixture[str], in_tmp: Path
) -> None:
    (in_tmp / "job.toml").write_text(
        'name = "resnet"\ngpus = 1\ncommand = ["python3", "train.py"]\n'
        "max_runtime_seconds = 3600\n[hyperparameters]\nlr = 0.1\n"
    )
    status, out, err = trainq(
        stub, capsys, "export", "--to", "slurm", "-f", "job.toml", "--gpus", "2",
        "--hp", "epochs=3", "--channel", "train=data", "--python", "/opt/venv/bin/python",
    )  # fmt: skip
    assert status == 0, err
    assert "#SBATCH --gres=gpu:2" in out
    assert "#SBATCH --time=62" in out
    assert "exec /opt/venv/bin/python -m trainqd.run" in out
    spec = json.loads(out.split("<<'TRAINQ_SPEC_END'\n", 1)[1].split("\n", 1)[0])
    assert spec["hyperparameters"] == {"lr": "0.1", "epochs": "3"}
    assert spec["channels"]["train"]["source"] == str(in_tmp / "data")  # made absolute
    assert spec["working_dir"] == str(in_tmp)  # where it was exported, as submit does
    assert stub.seen == []  # a spec file needs no daemon


def test_a_command_after_the_double_dash(
    stub: ApiStub, capsys: pytest.CaptureFixture[str], in_tmp: Path
) -> None:
    status, out, err = trainq(stub, capsys, "export", "--to", "slurm", "--", "python3", "t.py")
    assert status == 0, err
    assert '"command": ["python3", "t.py"]' in out


def test_an_existing_job_to_sagemaker(
    stub: ApiStub, capsys: pytest.CaptureFixture[str], in_tmp: Path
) -> None:
    stub.on("GET", "/v1/jobs/5", Reply(body=IMAGE_JOB))
    status, out, err = trainq(
        stub, capsys, "export", "5", "--to", "sagemaker", "--s3", "train=s3://bucket/train/",
        "--role-arn", "arn:aws:iam::123456789012:role/Train", "--output-s3", "s3://bucket/out/",
    )  # fmt: skip
    assert status == 0, err
    body = json.loads(out)  # stdout is the request alone
    assert body["AlgorithmSpecification"]["TrainingImage"] == "registry.example/resnet:1"
    assert body["ResourceConfig"]["InstanceType"] == "ml.g5.xlarge"
    assert err.startswith("aws sagemaker create-training-job --cli-input-json ")
    assert [s.path for s in stub.seen] == ["/v1/jobs/5"]


def test_output_file_and_the_aws_line_that_reads_it(
    stub: ApiStub, capsys: pytest.CaptureFixture[str], in_tmp: Path
) -> None:
    stub.on("GET", "/v1/jobs/5", Reply(body=IMAGE_JOB))
    status, out, err = trainq(
        stub, capsys, "export", "5", "--to", "sagemaker", "-o", "req.json",
        "--s3", "train=s3://b/t", "--role-arn", "arn:aws:iam::123456789012:role/T",
        "--output-s3", "s3://b/o", "--instance-type", "ml.p3.2xlarge",
    )  # fmt: skip
    assert status == 0, err
    assert out == ""
    assert json.loads((in_tmp / "req.json").read_text())["ResourceConfig"]["InstanceType"] == (
        "ml.p3.2xlarge"
    )
    assert f"--cli-input-json file://{in_tmp / 'req.json'}" in err


def test_kubernetes_from_a_job(
    stub: ApiStub, capsys: pytest.CaptureFixture[str], in_tmp: Path
) -> None:
    stub.on("GET", "/v1/jobs/5", Reply(body=IMAGE_JOB))
    status, _, err = trainq(
        stub, capsys, "export", "5", "--to", "kubernetes", "--volume", "train=imagenet",
        "-o", "job.json",
    )  # fmt: skip
    assert status == 0, err
    manifest = json.loads((in_tmp / "job.json").read_text())
    assert [item["kind"] for item in manifest["items"]] == ["ConfigMap", "Job"]


def test_a_refusal_is_one_line_and_exit_2(
    stub: ApiStub, capsys: pytest.CaptureFixture[str], in_tmp: Path
) -> None:
    status, out, err = trainq(stub, capsys, "export", "--to", "kubernetes", "--", "python3")
    assert status == 2
    assert out == ""
    assert err == (
        "trainq: cannot export to kubernetes: command: a Kubernetes Job runs images; "
        "give the job an image to export it\n"
    )
    assert not list(in_tmp.iterdir())


def test_someone_elses_hidden_environment_is_refused(
    stub: ApiStub, capsys: pytest.CaptureFixture[str], in_tmp: Path
) -> None:
    hidden = {**IMAGE_JOB, "spec": {**IMAGE_JOB["spec"], "environment": {"TOKEN": "<hidden>"}}}
    stub.on("GET", "/v1/jobs/5", Reply(body=hidden))
    status, out, err = trainq(stub, capsys, "export", "5", "--to", "slurm")
    assert (status, out) == (2, "")
    assert "environment: the values of TOKEN are hidden from you" in err


def test_someone_elses_hidden_hyperparameters_are_refused(
    stub: ApiStub, capsys: pytest.CaptureFixture[str], in_tmp: Path
) -> None:
    spec = {**IMAGE_JOB["spec"], "hyperparameters": {"tok": "<hidden>", "lr": "<hidden>"}}
    stub.on("GET", "/v1/jobs/5", Reply(body={**IMAGE_JOB, "spec": spec}))
    status, out, err = trainq(stub, capsys, "export", "5", "--to", "slurm")
    assert (status, out) == (2, "")
    assert "hyperparameters: the values of lr, tok are hidden from you" in err


def test_a_job_and_a_spec_file_at_once_is_refused(
    stub: ApiStub, capsys: pytest.CaptureFixture[str], in_tmp: Path
) -> None:
    (in_tmp / "job.toml").write_text('command = ["true"]\n')
    status, _, err = trainq(stub, capsys, "export", "5", "--to", "slurm", "-f", "job.toml")
    assert status == 2
    assert err == "trainq: give either JOB or -f SPEC, not both\n"


def test_flags_over_a_job(stub: ApiStub, capsys: pytest.CaptureFixture[str], in_tmp: Path) -> None:
    pending = {**IMAGE_JOB, "spec": {**IMAGE_JOB["spec"], "priority": 7}}
    stub.on("GET", "/v1/jobs/5", Reply(body=pending))
    status, out, err = trainq(
        stub, capsys, "export", "5", "--to", "sagemaker", "--priority", "0", "--gpus", "4",
        "--s3", "train=s3://bucket/train/", "--role-arn", "arn:aws:iam::1:role/T",
        "--output-s3", "s3://bucket/out/",
    )  # fmt: skip
    assert status == 0, err
    body = json.loads(out)
    assert body["ResourceConfig"]["InstanceType"] == "ml.g5.12xlarge"  # --gpus 4 over its 1
    # Its retries (3) resume from checkpoints beside the output, as a retry here would.
    assert body["CheckpointConfig"]["S3Uri"] == "s3://bucket/out/resnet-a/checkpoints/"


def test_a_priority_above_zero_goes_to_slurm_with_a_note(
    stub: ApiStub, capsys: pytest.CaptureFixture[str], in_tmp: Path
) -> None:
    status, out, err = trainq(
        stub, capsys, "export", "--to", "slurm", "--priority", "5", "--", "python3", "t.py"
    )
    assert status == 0, err
    assert err.startswith("trainq: note: priority 5 is not carried over")
    assert err.count("\n") == 1
    assert "#SBATCH --nice" not in out


def test_image_over_a_spec_files_command(
    stub: ApiStub, capsys: pytest.CaptureFixture[str], in_tmp: Path
) -> None:
    (in_tmp / "job.toml").write_text('name = "r"\ncommand = ["python3", "train.py"]\n')
    status, out, err = trainq(
        stub, capsys, "export", "--to", "kubernetes", "-f", "job.toml", "--image", "reg/t:1"
    )
    assert status == 0, err
    job = json.loads(out)["items"][1]
    assert job["spec"]["template"]["spec"]["containers"][0]["image"] == "reg/t:1"


def test_a_command_over_a_spec_files_image(
    stub: ApiStub, capsys: pytest.CaptureFixture[str], in_tmp: Path
) -> None:
    (in_tmp / "job.toml").write_text('image = "reg/t:1"\nengine = "podman"\n')
    status, out, err = trainq(
        stub, capsys, "export", "--to", "slurm", "-f", "job.toml", "--", "python3", "t.py"
    )
    assert status == 0, err
    assert '"command": ["python3", "t.py"]' in out
    assert "reg/t:1" not in out


def test_an_invalid_spec_is_one_line_and_exit_2(
    stub: ApiStub, capsys: pytest.CaptureFixture[str], in_tmp: Path
) -> None:
    status, out, err = trainq(
        stub, capsys, "export", "--to", "slurm", "--image", "reg/t:1", "--", "python3", "t.py"
    )
    assert (status, out) == (2, "")
    assert err == (
        "trainq: spec: give exactly one of 'command' (a subprocess) and 'image' (a container)\n"
    )


def test_an_unknown_target_is_a_usage_error(
    stub: ApiStub, capsys: pytest.CaptureFixture[str], in_tmp: Path
) -> None:
    status, _, err = trainq(stub, capsys, "export", "--to", "nomad", "--", "true")
    assert status == 2
    assert "invalid choice" in err


def test_after_is_slurms_dependency_and_refused_where_it_means_nothing(
    stub: ApiStub, capsys: pytest.CaptureFixture[str], in_tmp: Path
) -> None:
    status, out, err = trainq(
        stub, capsys, "export", "--to", "slurm", "--after", "4711", "--after", "4712:any",
        "--", "python3", "t.py",
    )  # fmt: skip
    assert status == 0, err
    assert "#SBATCH --dependency=afterok:4711,afterany:4712\n" in out
    status, out, err = trainq(
        stub, capsys, "export", "--to", "sagemaker", "--after", "4711", "--image", "x:1"
    )
    assert (status, out) == (2, "")
    assert err == (
        "trainq: cannot export to sagemaker: after: it has no dependencies between jobs\n"
    )
    # A trainq job's dependencies name trainq's ids, which no other system knows.
    waiting = {**IMAGE_JOB, "spec": {**IMAGE_JOB["spec"], "after": ["3:ok"]}}
    stub.on("GET", "/v1/jobs/5", Reply(body=waiting))
    status, out, err = trainq(stub, capsys, "export", "5", "--to", "slurm")
    assert (status, out) == (2, "")
    assert err.startswith("trainq: after: job 5 waits for trainq jobs")
    assert err.count("\n") == 1


def test_export_takes_every_flag_submit_sets_the_spec_with(
    stub: ApiStub, capsys: pytest.CaptureFixture[str], in_tmp: Path
) -> None:
    (in_tmp / "src").mkdir()
    status, out, err = trainq(
        stub, capsys, "export", "--to", "slurm", "--class", "gpu", "--metric", "loss=loss (\\S+)",
        "--source-dir", "src", "--no-snapshot", "--notify", "notify-send done", "--mail", "END",
        "--", "python3", "t.py",
    )  # fmt: skip
    assert status == 0, err
    spec = json.loads(out.split("<<'TRAINQ_SPEC_END'\n", 1)[1].split("\n", 1)[0])
    assert spec["class"] == "gpu"
    [metric] = spec["metric_definitions"]
    assert (metric["name"], metric["regex"]) == ("loss", "loss (\\S+)")
    assert (spec["source_dir"], spec["snapshot"]) == (str(in_tmp / "src"), False)
    assert (spec["notify"], spec["mail"]) == (["notify-send", "done"], ["END"])


def test_nodes_flag_to_kubernetes(
    stub: ApiStub, capsys: pytest.CaptureFixture[str], in_tmp: Path
) -> None:
    status, out, err = trainq(
        stub, capsys, "export", "--to", "kubernetes", "--image", "registry.example/ddp:1",
        "--name", "ddp", "--nodes", "3", "--gpus", "2",
    )  # fmt: skip
    assert status == 0, err
    items = {item["kind"]: item for item in json.loads(out)["items"]}
    assert items["Job"]["spec"]["completions"] == 3
    assert items["Service"]["metadata"]["name"] == "ddp"


def test_instance_groups_to_kubernetes(
    stub: ApiStub, capsys: pytest.CaptureFixture[str], in_tmp: Path
) -> None:
    (in_tmp / "job.toml").write_text(
        'name = "ps"\nimage = "reg/paddle:1"\n'
        '[[instance_groups]]\nname = "pservers"\ninstance_count = 2\n'
        '[[instance_groups]]\nname = "trainers"\ninstance_count = 2\ngpus = 1\nprimary = true\n'
    )
    status, out, err = trainq(stub, capsys, "export", "--to", "kubernetes", "-f", "job.toml")
    assert status == 0, err
    jobs = [item for item in json.loads(out)["items"] if item["kind"] == "Job"]
    assert [(j["metadata"]["name"], j["spec"]["completions"]) for j in jobs] == [
        ("ps-pservers", 2),
        ("ps-trainers", 2),
    ]
    (in_tmp / "node.toml").write_text('restart = "node"\n' + (in_tmp / "job.toml").read_text())
    status, out, err = trainq(stub, capsys, "export", "--to", "kubernetes", "-f", "node.toml")
    assert (status, out) == (2, "")
    assert err.startswith("trainq: cannot export to kubernetes: restart: ")
    assert err.count("\n") == 1
