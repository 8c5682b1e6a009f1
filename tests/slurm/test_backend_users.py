"""trainqd's Slurm back end for jobs of ordinary users: the Slurm job is the owner's
(sbatch as them), its step runs as them with their groups, `trainq logs` reads its output for
them, and only they (or an admin) stop it."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.accounts import ADMINS, Accounts
from tests.support.daemon import Daemon, trainer
from tests.support.slurm import POLL, Slurm, slurm_job_of, slurm_trainqd
from tests.support.users import trainq_as
from tests.support.waiting import wait_for
from trainq.core.errors import ExitCode
from trainq.core.spec import parse_spec
from trainq.waiting import exit_status_of
from trainqd.attempts import contract

pytestmark = pytest.mark.multiuser


@pytest.fixture
def daemon(slurm: Slurm, accounts: Accounts) -> Iterator[Daemon]:
    with slurm_trainqd(slurm, admin_group=ADMINS) as d:
        yield d


def test_a_users_job_runs_in_slurm_as_that_user(
    daemon: Daemon, slurm: Slurm, accounts: Accounts, shared_dir: Path
) -> None:
    alice = accounts.alice
    done = trainq_as(
        daemon, alice, "submit", "--name", "hers", "--gpus", "1", "--hp", "lr=0.1",
        "--", sys.executable, trainer("contract_dump.py"),
        cwd=shared_dir,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    job_id = int(done.stdout.strip())
    slurm_id = slurm_job_of(daemon, job_id)
    waited = trainq_as(daemon, alice, "wait", str(job_id), timeout=60)
    job = daemon.job(job_id)
    assert waited.returncode == 0, (job, waited.stderr, daemon.log())
    assert job["state"] == "COMPLETED"
    # Slurm's record: the job is hers, not root's, and it ran to its end.
    fields = slurm.job_fields(slurm_id)
    assert fields.get("UserId") == f"{alice.name}({alice.uid})", fields
    assert fields.get("JobState") == "COMPLETED", fields

    ml = Path(job["job_dir"])
    report = json.loads((ml / "output" / "data" / "contract.json").read_text())
    assert (report["uid"], report["gid"]) == (alice.uid, alice.gid)
    assert report["groups"] == sorted(alice.groups)
    env = report["env"]
    assert (env["HOME"], env["USER"], env["LOGNAME"]) == (alice.home, alice.name, alice.name)
    assert report["cwd"] == str(shared_dir)
    spec = parse_spec(
        {"name": "hers", "gpus": 1, "command": ["true"], "hyperparameters": {"lr": "0.1"}}
    )
    files = contract.config_files(spec)
    for name in ("hyperparameters.json", "inputdataconfig.json", "resourceconfig.json"):
        assert report["config"][name] == json.loads(files[f"input/config/{name}"])
    assert {k: v for k, v in env.items() if k.startswith("SM_")} == (
        contract.toolkit_environment(spec, str(ml), 1, "hers")
    )
    assert (env["TRAINQ_JOB_ID"], env["TRAINQ_ATTEMPT"]) == (str(job_id), "1")
    # What the step wrote is hers: the ml root's files and her attempt's records.
    attempt = daemon.state_dir / "jobs" / str(job_id) / "attempts" / "1"
    for path in (ml / "model" / "model.txt", attempt / "stdout", attempt / "exit.json"):
        assert (path.stat().st_uid, path.stat().st_gid) == (alice.uid, alice.gid), path

    logs = trainq_as(daemon, alice, "logs", str(job_id))
    assert logs.returncode == 0, logs.stderr
    assert "contract recorded" in logs.stdout


def test_only_the_owner_stops_a_users_job_in_slurm(
    daemon: Daemon, slurm: Slurm, accounts: Accounts, shared_dir: Path
) -> None:
    alice, bob = accounts.alice, accounts.bob
    script = (
        "trap 'echo got TERM; touch \"$SM_MODEL_DIR/terminated\"; exit 0' TERM; "
        'echo ready; touch "$SM_MODEL_DIR/ready"; while :; do sleep 0.1; done'
    )
    done = trainq_as(daemon, alice, "submit", "--", "/bin/sh", "-c", script, cwd=shared_dir)
    assert done.returncode == 0, done.stderr
    job_id = int(done.stdout.strip())
    slurm_id = slurm_job_of(daemon, job_id)
    model = daemon.state_dir / "jobs" / str(job_id) / "ml" / "model"
    wait_for((model / "ready").exists, timeout=30, interval=0.1, what="the trainer")
    assert daemon.job(job_id)["state"] == "RUNNING"

    refused = trainq_as(daemon, bob, "stop", str(job_id))
    assert refused.returncode == ExitCode.FORBIDDEN, (refused.stdout, refused.stderr)
    assert refused.stderr.count("\n") == 1, refused.stderr
    # Nor can Bob reach her Slurm job around trainqd: Slurm knows it is hers.
    direct = bob.run(["scancel", slurm_id], env=slurm.env)
    assert direct.returncode != 0
    assert "denied" in direct.stderr, direct.stderr
    assert slurm.job_fields(slurm_id)["JobState"] == "RUNNING"
    assert daemon.job(job_id)["state"] == "RUNNING"
    assert not (model / "terminated").exists()

    stopped = trainq_as(daemon, alice, "stop", str(job_id))
    assert stopped.returncode == 0, stopped.stderr
    waited = trainq_as(daemon, alice, "wait", str(job_id), timeout=60)
    assert waited.returncode == exit_status_of("STOPPED"), (waited.stderr, daemon.log())
    job = daemon.job(job_id)
    assert job["state"] == "STOPPED"
    assert job["stop_reason"] == f"stopped by {alice.name}", job["stop_reason"]
    assert (model / "terminated").exists()  # SIGTERM reached her trainer, within the grace
    logs = trainq_as(daemon, alice, "logs", str(job_id))
    assert "got TERM" in logs.stdout, logs.stderr
    # Her step ends with her stopped trainer's status (143), which Slurm calls FAILED.
    wait_for(
        lambda: slurm.job_fields(slurm_id).get("JobState") == "FAILED",
        timeout=10,
        interval=POLL,
        what="her Slurm job to end",
    )
    assert slurm.job_fields(slurm_id)["ExitCode"] == "143:0"


def test_a_step_python_the_owner_cannot_run_is_refused_with_the_reason(
    slurm: Slurm, accounts: Accounts, shared_dir: Path
) -> None:
    private = Path(tempfile.mkdtemp(prefix="tqpy"))  # 0700: root's alone
    python = private / "python"
    python.symlink_to(sys.executable)
    try:
        with slurm_trainqd(slurm, slurm_python=str(python)) as daemon:
            alice = accounts.alice
            done = trainq_as(daemon, alice, "submit", "--", "/bin/true", cwd=shared_dir)
            assert done.returncode == 0, done.stderr
            job = daemon.wait_state(int(done.stdout), timeout=30)
            assert job["state"] == "FAILED", job
            assert job["failure_reason"] == (
                f"trainq could not hand the job to Slurm: {alice.name} cannot run the Slurm"
                f" step's {python} -m trainqd.run (Permission denied); set slurm_python to an"
                " interpreter with trainq installed that every user can run"
            )
            assert not list(daemon.state_dir.glob("jobs/*/attempts/*.slurm"))  # never sbatched
    finally:
        shutil.rmtree(private)
