"""The real SageMaker training toolkit's `train` entry point runs a job as it runs one on
SageMaker: `sagemaker_program` names the user script, the toolkit waits for `algo-1` to
resolve, runs the script with the hyperparameters as arguments, and reports a crash in the
failure file as `ExitCode -N`, which trainq retries as a death by signal N."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import TRAINERS, Daemon

TOOLKIT_TRAIN = str(Path(sys.executable).parent / "train")
CODE = TRAINERS / "toolkit_code"


def toolkit_job(tmp_path: Path, **hyperparameters: str) -> dict[str, Any]:
    data = tmp_path / "train"
    data.mkdir()
    (data / "a.csv").write_text("1,2\n")
    return {
        "name": "toolkit",
        "command": [TOOLKIT_TRAIN],
        "hyperparameters": {
            "sagemaker_program": '"user_script.py"',
            "sagemaker_submit_directory": json.dumps(str(CODE)),
            **hyperparameters,
        },
        "channels": {"train": {"source": str(data)}},
        "retry_backoff_seconds": 0.0,
        "working_dir": str(tmp_path),
    }


def test_toolkit_train_runs_a_user_script(daemon: Daemon, tmp_path: Path) -> None:
    job_id = daemon.submit(toolkit_job(tmp_path, epochs="2"))["id"]
    done = daemon.wait_state(job_id, timeout=60)
    logs = daemon.cli("logs", str(job_id)).stdout
    assert done["state"] == "COMPLETED", logs
    assert len(done["attempts"]) == 1
    ml_root = Path(done["job_dir"])
    model = json.loads((ml_root / "model" / "model.json").read_text())
    assert model == {
        "epochs": 2,
        "resumed_from": 0,
        "attempt": 1,
        "channels": ["train"],
        "hps": {"epochs": 2},
    }
    assert (ml_root / "output" / "success").exists()
    assert (ml_root / "code" / "user_script.py").exists()  # where the toolkit put it
    assert "training done" in logs


@pytest.mark.parametrize("crash", ["SEGV", "ABRT"])
def test_a_signal_death_under_the_toolkit_is_retried_and_resumes(
    daemon: Daemon, tmp_path: Path, crash: str
) -> None:
    job_id = daemon.submit(toolkit_job(tmp_path, epochs="3", crash=json.dumps(crash)))["id"]
    done = daemon.wait_state(job_id, timeout=90)
    assert done["state"] == "COMPLETED", daemon.cli("logs", str(job_id), "--attempt", "1").stdout
    first, second = done["attempts"]
    # The toolkit itself exits 1; its failure file says how the script died.
    assert (first["outcome"], first["exit_code"]) == ("exited", 1)
    signum = getattr(signal, f"SIG{crash}")
    assert f"ExitCode -{signum}" in first["reason"]
    assert first["retried"]
    assert second["exit_code"] == 0
    model = json.loads((Path(done["job_dir"]) / "model" / "model.json").read_text())
    assert (model["resumed_from"], model["attempt"]) == (1, 2)
    assert model["hps"] == {"epochs": 3, "crash": crash}
