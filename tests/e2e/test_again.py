"""Running a job again: `trainq requeue JOB` and `trainq submit --like JOB [flags]`, with a
real trainqd, real trainers and the real `trainq`."""

from __future__ import annotations

from pathlib import Path

from tests.support.daemon import Daemon, python_job
from trainq import Client
from trainq.core.errors import ExitCode


def new_id(daemon: Daemon, *args: str) -> int:
    done = daemon.cli(*args)
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


def test_requeue_runs_an_ended_job_again_as_a_new_job(daemon: Daemon, tmp_path: Path) -> None:
    marker = tmp_path / "runs"
    script = f"echo run >> {marker}; echo $TRAINQ_JOB_ID; exit 1"
    spec = {"command": ["sh", "-c", script], "name": "again", "max_retries": 0}
    first = daemon.submit({**spec, "hyperparameters": {"lr": "0.1"}})["id"]
    assert daemon.wait_state(first)["state"] == "FAILED"
    second = new_id(daemon, "requeue", str(first))
    assert second > first
    done = daemon.wait_state(second)
    assert (done["state"], done["name"], done["spec"]) == (
        "FAILED",
        "again",
        daemon.job(first)["spec"],
    )
    assert marker.read_text() == "run\nrun\n"
    # The old job is as it ended: its own record and logs.
    old = daemon.job(first)
    assert (old["state"], len(old["attempts"])) == ("FAILED", 1)
    assert daemon.cli("logs", str(first)).stdout.strip() == str(first)
    assert daemon.cli("logs", str(second)).stdout.strip() == str(second)
    # Through the Python library too.
    third = Client(daemon.socket).requeue(second)
    assert third.spec.model_dump(mode="json") == done["spec"]
    assert daemon.wait_state(third.id)["state"] == "FAILED"


def test_requeue_refuses_a_job_that_has_not_ended(daemon: Daemon) -> None:
    job_id = daemon.submit(python_job("sleeper.py"))["id"]
    daemon.wait_state(job_id, "RUNNING")
    done = daemon.cli("requeue", str(job_id))
    assert (done.returncode, done.stderr) == (
        ExitCode.CONFLICT,
        f"trainq: job {job_id} is RUNNING; only an ended job can be requeued\n",
    )
    done = daemon.cli("requeue", "99999")
    assert (done.returncode, done.stderr) == (ExitCode.NOT_FOUND, "trainq: no job 99999\n")
    daemon.cli("stop", "--grace", "0", str(job_id))


def test_submit_like_takes_an_old_spec_with_the_flags_over_it(
    daemon: Daemon, tmp_path: Path
) -> None:
    old = daemon.submit(
        {
            "command": ["sh", "-c", "echo $SM_HP_LR $SM_HP_EPOCHS $GREETING"],
            "name": "base",
            "hyperparameters": {"lr": "0.1", "epochs": "3"},
            "environment": {"GREETING": "hello"},
            "working_dir": str(tmp_path),
        }
    )["id"]
    assert daemon.wait_state(old)["state"] == "COMPLETED"
    like = new_id(daemon, "submit", "--like", str(old), "--hp", "lr=0.01", "--name", "tuned")
    done = daemon.wait_state(like)
    assert (done["state"], done["name"]) == ("COMPLETED", "tuned")
    assert done["spec"]["hyperparameters"] == {"lr": "0.01", "epochs": "3"}
    assert done["spec"]["working_dir"] == str(tmp_path)
    assert daemon.cli("logs", str(like)).stdout == "0.01 3 hello\n"
    # A new command replaces the old one; -f and --like together are refused in one line.
    other = new_id(daemon, "submit", "--like", str(old), "--", "true")
    assert daemon.wait_state(other)["spec"]["command"] == ["true"]
    done = daemon.cli("submit", "--like", str(old), "-f", "x.toml")
    assert (done.returncode, done.stderr) == (
        ExitCode.USAGE,
        "trainq: give either --like JOB or -f SPEC, not both\n",
    )
    done = daemon.cli("submit", "--like", "99999")
    assert (done.returncode, done.stderr) == (ExitCode.NOT_FOUND, "trainq: no job 99999\n")
    record = Client(daemon.socket).submit_like(old, name="from-python")
    assert record.spec.hyperparameters == {"lr": "0.1", "epochs": "3"}
    assert daemon.wait_state(record.id)["state"] == "COMPLETED"
