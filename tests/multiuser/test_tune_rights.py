"""A tune is its owner's: its trials run as the owner, only the owner, root or an admin may
stop it, and other users see it without its trials' hyperparameters or model directories.
Another user's jobs share the GPUs with the tune's trials by fair share."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.accounts import Accounts
from tests.support.daemon import Daemon
from tests.support.factories import TUNE_EXAMPLE, TUNE_OBJECTIVE
from tests.support.users import files_containing, http_as, trainq_as
from tests.support.waiting import wait_for
from trainq.core.errors import ExitCode

pytestmark = pytest.mark.multiuser


def tune_of(daemon: Daemon, accounts: Accounts, shared_dir: Path, **tune: Any) -> dict[str, Any]:
    spec = {
        "command": [sys.executable, str(TUNE_EXAMPLE / "train.py")],
        "working_dir": str(shared_dir),
        "gpus": 1,
        "metric_definitions": [TUNE_OBJECTIVE],
        "hyperparameters": {"epochs": 400, "epoch_seconds": 0.5},
    }
    settings = {"objective": "val_loss", "search": "random", "max_trials": 8, **tune}
    settings.setdefault("space", {"lr": {"loguniform": [1e-3, 1e-1]}})
    status, record = http_as(
        daemon, accounts.alice, "POST", "/v1/tunes", {"spec": spec, "tune": settings}
    )
    assert status == 201, record
    result: dict[str, Any] = record
    return result


def running_trials(daemon: Daemon, tune_id: int, count: int) -> list[dict[str, Any]]:
    def enough() -> list[dict[str, Any]] | None:
        trials = daemon.get(f"/v1/tunes/{tune_id}").json()["trials"]
        running = [t for t in trials if t["job_state"] == "RUNNING"]
        return running if len(running) >= count else None

    return wait_for(enough, timeout=30, what=f"{count} trials to run")


def test_a_tune_is_its_owners(workstation: Daemon, accounts: Accounts, shared_dir: Path) -> None:
    tune = tune_of(workstation, accounts, shared_dir, max_parallel=2)
    trials = running_trials(workstation, tune["id"], 2)
    for trial in trials:
        assert workstation.job(trial["job_id"])["owner"]["user"] == "tq-alice"

    refused = trainq_as(workstation, accounts.bob, "tune", "stop", str(tune["id"]))
    assert refused.returncode == ExitCode.FORBIDDEN
    assert refused.stderr == (
        f"trainq: only root or members of tq-admins may stop tune {tune['id']} of tq-alice\n"
    )
    status, seen = http_as(workstation, accounts.bob, "GET", f"/v1/tunes/{tune['id']}")
    assert status == 200
    assert seen["state"] == "RUNNING"
    assert all(t["params"] is None and t["model_dir"] is None for t in seen["trials"])
    shown = trainq_as(workstation, accounts.bob, "tune", "show", str(tune["id"]))
    assert shown.returncode == 0, shown.stderr
    assert "(hidden)" in shown.stdout
    assert "lr=" not in shown.stdout
    status, own = http_as(workstation, accounts.alice, "GET", f"/v1/tunes/{tune['id']}")
    assert all("lr" in t["params"] for t in own["trials"])

    stopped = trainq_as(workstation, accounts.carol, "tune", "stop", str(tune["id"]))
    assert (stopped.returncode, stopped.stdout) == (0, "STOPPED\n"), stopped.stderr
    for trial in trials:
        assert workstation.wait_state(trial["job_id"])["state"] == "STOPPED"


def test_another_users_jobs_go_before_the_tunes_queued_trials(
    workstation: Daemon, accounts: Accounts, shared_dir: Path
) -> None:
    """Alice's tune runs four trials on the four GPUs and has two more queued; bob's two
    jobs, queued after them, go first by fair share as trials end, and the tune goes on."""
    tune = tune_of(workstation, accounts, shared_dir, max_parallel=6, max_trials=12)
    first = running_trials(workstation, tune["id"], 4)

    def six_asked() -> bool:
        return len(workstation.get(f"/v1/tunes/{tune['id']}").json()["trials"]) == 6

    wait_for(six_asked, timeout=30, what="two trials to be queued")
    bobs = []
    for _ in range(2):
        done = trainq_as(
            workstation, accounts.bob, "submit", "--gpus", "1", "--", "sleep", "600",
            cwd=shared_dir,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        bobs.append(int(done.stdout))
    # Two trials end (as early stopping would end them): bob's jobs take their GPUs.
    for trial in first[:2]:
        assert trainq_as(workstation, accounts.alice, "stop", str(trial["job_id"])).returncode == 0
    for job_id in bobs:
        assert workstation.wait_state(job_id, "RUNNING")["state"] == "RUNNING"
    later = workstation.get(f"/v1/tunes/{tune['id']}").json()
    assert later["state"] == "RUNNING"
    assert [t["job_state"] for t in later["trials"][4:6]] == ["PENDING", "PENDING"]
    assert trainq_as(workstation, accounts.alice, "tune", "stop", str(tune["id"])).returncode == 0
    for job_id in bobs:
        assert (
            trainq_as(workstation, accounts.bob, "stop", "--grace", "0", str(job_id)).returncode
            == 0
        )


def test_pbt_copies_checkpoints_as_the_owner_and_links_stay_links(
    workstation: Daemon, accounts: Accounts, shared_dir: Path, tmp_path: Path
) -> None:
    """Each trial plants a link to root's secret among its checkpoints: the copy, made with
    alice's rights alone, carries the link, never what it points to."""
    secret = tmp_path / "secret"
    secret.write_text("root's secret\n")
    secret.chmod(0o600)
    plant = (  # on the first attempt only: what a resumed one has is the copy's
        f'[ "$TRAINQ_ATTEMPT" = 1 ] && ln -s {secret} "$SAGEMAKER_BASE_DIR/checkpoints/secret"; '
        f"exec {sys.executable} {TUNE_EXAMPLE / 'train.py'}"
    )
    spec = {
        "command": ["/bin/sh", "-c", plant],
        "working_dir": str(shared_dir),
        "metric_definitions": [TUNE_OBJECTIVE],
        "hyperparameters": {"epochs": 10, "epoch_seconds": 0.5},
    }
    settings = {
        "objective": "val_loss",
        "search": "random",
        "early_stopping": "pbt",
        "perturbation_interval": 3,
        "max_trials": 4,
        "max_parallel": 4,
        "seed": 5,
        "space": {"lr": {"loguniform": [1e-4, 1e-1]}},
    }
    status, tune = http_as(
        workstation, accounts.alice, "POST", "/v1/tunes", {"spec": spec, "tune": settings}
    )
    assert status == 201, tune

    def done() -> dict[str, Any] | None:
        record: dict[str, Any] = workstation.get(f"/v1/tunes/{tune['id']}").json()
        return record if record["state"] != "RUNNING" else None

    ended = wait_for(done, timeout=180, what="the tune to end")
    assert ended["state"] == "COMPLETED", ended
    moved = [t for t in ended["trials"] if t["history"]]
    assert moved, ended["trials"]
    for trial in moved:
        checkpoints = Path(workstation.job(trial["job_id"])["job_dir"]) / "checkpoints"
        assert (checkpoints / "secret").is_symlink()
        assert (checkpoints / "secret").lstat().st_uid == accounts.alice.uid
        assert files_containing(checkpoints.parent, b"root's secret") == []


def test_a_failed_trials_reason_is_its_owners(
    workstation: Daemon, accounts: Accounts, shared_dir: Path
) -> None:
    """A trial that fails ends with its job's failure reason, the tail of what it wrote on
    stderr: shown whole to the owner, to other users as any job's reason is."""
    token = "TOKEN=s3cr3t-" + shared_dir.name
    spec = {
        "command": ["/bin/sh", "-c", f"echo {token} >&2; exit 3"],
        "working_dir": str(shared_dir),
        "max_retries": 0,
    }
    settings = {
        "objective": "loss",
        "search": "random",
        "max_trials": 1,
        "max_failures": 0,
        "space": {"lr": {"uniform": [0.1, 0.2]}},
    }
    status, tune = http_as(
        workstation, accounts.alice, "POST", "/v1/tunes", {"spec": spec, "tune": settings}
    )
    assert status == 201, tune

    def failed() -> Any:
        record = workstation.get(f"/v1/tunes/{tune['id']}").json()
        trials = record["trials"]
        return record if trials and trials[0]["state"] == "failed" else None

    wait_for(failed, timeout=60, what="the trial to fail")
    status, own = http_as(workstation, accounts.alice, "GET", f"/v1/tunes/{tune['id']}")
    assert status == 200, own
    assert token in own["trials"][0]["reason"]  # the owner reads it whole
    for path in (f"/v1/tunes/{tune['id']}", "/v1/tunes"):
        status, seen = http_as(workstation, accounts.bob, "GET", path)
        assert status == 200, seen
        assert token not in str(seen), path
    shown = trainq_as(workstation, accounts.bob, "tune", "show", str(tune["id"]))
    assert shown.returncode == 0, shown.stderr
    assert token not in shown.stdout
    assert trainq_as(workstation, accounts.bob, "ls").returncode == 0  # trainqd serves bob
