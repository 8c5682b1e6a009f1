"""Dependencies between users' jobs, with real users. Every user sees that a job exists and
its state (docs/security.md), so a dependency on another user's job is allowed and tells no
more than `trainq ls`: never its failure's details. A job that does not exist is refused in
one line, and nobody can add a dependency to a job afterwards (to theirs or another's)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.accounts import Accounts
from tests.support.daemon import Daemon
from tests.support.users import http_as, one_line, trainq_as
from trainq.core.errors import ExitCode

pytestmark = pytest.mark.multiuser

SECRET = "TOKEN=dep-s3cr3t"


def test_a_dependency_on_another_users_job_learns_its_state_and_nothing_more(
    workstation: Daemon, accounts: Accounts, shared_dir: Path
) -> None:
    alice, bob = accounts.alice, accounts.bob
    # The secret is made at run time: the command, which everyone sees, does not hold it.
    script = (
        f"while [ ! -e {shared_dir}/go ]; do sleep 0.05; done; "
        "echo TOKEN=dep-$(echo s3 cr3t | tr -d ' ') >&2; exit 1"
    )
    failing = trainq_as(
        workstation, alice, "submit", "--max-retries", "0", "--", "sh", "-c", script,
        cwd=shared_dir,
    )  # fmt: skip
    assert failing.returncode == 0, failing.stderr
    alices = int(failing.stdout)
    done = trainq_as(
        workstation, bob, "submit", "--after", str(alices), "--", "true", cwd=shared_dir
    )
    assert done.returncode == 0, done.stderr
    bobs = int(done.stdout)
    (shared_dir / "go").touch()
    ended = workstation.wait_state(bobs)
    assert ended["stop_reason"] == f"dependency can no longer be met: job {alices} ended FAILED"
    assert SECRET in (workstation.job(alices)["failure_reason"] or "")  # root sees it
    shown = trainq_as(workstation, bob, "show", "--json", str(bobs))
    assert shown.returncode == 0
    assert SECRET not in shown.stdout
    assert json.loads(shown.stdout)["state"] == "STOPPED"
    events = trainq_as(workstation, bob, "ls", "--all", "--json")
    assert SECRET not in events.stdout


def test_a_dependency_on_no_job_is_refused_and_none_can_be_added_later(
    workstation: Daemon, accounts: Accounts, shared_dir: Path
) -> None:
    alice, bob = accounts.alice, accounts.bob
    done = trainq_as(workstation, bob, "submit", "--after", "99999", "--", "true", cwd=shared_dir)
    assert done.returncode == ExitCode.USAGE
    assert one_line(done.stderr) == "trainq: after: no job 99999\n"
    blocker = trainq_as(
        workstation, alice, "submit", "--gpus", "4", "--", "sleep", "60", cwd=shared_dir
    )
    queued = trainq_as(workstation, alice, "submit", "--gpus", "4", "--", "true", cwd=shared_dir)
    assert blocker.returncode == queued.returncode == 0
    alices = int(queued.stdout)
    # Bob would make Alice's job wait on his own, later one: refused, whoever asks.
    mine = trainq_as(workstation, bob, "submit", "--", "sleep", "60", cwd=shared_dir)
    for user in (bob, alice):
        status, body = http_as(
            workstation, user, "PATCH", f"/v1/jobs/{alices}", {"after": [mine.stdout.strip()]}
        )
        assert (status, body["error"]["code"]) == (400, "invalid_request")
    assert workstation.job(alices)["spec"]["after"] == []
    assert trainq_as(workstation, bob, "health").returncode == 0
    for job in (blocker, queued, mine):
        workstation.cli("stop", "--grace", "0", job.stdout.strip())
