"""The environment trainq gives a job is the one the real sagemaker-training toolkit computes
for it: a trainer runs the toolkit's own `Environment().to_env_vars()` inside a real job and
the two are compared variable by variable, and SM_TRAINING_ENV property by property."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from tests.support.daemon import Daemon, trainer
from tests.support.toolkit import EXCUSED

HYPERPARAMETERS = {
    "lr": "0.1",
    "epochs": "3",
    "amp": "true",  # a JSON boolean: decoded, exported as `true`, passed as `True`
    "verbose": "False",  # not JSON: stays the string it is
    "arch": "resnet50",
    "e": "1e3",  # one-letter names become `-e`; the value is decoded to 1000.0
    "nothing": "null",
    "layers": '{"sizes": [64, 128], "dropout": {"p": 0.5, "on": true}}',
    "tags": '["a", "b"]',
    # The toolkit's own: none reaches SM_HPS or SM_USER_ARGS.
    "sagemaker_program": '"train.py"',
    "sagemaker_submit_directory": '"/opt/ml/code"',
    "sagemaker_container_log_level": "10",
    "sagemaker_region": '"eu-west-1"',
    "sagemaker_job_name": '"nightly"',
    # Framework parameters: SM_FRAMEWORK_PARAMS, and the distribution instance group.
    "sagemaker_mpi_enabled": "true",
    "sagemaker_mpi_num_of_processes_per_host": "1",
}


def run_toolkit_job(daemon: Daemon, tmp_path: Path) -> dict[str, Any]:
    files = tmp_path / "files"
    files.mkdir()
    (files / "a.csv").write_text("1,2\n")
    stream = tmp_path / "stream"
    stream.mkdir()
    (stream / "part-0").write_bytes(b"records")
    spec = {
        "name": "toolkit-env",
        "command": [sys.executable, trainer("toolkit_env.py")],
        "gpus": 0,
        "hyperparameters": HYPERPARAMETERS,
        "channels": {
            "train": {"source": str(files), "content_type": "text/csv"},
            "stream": {"source": str(stream), "mode": "Pipe", "record_wrapper": "RecordIO"},
        },
        "working_dir": str(tmp_path),
    }
    job_id = daemon.submit(spec)["id"]
    job = daemon.wait_state(job_id, timeout=60)
    assert job["state"] == "COMPLETED", daemon.cli("logs", str(job_id)).stdout
    report = json.loads((Path(job["job_dir"]) / "output" / "data" / "toolkit_env.json").read_text())
    assert isinstance(report, dict)
    return report


def test_sm_variables_match_the_toolkit(daemon: Daemon, tmp_path: Path) -> None:
    report = run_toolkit_job(daemon, tmp_path)
    toolkit: dict[str, str] = report["toolkit"]
    environ: dict[str, str] = report["environ"]
    given = {k: v for k, v in environ.items() if k.startswith("SM_")}

    # The same set of names: none missing, none of trainq's own invented under SM_.
    assert sorted(set(toolkit) - set(given)) == []
    assert sorted(set(given) - set(toolkit)) == []
    for name, value in toolkit.items():
        if name in EXCUSED or name == "SM_TRAINING_ENV":
            continue
        assert given[name] == value, name

    # SM_TRAINING_ENV, property by property (its text too, where nothing is excused).
    ours = json.loads(given["SM_TRAINING_ENV"])
    theirs = json.loads(toolkit["SM_TRAINING_ENV"])
    assert sorted(ours) == sorted(theirs)
    for key, value in theirs.items():
        assert ours[key] == value, key
    assert given["SM_TRAINING_ENV"] == toolkit["SM_TRAINING_ENV"]


def test_toolkit_formats_of_hyperparameters(daemon: Daemon, tmp_path: Path) -> None:
    # What script-mode code reads, spelled out, so a change on either side shows here too.
    environ = run_toolkit_job(daemon, tmp_path)["environ"]
    hps = json.loads(environ["SM_HPS"])
    assert not [k for k in hps if k.startswith("sagemaker_")]
    assert hps["amp"] is True
    assert hps["verbose"] == "False"
    assert hps["layers"] == {"sizes": [64, 128], "dropout": {"p": 0.5, "on": True}}
    assert environ["SM_HP_AMP"] == "true"
    assert environ["SM_HP_LAYERS"] == '{"dropout":{"on":true,"p":0.5},"sizes":[64,128]}'
    assert environ["SM_HP_NOTHING"] == ""
    args = json.loads(environ["SM_USER_ARGS"])
    assert args[args.index("--amp") + 1] == "True"
    assert args[args.index("-e") + 1] == "1000.0"
    assert args[args.index("--layers") + 1] == "dropout={'p': 0.5, 'on': True},sizes=[64, 128]"
    assert not [a for a in args if "sagemaker" in a]
    assert json.loads(environ["SM_FRAMEWORK_PARAMS"]) == {
        "sagemaker_mpi_enabled": True,
        "sagemaker_mpi_num_of_processes_per_host": 1,
    }
    assert environ["SM_MODULE_NAME"] == "train"
    assert environ["SM_USER_ENTRY_POINT"] == "train.py"
    assert environ["SM_LOG_LEVEL"] == "10"
    assert environ["SM_NUM_NEURONS"] == "0"
    assert environ["SM_DISTRIBUTION_INSTANCE_GROUPS"] == '["homogeneousCluster"]'
    training_env = json.loads(environ["SM_TRAINING_ENV"])
    assert training_env["job_name"] == "toolkit-env"
    assert training_env["is_master"] is True
    assert training_env["channel_input_dirs"]["stream"] == environ["SM_CHANNEL_STREAM"]
