"""`trainq export --to slurm` on a real Slurm: the exported batch script, submitted with
sbatch, gives the trainer the same contract as trainqd does, retries a transient crash
that then resumes from its checkpoint, and relays scancel's SIGTERM to the trainer."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

from tests.helpers import wait_for
from tests.slurm.conftest import Slurm
from trainq.context import Context
from trainq.core.spec import parse_spec
from trainq.export_command import ExportRequest, run_export
from trainqd.attempts import contract

TRAINERS = Path(__file__).resolve().parents[1] / "trainers"
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")


def export(tmp_path: Path, spec: dict[str, object]) -> Path:
    """`trainq export -f SPEC --to slurm -o job.sbatch`, as the CLI runs it."""
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(spec))
    out, err = io.StringIO(), io.StringIO()
    ctx = Context(
        socket_path=tmp_path / "no.sock",
        environ={"PATH": "/usr/local/bin:/usr/bin:/bin"},
        cwd=tmp_path,
        stdout=out,
        stderr=err,
    )
    request = ExportRequest(
        target="slurm", spec_file=str(spec_file), output="job.sbatch", python=sys.executable
    )
    assert run_export(ctx, request) == 0, err.getvalue()
    return tmp_path / "job.sbatch"


def submit(slurm: Slurm, script: Path) -> str:
    done = slurm.run("sbatch", "--parsable", str(script), cwd=script.parent)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split(";")[0]


def wait_ended(slurm: Slurm, job_id: str, timeout: float = 60) -> dict[str, str]:
    def ended() -> dict[str, str] | None:
        fields = slurm.job_fields(job_id)
        return fields if fields.get("JobState") in ENDED else None

    return wait_for(ended, timeout=timeout, interval=0.2, what=f"Slurm job {job_id} to end")


def outputs(tmp_path: Path, name: str, job_id: str) -> str:
    return "".join(path.read_text() for path in sorted(tmp_path.glob(f"trainq-{name}-{job_id}.*")))


def test_trainer_finds_the_contract_under_slurm(slurm: Slurm, tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    (data / "a.csv").write_text("1,2\n")
    (data / "sub" / "b.csv").write_text("3,4\n")
    records = tmp_path / "records.bin"
    records.write_bytes(b"piped bytes\n" * 100)
    piped = tmp_path / "piped"
    piped.mkdir()
    command = (
        f"{sys.executable} {TRAINERS / 'contract_dump.py'} && "
        f"{sys.executable} {TRAINERS / 'pipe_reader.py'} {piped} stream:1"
    )
    spec = {
        "name": "contract",
        "gpus": 1,
        "command": ["/bin/sh", "-c", command],
        "hyperparameters": {"lr": "0.1", "epochs": "3"},
        "channels": {
            "train": {"source": str(data)},
            "stream": {"source": str(records), "mode": "Pipe"},
        },
        "environment": {"WANDB_MODE": "offline"},
        "max_runtime_seconds": 600,
        "stop_grace_seconds": 5,
    }
    script = export(tmp_path, spec)
    text = script.read_text()
    assert "#SBATCH --gres=gpu:1" in text
    assert "#SBATCH --signal=B:TERM@5" in text
    assert "#SBATCH --time=11" in text  # 605 s in whole minutes
    assert "#SBATCH --requeue" in text

    job_id = submit(slurm, script)
    fields = wait_ended(slurm, job_id)
    logs = outputs(tmp_path, "contract", job_id)
    assert fields["JobState"] == "COMPLETED", logs
    assert fields["ExitCode"] == "0:0"

    ml = tmp_path / f"trainq-{job_id}" / "ml"
    report = json.loads((ml / "output" / "data" / "contract.json").read_text())
    env = report["env"]
    # What trainqd gives a trainer, from trainqd's own contract module.
    validated = parse_spec({**spec, "working_dir": str(tmp_path)})
    files = contract.config_files(validated)
    for name in ("hyperparameters.json", "inputdataconfig.json", "resourceconfig.json"):
        assert report["config"][name] == json.loads(files[f"input/config/{name}"])
    expected = contract.toolkit_environment(validated, str(ml), 1, "contract")
    assert {k: v for k, v in env.items() if k.startswith("SM_")} == expected
    assert env["TRAINQ_ATTEMPT"] == "1"
    assert env["TRAINQ_JOB_ID"] == job_id
    assert env["TRAINING_JOB_NAME"] == "contract"
    assert env["SAGEMAKER_BASE_DIR"] == str(ml)
    assert env["WANDB_MODE"] == "offline"
    assert len(env["CUDA_VISIBLE_DEVICES"].split(",")) == 1  # Slurm's one gres GPU
    assert all(report["layout"].values()), report["layout"]
    assert report["channels"]["train"]["files"] == {"a.csv": "1,2\n", "sub/b.csv": "3,4\n"}
    # The Pipe mode channel, fed by trainq's feeder through a FIFO.
    assert (piped / "stream_0").read_bytes() == records.read_bytes()
    assert "contract recorded" in logs  # the trainer's stdout reaches Slurm's output file


def test_transient_crash_is_retried_and_resumes(slurm: Slurm, tmp_path: Path) -> None:
    spec = {
        "name": "resume",
        "command": [sys.executable, str(TRAINERS / "crash_then_resume.py"), "exit:139"],
        "retry_backoff_seconds": 0.1,
    }
    job_id = submit(slurm, export(tmp_path, spec))
    fields = wait_ended(slurm, job_id)
    logs = outputs(tmp_path, "resume", job_id)
    assert fields["JobState"] == "COMPLETED", logs
    job_dir = tmp_path / f"trainq-{job_id}"
    resumed = json.loads((job_dir / "ml" / "model" / "resumed.json").read_text())
    assert resumed == {"step": 100, "saved_on": 1, "resumed_on": 2}
    first = json.loads((job_dir / "attempts" / "1" / "exit.json").read_text().strip())
    assert (first["outcome"], first["exit_code"]) == ("exited", 139)
    assert sorted(p.name for p in (job_dir / "attempts").iterdir() if p.is_dir()) == ["1", "2"]


def test_permanent_failure_is_not_retried(slurm: Slurm, tmp_path: Path) -> None:
    spec: dict[str, object] = {
        "name": "fails",
        "command": [sys.executable, str(TRAINERS / "exit_with.py"), "3"],
    }
    job_id = submit(slurm, export(tmp_path, spec))
    fields = wait_ended(slurm, job_id)
    assert fields["JobState"] == "FAILED", outputs(tmp_path, "fails", job_id)
    assert fields["ExitCode"] == "3:0"
    attempts = tmp_path / f"trainq-{job_id}" / "attempts"
    assert [p.name for p in attempts.iterdir() if p.is_dir()] == ["1"]


def test_scancel_gives_the_trainer_sigterm(slurm: Slurm, tmp_path: Path) -> None:
    trainer = (
        "trap 'echo got TERM; touch \"$SM_MODEL_DIR/terminated\"; exit 0' TERM; "
        'touch "$SM_MODEL_DIR/ready"; while :; do sleep 0.1; done'
    )
    spec = {"name": "stopme", "command": ["/bin/sh", "-c", trainer], "stop_grace_seconds": 20}
    job_id = submit(slurm, export(tmp_path, spec))
    model = tmp_path / f"trainq-{job_id}" / "ml" / "model"
    wait_for((model / "ready").exists, timeout=30, interval=0.1, what="the trainer")
    assert slurm.run("scancel", job_id).returncode == 0
    fields = wait_ended(slurm, job_id)
    assert fields["JobState"] == "CANCELLED"
    assert (model / "terminated").exists(), outputs(tmp_path, "stopme", job_id)
    # A stop is not a crash: no second attempt.
    attempts = tmp_path / f"trainq-{job_id}" / "attempts"
    assert [p.name for p in attempts.iterdir() if p.is_dir()] == ["1"]
