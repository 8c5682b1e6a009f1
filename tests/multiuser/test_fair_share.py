"""Sharing between real users: a class restricted to a group is refused to everyone else,
in one line, and a user's own priority orders only their own jobs, never one of theirs
before another user's when fair share says the other goes first."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.daemon import Daemon, scratch_dir, supervised, trainer
from tests.helpers import wait_for
from tests.multiuser.accounts import ADMINS, Accounts
from tests.multiuser.support import submit_as, trainq_as
from trainq.core.errors import ExitCode

pytestmark = pytest.mark.multiuser

# No admin_group: tq-carol is a member of tq-admins, the class's group, and nothing more.
CONFIG = f"""
default_stop_grace_seconds = 5

[classes.default]

[classes.lab]
weight = 5
groups = ["{ADMINS}"]
"""


@pytest.fixture
def workstation(accounts: Accounts) -> Iterator[Daemon]:
    base = scratch_dir()
    server = Daemon(base, gpus="fake:1")
    server.config_file.write_text(CONFIG)
    with supervised(server, remove=base) as started:
        yield started


def sleeper(**spec: Any) -> dict[str, Any]:
    return {"command": [sys.executable, trainer("sleeper.py")], "gpus": 1, **spec}


def test_a_class_of_another_group_is_refused(workstation: Daemon, accounts: Accounts) -> None:
    done = trainq_as(workstation, accounts.alice, "submit", "--class", "lab", "--", "true")
    assert done.returncode == ExitCode.FORBIDDEN, (done.stdout, done.stderr)
    assert done.stderr == (f"trainq: class 'lab' is for group {ADMINS}; tq-alice may not use it\n")
    done = trainq_as(workstation, accounts.carol, "submit", "--class", "lab", "--", "true")
    assert done.returncode == 0, done.stderr
    assert workstation.wait_state(int(done.stdout))["state"] == "COMPLETED"


def test_a_users_priority_does_not_overtake_another_users_job(
    workstation: Daemon, accounts: Accounts
) -> None:
    alice, bob = accounts.alice, accounts.bob
    blocker = submit_as(workstation, alice, sleeper())["id"]
    workstation.wait_state(blocker, "RUNNING")
    bobs = submit_as(workstation, bob, sleeper(priority=0))["id"]
    alices = submit_as(workstation, alice, sleeper(priority=10_000))["id"]

    # alice's running job counts in her usage: bob's job is next, whatever her priority.
    # (A submission that sorts after the waiting head gets its place at the next plan: the
    # GPU rescan's, within gpu_rescan_seconds.)
    def in_order() -> bool:
        return (workstation.job(bobs)["place"], workstation.job(alices)["place"]) == (1, 2)

    wait_for(in_order, timeout=15, what="bob's job at place 1 and alice's at place 2")
    done = trainq_as(workstation, alice, "stop", "--grace", "0", str(blocker))
    assert done.returncode == 0, done.stderr
    assert workstation.wait_state(bobs, "RUNNING")["state"] == "RUNNING"
    assert workstation.job(alices)["state"] == "PENDING"
    users = {u["user"]: u for u in workstation.get("/v1/users").json()["users"]}
    assert users["tq-bob"]["running_jobs"] == 1
    assert users["tq-alice"]["waiting_jobs"] == 1
    assert users["tq-alice"]["gpu_hours"] > 0
