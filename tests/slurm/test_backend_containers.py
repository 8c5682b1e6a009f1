"""Container jobs (spec `image`) through trainqd's Slurm back end, on the container tests'
podman and test image: root's run in the Slurm step under trainq's monitor, which runs the
rootful engine as a local monitor does; an ordinary user's are refused with the reason."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.accounts import Accounts
from tests.support.containers import Engine, attempt_log, container_job
from tests.support.daemon import Daemon
from tests.support.slurm import Slurm, slurm_job_of, slurm_trainqd
from tests.support.users import submit_as, trainq_as
from trainq.core.spec import parse_spec
from trainqd.attempts import contract
from trainqd.backends.slurm import users_container_refusal

pytestmark = [pytest.mark.containers, pytest.mark.multiuser]


@pytest.fixture
def daemon(slurm: Slurm, engine: Engine) -> Iterator[Daemon]:
    """trainqd on the test's Slurm, with the engine's settings (CONTAINERS_CONF) that its
    Slurm steps' engine must get as a local monitor's would."""
    engine.remove_job_containers()
    try:
        with slurm_trainqd(slurm, env=engine.env, default_engine="podman") as d:
            yield d
    finally:
        engine.remove_job_containers()


def test_a_container_job_runs_in_slurm_with_the_contract_at_opt_ml(
    daemon: Daemon, slurm: Slurm, tmp_path: Path
) -> None:
    data = tmp_path / "train"
    data.mkdir()
    (data / "a.csv").write_text("1,2\n")
    spec = container_job(
        "contract_dump.py",
        name="boxed",
        gpus=1,
        hyperparameters={"lr": 0.1},
        channels={"train": {"source": str(data)}},
    )
    job_id = daemon.submit(spec)["id"]
    slurm_id = slurm_job_of(daemon, job_id)
    job = daemon.wait_state(job_id, timeout=60)
    assert job["state"] == "COMPLETED", (job, attempt_log(daemon, job_id), daemon.log())
    assert job["runtime"] == "container"
    assert slurm.job_fields(slurm_id).get("JobState") == "COMPLETED"

    ml = Path(job["job_dir"])
    report = json.loads((ml / "output" / "data" / "contract.json").read_text())
    env = report["env"]
    assert report["argv"] == ["/opt/trainq/trainers/contract_dump.py"]  # the image's own
    files = contract.config_files(parse_spec({**spec, "hyperparameters": {"lr": "0.1"}}))
    for name in ("hyperparameters.json", "inputdataconfig.json", "resourceconfig.json"):
        assert report["config"][name] == json.loads(files[f"input/config/{name}"])
    assert all(report["layout"].values()), report["layout"]
    assert report["channels"]["train"] == {"files": {"a.csv": "1,2\n"}, "write": "EROFS"}
    assert (env["SAGEMAKER_BASE_DIR"], env["SM_MODEL_DIR"]) == ("/opt/ml", "/opt/ml/model")
    assert env["SM_CHANNEL_TRAIN"] == "/opt/ml/input/data/train"
    assert json.loads(env["SM_HPS"]) == {"lr": 0.1}
    assert (env["TRAINQ_JOB_ID"], env["TRAINQ_ATTEMPT"]) == (str(job_id), "1")
    assert len(env["CUDA_VISIBLE_DEVICES"].split(",")) == 1  # Slurm's one gres GPU
    assert (ml / "model" / "model.txt").read_text() == "weights\n"

    logs = daemon.cli("logs", str(job_id))
    assert logs.returncode == 0, logs.stderr
    assert "contract recorded" in logs.stdout


def test_a_users_container_job_is_refused_with_the_reason(
    daemon: Daemon, slurm: Slurm, accounts: Accounts
) -> None:
    alice = accounts.alice
    job_id = submit_as(daemon, alice, container_job("contract_dump.py"))["id"]
    job = daemon.wait_state(job_id, timeout=30)
    assert job["state"] == "FAILED", job
    assert job["failure_reason"] == (
        "trainq could not hand the job to Slurm: " + users_container_refusal(alice.name)
    )
    assert "\n" not in job["failure_reason"]
    assert [a["outcome"] for a in job["attempts"]] == ["start_failed"]  # not retried
    # Slurm never saw it: nothing was handed over.
    assert not list(daemon.state_dir.glob(f"jobs/{job_id}/attempts/*.slurm"))
    shown = trainq_as(daemon, alice, "show", str(job_id))
    assert "only root's jobs may name an image" in shown.stdout, shown.stdout
