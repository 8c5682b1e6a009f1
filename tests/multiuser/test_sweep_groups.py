"""A sweep's group and who may act on it, with real users: a group's jobs are its
submitter's (the list is admitted as that user, paths checked with that user's rights);
another user's `trainq stop --group` is refused with one line and stops nothing; an admin's
stops them all."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.support.accounts import Accounts
from tests.support.daemon import Daemon, trainer
from tests.support.users import http_as, trainq_as
from trainq.core.errors import ExitCode

pytestmark = pytest.mark.multiuser


def test_only_the_owner_or_an_admin_stops_a_group(
    workstation: Daemon, accounts: Accounts, shared_dir: Path
) -> None:
    alice, bob, carol = accounts.alice, accounts.bob, accounts.carol
    done = trainq_as(
        workstation, alice, "submit", "--gpus", "4", "--sweep", "lr=1,2,3", "--json",
        "--", sys.executable, trainer("sleeper.py"), "60", cwd=shared_dir,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    group = answer["group_id"]
    assert {job["owner"]["user"] for job in answer["jobs"]} == {alice.name}

    refused = trainq_as(workstation, bob, "stop", "--group", str(group))
    assert refused.returncode == ExitCode.FORBIDDEN, refused
    assert refused.stderr == f"trainq: you may not stop the jobs of group {group}\n"
    states = {job["id"]: job["state"] for job in answer["jobs"]}
    for job_id in states:
        assert workstation.job(job_id)["state"] != "STOPPED"

    stopped = trainq_as(workstation, carol, "stop", "--group", str(group), "--grace", "0")
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stdout == f"stopped 3 jobs of group {group}\n"
    for job_id in states:
        workstation.wait_state(job_id, "STOPPED")


def test_a_list_is_checked_with_its_submitter_s_rights(
    workstation: Daemon, accounts: Accounts, shared_dir: Path
) -> None:
    private = shared_dir / "bobs"
    private.mkdir(mode=0o700)
    status, body = http_as(
        workstation,
        accounts.alice,
        "POST",
        "/v1/jobs",
        [
            {"command": ["true"], "working_dir": str(shared_dir)},
            {"command": ["true"], "working_dir": str(private)},
        ],
    )
    assert status == 400, body
    assert body["error"]["message"].startswith(f"jobs[1]: working directory {private} ")
    listed = workstation.get("/v1/jobs?all=true").json()
    assert listed["total"] == 0  # nothing of the list was queued
