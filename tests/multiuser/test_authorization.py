"""Who may do what to a job: anyone may list and show jobs; only the owner, root, or a member
of the configured admin group may stop one or read its logs. Anyone else gets HTTP 403 from
the API and a one-line error with exit status 5 from `trainq`, and the job is untouched."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.accounts import Accounts, User
from tests.support.daemon import Daemon, pids_alive, running_daemon
from tests.support.users import http_as, one_line, start_sleeper, trainq_as
from trainq.core.errors import ExitCode

pytestmark = pytest.mark.multiuser


@pytest.fixture
def alices_job(
    workstation: Daemon, accounts: Accounts, shared_dir: Path
) -> Iterator[dict[str, Any]]:
    """A running job of tq-alice."""
    job = start_sleeper(workstation, accounts.alice, shared_dir)
    yield job
    trainq_as(workstation, accounts.alice, "stop", "--grace", "0", str(job["id"]))


def test_anyone_may_list_and_show_any_job(
    workstation: Daemon, accounts: Accounts, alices_job: dict[str, Any]
) -> None:
    bob = accounts.bob
    listed = trainq_as(workstation, bob, "ls", "--json")
    assert listed.returncode == 0, listed.stderr
    jobs = json.loads(listed.stdout)["jobs"]
    assert [(j["id"], j["owner"]["user"]) for j in jobs] == [(alices_job["id"], "tq-alice")]
    shown = trainq_as(workstation, bob, "show", "--json", str(alices_job["id"]))
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["state"] == "RUNNING"
    status, record = http_as(workstation, bob, "GET", f"/v1/jobs/{alices_job['id']}")
    assert (status, record["owner"]["user"]) == (200, "tq-alice")


def test_another_user_cannot_stop_a_job(
    workstation: Daemon, accounts: Accounts, alices_job: dict[str, Any]
) -> None:
    job_id = alices_job["id"]
    refused = trainq_as(workstation, accounts.bob, "stop", str(job_id))
    assert refused.returncode == ExitCode.FORBIDDEN
    assert one_line(refused.stderr) == (
        f"trainq: job {job_id} belongs to tq-alice; only its owner or root or members of "
        "tq-admins may stop it\n"
    )
    status, body = http_as(
        workstation, accounts.bob, "POST", f"/v1/jobs/{job_id}/stop", {"grace_seconds": 0}
    )
    assert status == 403, body
    assert body["error"]["code"] == "forbidden"
    # Untouched: still running, the trainer alive, no stop was relayed to it.
    assert workstation.job(job_id)["state"] == "RUNNING"
    assert pids_alive([alices_job["trainer_pid"]]) == [alices_job["trainer_pid"]]
    assert not (Path(alices_job["job_dir"]) / "checkpoints" / "on-sigterm").exists()


@pytest.mark.parametrize("who", ["owner", "root", "admin"])
def test_the_owner_root_and_an_admin_may_stop_a_job(
    workstation: Daemon, accounts: Accounts, alices_job: dict[str, Any], who: str
) -> None:
    job_id = str(alices_job["id"])
    if who == "root":
        done, name = workstation.cli("stop", job_id), "root"
    else:
        user = accounts.alice if who == "owner" else accounts.carol
        done, name = trainq_as(workstation, user, "stop", job_id), user.name
    assert (done.returncode, done.stderr) == (0, "")
    ended = workstation.wait_state(alices_job["id"])
    assert ended["state"] == "STOPPED"
    assert ended["stop_reason"] == f"stopped by {name}"
    # The trainer got the graceful stop (it notes SIGTERM), as the owner's own stop would.
    assert (Path(ended["job_dir"]) / "checkpoints" / "on-sigterm").read_text() == "1"


def test_a_queued_job_is_protected_as_well(
    workstation: Daemon, accounts: Accounts, shared_dir: Path
) -> None:
    blocker = start_sleeper(workstation, accounts.bob, shared_dir, "--gpus", "4")
    queued = trainq_as(
        workstation, accounts.alice, "submit", "--gpus", "1", "--", "true", cwd=shared_dir
    )
    assert queued.returncode == 0, queued.stderr
    job_id = queued.stdout.strip()
    refused = trainq_as(workstation, accounts.bob, "stop", job_id)
    assert refused.returncode == ExitCode.FORBIDDEN
    assert "belongs to tq-alice" in one_line(refused.stderr)
    assert workstation.job(int(job_id))["state"] == "PENDING"
    assert trainq_as(workstation, accounts.carol, "stop", job_id).returncode == 0
    stopped = workstation.job(int(job_id))
    assert (stopped["state"], stopped["stop_reason"]) == (
        "STOPPED",
        "stopped by tq-carol before it started",
    )
    assert trainq_as(workstation, accounts.bob, "stop", str(blocker["id"])).returncode == 0
    workstation.wait_state(blocker["id"])


def test_logs_are_for_the_owner_root_and_admins(
    workstation: Daemon, accounts: Accounts, alices_job: dict[str, Any]
) -> None:
    job_id = str(alices_job["id"])
    refused = trainq_as(workstation, accounts.bob, "logs", job_id)
    assert refused.returncode == ExitCode.FORBIDDEN
    assert one_line(refused.stderr) == (
        f"trainq: job {job_id} belongs to tq-alice; only its owner or root or members of "
        "tq-admins may read the logs of it\n"
    )
    assert refused.stdout == ""
    for user in (accounts.alice, accounts.carol):
        shown = trainq_as(workstation, user, "logs", job_id)
        assert (shown.returncode, shown.stdout) == (0, "sleeping\n"), shown.stderr
    assert workstation.cli("logs", job_id).stdout == "sleeping\n"


def test_admin_rights_come_only_from_the_configured_group(
    accounts: Accounts, shared_dir: Path
) -> None:
    """Without admin_group in the configuration, tq-admins is just a group."""
    with running_daemon(gpus="fake:1") as daemon:
        job = start_sleeper(daemon, accounts.alice, shared_dir)
        refused = trainq_as(daemon, accounts.carol, "stop", str(job["id"]))
        assert refused.returncode == ExitCode.FORBIDDEN
        assert one_line(refused.stderr) == (
            f"trainq: job {job['id']} belongs to tq-alice; only its owner or root may stop it\n"
        )
        assert daemon.job(job["id"])["state"] == "RUNNING"
        assert trainq_as(daemon, accounts.alice, "stop", str(job["id"])).returncode == 0
        assert daemon.wait_state(job["id"])["state"] == "STOPPED"


def test_admin_rights_follow_the_group_database_not_the_callers_process(
    workstation: Daemon, accounts: Accounts, alices_job: dict[str, Any]
) -> None:
    """A process of bob's that still carries tq-admins among its groups (a login session
    from before he left the group) makes him no admin: taking someone out of admin_group
    takes effect at once."""
    bob = accounts.bob
    stale = User(bob.name, bob.uid, bob.gid, (*bob.groups, accounts.admins_gid), bob.home)
    refused = trainq_as(workstation, stale, "stop", str(alices_job["id"]))
    assert refused.returncode == ExitCode.FORBIDDEN, refused.stderr
    assert workstation.job(alices_job["id"])["state"] == "RUNNING"
