"""Who a job is: the user whose connection submitted it, as the kernel says (SO_PEERCRED).
Its processes run with that user's uid, primary gid, supplementary groups, HOME, USER and
LOGNAME, its files are theirs, and it runs as root only when root submitted it."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.accounts import Accounts, User
from tests.support.daemon import Daemon, python_job, trainer
from tests.support.users import http_as, process_ids, submit_as, trainq_as
from tests.support.waiting import wait_for
from trainq.core.errors import ExitCode

pytestmark = pytest.mark.multiuser


def contract_of(job: dict[str, Any]) -> dict[str, Any]:
    report: dict[str, Any] = json.loads(
        (Path(job["job_dir"]) / "output" / "data" / "contract.json").read_text()
    )
    return report


def owner_of(path: Path) -> tuple[int, int]:
    info = path.stat()
    return info.st_uid, info.st_gid


def submit_with_cli(daemon: Daemon, user: User, cwd: Path, *args: str) -> dict[str, Any]:
    done = trainq_as(daemon, user, "submit", "--json", *args, cwd=cwd)
    assert done.returncode == 0, done.stderr
    record: dict[str, Any] = json.loads(done.stdout)
    return record


def test_a_job_runs_as_its_submitter_with_their_login_basics(
    workstation: Daemon, accounts: Accounts, shared_dir: Path
) -> None:
    alice = accounts.alice
    job = submit_with_cli(
        workstation, alice, shared_dir, "--", sys.executable, trainer("contract_dump.py")
    )
    assert job["owner"] == {"uid": alice.uid, "user": alice.name}
    done = workstation.wait_state(job["id"])
    assert done["state"] == "COMPLETED", done
    report = contract_of(done)
    assert (report["uid"], report["gid"]) == (alice.uid, alice.gid)
    assert report["groups"] == sorted(alice.groups)
    assert alice.groups == (alice.gid,)  # nothing more than her own group
    env = report["env"]
    assert (env["HOME"], env["USER"], env["LOGNAME"]) == (alice.home, alice.name, alice.name)
    assert report["cwd"] == str(shared_dir)  # where she ran `trainq submit`


def test_the_job_dir_and_everything_in_it_belong_to_the_submitter(
    workstation: Daemon, accounts: Accounts, shared_dir: Path
) -> None:
    alice = accounts.alice
    job = submit_with_cli(
        workstation, alice, shared_dir, "--", sys.executable, trainer("contract_dump.py")
    )
    done = workstation.wait_state(job["id"])
    assert done["state"] == "COMPLETED", done
    ml_root = Path(done["job_dir"])
    attempt = ml_root.parent / "attempts" / "1"
    assert owner_of(ml_root) == (alice.uid, alice.gid)
    assert stat.S_IMODE(ml_root.stat().st_mode) == 0o700  # not even her group's
    for path in (
        ml_root / "input" / "config" / "hyperparameters.json",
        ml_root / "model" / "model.txt",
        ml_root / "output" / "data" / "contract.json",
        ml_root / "checkpoints",
        attempt,
        attempt / "stdout",
        attempt / "stderr",
    ):
        assert owner_of(path) == (alice.uid, alice.gid), path
    # Bob can see that the job exists, not what it made or printed.
    for path in (ml_root, attempt / "stdout"):
        peek = accounts.bob.run(["cat", str(path)] if path.is_file() else ["ls", str(path)])
        assert peek.returncode != 0
        assert "Permission denied" in peek.stderr, peek.stderr


def test_every_process_of_a_job_runs_with_the_submitters_credentials(
    workstation: Daemon, accounts: Accounts, shared_dir: Path
) -> None:
    """The monitor too: it drops to the owner before the trainer starts, for good."""
    carol = accounts.carol
    job = submit_with_cli(
        workstation, carol, shared_dir, "--", sys.executable, trainer("sleeper.py")
    )
    pid_file = Path(job["job_dir"]) / "output" / "data" / "pid"
    trainer_pid = int(wait_for(lambda: pid_file.exists() and pid_file.read_text(), timeout=20))
    monitor_pid = int(Path(f"/proc/{trainer_pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    assert accounts.admins_gid in carol.groups
    for pid in (trainer_pid, monitor_pid):
        ids = process_ids(pid)
        assert ids["Uid"] == [carol.uid] * 4, pid
        assert ids["Gid"] == [carol.gid] * 4, pid
        assert sorted(ids["Groups"]) == sorted(carol.groups), pid
    assert trainq_as(workstation, carol, "stop", str(job["id"])).returncode == 0
    assert workstation.wait_state(job["id"])["state"] == "STOPPED"


def test_a_job_runs_as_root_only_when_root_submitted_it(
    workstation: Daemon, accounts: Accounts
) -> None:
    spec = python_job("contract_dump.py")
    by_root = workstation.submit(spec)
    by_carol = submit_as(workstation, accounts.carol, spec)  # an admin is not root
    assert by_root["owner"] == {"uid": 0, "user": "root"}
    for job, uid in ((by_root, 0), (by_carol, accounts.carol.uid)):
        done = workstation.wait_state(job["id"])
        assert done["state"] == "COMPLETED", done
        assert contract_of(done)["uid"] == uid


def test_a_request_cannot_name_its_own_owner(workstation: Daemon, accounts: Accounts) -> None:
    spec = {**python_job("contract_dump.py"), "owner": {"uid": 0, "user": "root"}}
    status, body = http_as(workstation, accounts.alice, "POST", "/v1/jobs", spec)
    assert status == 400, body
    assert "owner" in body["error"]["message"]
    status, listing = http_as(workstation, accounts.alice, "GET", "/v1/jobs?all=true")
    assert (status, listing["jobs"]) == (200, [])


def test_an_ordinary_user_may_not_run_an_image_as_root(
    workstation: Daemon, accounts: Accounts, shared_dir: Path
) -> None:
    spec_file = shared_dir / "as-root.toml"
    spec_file.write_text(
        'image = "localhost/trainq-test:latest"\nengine = "podman"\nrun_as_root = true\n'
    )
    done = trainq_as(workstation, accounts.alice, "submit", "-f", str(spec_file), cwd=shared_dir)
    assert done.returncode == ExitCode.FORBIDDEN, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("trainq: run_as_root"), done.stderr
    assert workstation.get("/v1/jobs", params={"all": "true"}).json()["jobs"] == []


def test_a_uid_without_an_account_cannot_submit(workstation: Daemon, shared_dir: Path) -> None:
    """A job must run as someone the password database knows (for its groups and HOME);
    a uid with no entry may look, but not submit."""
    uid = 3_900_000 + os.getpid() % 100_000
    stranger = User(name="stranger", uid=uid, gid=uid, groups=(uid,), home="/")
    assert trainq_as(workstation, stranger, "ls").returncode == 0
    done = trainq_as(workstation, stranger, "submit", "--", "true", cwd=shared_dir)
    assert done.returncode == ExitCode.FORBIDDEN, done.stderr
    assert done.stderr == (
        f"trainq: uid {uid} has no account on this host; trainq runs jobs as their submitter\n"
    )
