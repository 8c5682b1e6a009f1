"""Sharing between real users: a class restricted to a group is refused to everyone else,
in one line, and a user's own priority orders only their own jobs, never one of theirs
before another user's when fair share says the other goes first."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.accounts import ADMINS, Accounts
from tests.support.daemon import Daemon, running_daemon, trainer
from tests.support.users import submit_as, trainq_as
from tests.support.waiting import wait_for
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
    with running_daemon(CONFIG, gpus="fake:1") as started:
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


SHARE_PREEMPTION = """
default_stop_grace_seconds = 5
preempt_after_seconds = 0
min_runtime_before_preemption_seconds = 0
preempt_for_fair_share = true

[classes.default]
preemptible = true
may_preempt = true
"""


def test_a_user_over_their_share_yields_a_gpu_once_and_not_back(accounts: Accounts) -> None:
    alice, bob = accounts.alice, accounts.bob
    with running_daemon(SHARE_PREEMPTION, gpus="fake:2") as workstation:
        alices = [submit_as(workstation, alice, sleeper())["id"] for _ in range(2)]
        for job_id in alices:
            workstation.wait_state(job_id, "RUNNING")
        # alice holds both GPUs; bob's job of the same class takes one of them back.
        bobs = submit_as(workstation, bob, sleeper())["id"]
        assert workstation.wait_state(bobs, "RUNNING")["state"] == "RUNNING"

        def victim() -> dict[str, Any] | None:
            jobs = [workstation.job(job_id) for job_id in alices]
            return next((job for job in jobs if job["preempted_count"] == 1), None)

        preempted = wait_for(victim, timeout=15, what="one of alice's jobs preempted")
        assert preempted["attempts"][0]["reason"].startswith(f"preempted by job {bobs} (tq-bob)")

        # Back in the queue with one GPU each, alice's job waits: taking bob's would leave
        # him with fewer than her.
        def waits_plainly() -> bool:
            job = workstation.job(preempted["id"])
            return job["state"] == "PENDING" and job["pending_reason"] == (
                "waiting for 1 GPU (0 free)"
            )

        wait_for(waits_plainly, timeout=15, what="alice's preempted job waiting for a GPU")
        bob_job = workstation.job(bobs)
        assert (bob_job["state"], bob_job["stop_reason"]) == ("RUNNING", None)
        assert workstation.cli("health").returncode == 0
