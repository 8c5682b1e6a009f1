"""Pausing (`trainq hold` of a running job) is stopping it for a while: only its owner, root
or an admin may; an admin's pause is an admin's to release. Anyone else gets one line, the
job runs on, and trainqd serves everyone meanwhile."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.accounts import Accounts
from tests.support.daemon import Daemon
from tests.support.users import start_sleeper, trainq_as
from trainq.core.errors import ExitCode

pytestmark = pytest.mark.multiuser


def test_only_those_who_may_stop_a_job_may_pause_it(
    workstation: Daemon, accounts: Accounts, shared_dir: Path
) -> None:
    alice, bob, carol = accounts.alice, accounts.bob, accounts.carol
    job = start_sleeper(workstation, alice, shared_dir)
    job_id = str(job["id"])
    refused = trainq_as(workstation, bob, "hold", job_id)
    assert refused.returncode == ExitCode.FORBIDDEN
    assert refused.stderr == (
        f"trainq: job {job_id} belongs to tq-alice; only its owner or root or members of "
        "tq-admins may hold it\n"
    )
    assert workstation.job(job["id"])["state"] == "RUNNING"
    assert trainq_as(workstation, bob, "ls").returncode == 0  # trainqd serves on

    # An admin pauses it: the owner cannot undo that.
    assert trainq_as(workstation, carol, "hold", job_id).returncode == 0
    paused = workstation.wait_state(job["id"], "PENDING")
    assert paused["held_by"] == "tq-carol"
    assert paused["pending_reason"].startswith("paused by tq-carol")
    denied = trainq_as(workstation, alice, "release", job_id)
    assert denied.returncode == ExitCode.FORBIDDEN, denied.stderr
    assert workstation.job(job["id"])["held_by"] == "tq-carol"
    assert trainq_as(workstation, carol, "release", job_id).returncode == 0
    workstation.wait_state(job["id"], "RUNNING")

    # Its owner pauses and resumes it alone.
    assert trainq_as(workstation, alice, "hold", job_id).returncode == 0
    assert workstation.wait_state(job["id"], "PENDING")["held_by"] == "tq-alice"
    assert trainq_as(workstation, alice, "release", job_id).returncode == 0
    resumed = workstation.wait_state(job["id"], "RUNNING")
    assert len(resumed["attempts"]) == 3
    assert trainq_as(workstation, alice, "stop", "--grace", "0", job_id).returncode == 0
    workstation.wait_state(job["id"])
