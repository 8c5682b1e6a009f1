"""Each node of a job of several nodes gets the environment the real sagemaker-training
toolkit computes from that node's own multi-host resourceconfig.json: the toolkit's
`Environment().to_env_vars()` runs inside each node and the two are compared variable by
variable (hosts, current host, instance groups, master, distribution hosts ...)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.support.daemon import Daemon, trainer
from tests.support.toolkit import EXCUSED

HYPERPARAMETERS = {
    "lr": "0.1",
    "sagemaker_program": '"train.py"',
    # Distribution on the trainers' group only: its first host is the master.
    "sagemaker_distribution_instance_groups": '["workers"]',
    "sagemaker_mpi_enabled": "true",
}


def test_each_nodes_sm_variables_match_the_toolkit(daemon: Daemon, tmp_path: Path) -> None:
    spec = {
        "name": "toolkit-nodes",
        "command": [sys.executable, trainer("toolkit_env.py")],
        "hyperparameters": HYPERPARAMETERS,
        "instance_groups": [
            {"name": "servers", "instance_count": 1},
            {"name": "workers", "instance_count": 2},
        ],
        "working_dir": str(tmp_path),
        "max_retries": 0,
    }
    job_id = daemon.submit(spec)["id"]
    job = daemon.wait_state(job_id, timeout=90)
    assert job["state"] == "COMPLETED", daemon.cli("logs", str(job_id)).stdout
    for rank, node in enumerate(job["nodes"]):
        path = Path(node["job_dir"]) / "output" / "data" / "toolkit_env.json"
        report = json.loads(path.read_text())
        toolkit, environ = report["toolkit"], report["environ"]
        given = {k: v for k, v in environ.items() if k.startswith("SM_")}
        assert sorted(set(toolkit) ^ set(given)) == []
        for name, value in toolkit.items():
            if name not in EXCUSED:
                assert given[name] == value, (node["name"], name)
        assert environ["SM_CURRENT_HOST"] == f"algo-{rank + 1}"
        assert json.loads(environ["SM_HOSTS"]) == ["algo-1", "algo-2", "algo-3"]
        assert environ["SM_CURRENT_INSTANCE_GROUP"] == ("servers" if rank == 0 else "workers")
        training_env = json.loads(environ["SM_TRAINING_ENV"])
        assert training_env["master_hostname"] == "algo-2"
        assert training_env["is_master"] is (rank == 1)
        assert training_env["is_hetero"] is True
        assert training_env["distribution_hosts"] == ["algo-2", "algo-3"]
