"""Per-user limits (max_running_jobs_per_user, max_gpus_per_user) hold a user's jobs back in
the queue, with the reason shown; they never fail them, and other users' jobs go ahead."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.accounts import Accounts, User
from tests.support.daemon import Daemon, running_daemon, trainer
from tests.support.users import submit_as, trainq_as

pytestmark = pytest.mark.multiuser


def sleeper(gpus: int) -> dict[str, Any]:
    return {"command": [sys.executable, trainer("sleeper.py")], "gpus": gpus}


@pytest.fixture
def limited(request: pytest.FixtureRequest, accounts: Accounts) -> Iterator[Daemon]:
    with running_daemon(gpus="fake:4", config=request.param) as daemon:
        yield daemon


def stop(daemon: Daemon, user: User, job_id: int) -> None:
    done = trainq_as(daemon, user, "stop", "--grace", "0", str(job_id))
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("limited", [{"max_running_jobs_per_user": 1}], indirect=True)
def test_a_running_jobs_limit_holds_the_users_next_job(limited: Daemon, accounts: Accounts) -> None:
    alice, bob = accounts.alice, accounts.bob
    first = submit_as(limited, alice, sleeper(1))
    second = submit_as(limited, alice, sleeper(1))
    bobs = submit_as(limited, bob, sleeper(1))
    limited.wait_state(first["id"], "RUNNING")
    # bob's job was planned after alice's second: by the time it runs, hers was passed over.
    limited.wait_state(bobs["id"], "RUNNING")
    held = limited.job(second["id"])
    assert held["state"] == "PENDING"
    assert held["pending_reason"] == "held: max_running_jobs_per_user (1)"
    stop(limited, alice, first["id"])
    limited.wait_state(second["id"], "RUNNING")
    assert limited.job(first["id"])["state"] == "STOPPED"
    stop(limited, alice, second["id"])
    stop(limited, bob, bobs["id"])
    for job in (second, bobs):
        assert limited.wait_state(job["id"])["state"] == "STOPPED"


@pytest.mark.parametrize("limited", [{"max_gpus_per_user": 2}], indirect=True)
def test_a_gpu_limit_holds_the_users_next_job(limited: Daemon, accounts: Accounts) -> None:
    alice, bob = accounts.alice, accounts.bob
    pair = submit_as(limited, alice, sleeper(2))
    one_more = submit_as(limited, alice, sleeper(1))
    bobs = submit_as(limited, bob, sleeper(2))
    limited.wait_state(pair["id"], "RUNNING")
    limited.wait_state(bobs["id"], "RUNNING")
    held = limited.job(one_more["id"])
    assert held["state"] == "PENDING"
    assert held["pending_reason"] == "held: max_gpus_per_user (2)"
    stop(limited, alice, pair["id"])
    running = limited.wait_state(one_more["id"], "RUNNING")
    assert len(running["gpus"]) == 1
    stop(limited, alice, one_more["id"])
    stop(limited, bob, bobs["id"])
    for job in (one_more, bobs):
        assert limited.wait_state(job["id"])["state"] == "STOPPED"
