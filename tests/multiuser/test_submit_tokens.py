"""A client token (`Idempotency-Key`, `trainq submit --token`) is its sender's alone: another
user who sends the same token gets a job of their own, never the first user's job or a hint
that the token was used, and each user's repeat gets their own job back."""

from __future__ import annotations

import pytest

from tests.support.accounts import Accounts, User
from tests.support.daemon import Daemon
from tests.support.users import trainq_as

pytestmark = pytest.mark.multiuser


def submitted(daemon: Daemon, user: User, token: str) -> int:
    done = trainq_as(daemon, user, "submit", "--token", token, "--", "true")
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


def test_a_token_is_scoped_to_its_user(workstation: Daemon, accounts: Accounts) -> None:
    alices = submitted(workstation, accounts.alice, "shared-token")
    bobs = submitted(workstation, accounts.bob, "shared-token")
    assert bobs != alices
    bob_job = workstation.job(bobs)
    assert bob_job["owner"]["user"] == accounts.bob.name
    # Each one's repeat is their own job again; the admin's is a third.
    assert submitted(workstation, accounts.bob, "shared-token") == bobs
    assert submitted(workstation, accounts.alice, "shared-token") == alices
    carols = submitted(workstation, accounts.carol, "shared-token")
    assert carols not in (alices, bobs)
    # Bob's own token reused for another request is refused, naming nothing of alice's.
    other = trainq_as(
        workstation, accounts.bob, "submit", "--token", "shared-token", "--gpus", "1", "--", "true"
    )
    assert other.returncode == 6, other.stderr
    assert str(alices) not in other.stderr
    fresh = trainq_as(workstation, accounts.carol, "submit", "--token", "bobs-only", "--", "true")
    assert fresh.returncode == 0, fresh.stderr
    for job_id in (alices, bobs, carols, int(fresh.stdout)):
        assert workstation.wait_state(job_id)["state"] == "COMPLETED"
