"""What other users may learn about a job: that it exists, whose it is, its state and its
resources (`trainq ls`, `trainq show`), but nothing the owner keeps to themselves: its output
and logs (covered in test_authorization and test_identity), and the values of its
environment, where API tokens live (WANDB_API_KEY, HF_TOKEN, ...)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.support.accounts import Accounts
from tests.support.daemon import Daemon
from tests.support.users import submit_as, trainq_as

pytestmark = pytest.mark.multiuser


def job_with_a_token(daemon: Daemon, accounts: Accounts) -> tuple[dict[str, Any], str]:
    token = f"hf_{uuid.uuid4().hex}"
    spec = {"command": ["true"], "environment": {"HF_TOKEN": token}}
    job = submit_as(daemon, accounts.alice, spec)
    assert daemon.wait_state(job["id"])["state"] == "COMPLETED"
    return job, token


def seen_whole_by_alice_not_bob(
    daemon: Daemon, accounts: Accounts, job_id: int, token: str
) -> list[str]:
    """The owner sees the token in her job; bob sees the job (`show`, `ls`) without it:
    what he saw, for more checks."""
    own = trainq_as(daemon, accounts.alice, "show", "--json", str(job_id))
    assert token in own.stdout
    seen = []
    for command in (("show", "--json", str(job_id)), ("ls", "--all", "--json")):
        done = trainq_as(daemon, accounts.bob, *command)
        assert done.returncode == 0, done.stderr
        assert str(job_id) in done.stdout
        assert token not in done.stdout, command
        seen.append(done.stdout)
    return seen


def test_other_users_do_not_see_a_jobs_environment_values(
    workstation: Daemon, accounts: Accounts
) -> None:
    job, token = job_with_a_token(workstation, accounts)
    seen_whole_by_alice_not_bob(workstation, accounts, job["id"], token)


def test_other_users_cannot_read_the_database(workstation: Daemon, accounts: Accounts) -> None:
    job_with_a_token(workstation, accounts)
    for name in ("trainq.db", "trainq.db-wal", "trainq.db-shm"):
        path = workstation.state_dir / name
        assert path.exists(), name
        peek = accounts.bob.run(["cat", str(path)])
        assert peek.returncode != 0, name
        assert "Permission denied" in peek.stderr


def test_other_users_do_not_see_an_instance_groups_environment_values(
    workstation: Daemon, accounts: Accounts
) -> None:
    """A job of several nodes gives each group an environment of its own: its values are
    the owner's as the job's are."""
    token = f"hf_{uuid.uuid4().hex}"
    groups = [
        {"name": "servers", "instance_count": 1, "environment": {"HF_TOKEN": token}},
        {"name": "workers", "instance_count": 1, "primary": True},
    ]
    job = submit_as(workstation, accounts.alice, {"command": ["true"], "instance_groups": groups})
    assert workstation.wait_state(job["id"], timeout=60)["state"] == "COMPLETED"
    for seen in seen_whole_by_alice_not_bob(workstation, accounts, job["id"], token):
        assert "HF_TOKEN" in seen  # the name stays, as the job's own do
    # Nor can a copy carry the placeholder, or the token, into a job of bob's.
    copied = trainq_as(workstation, accounts.bob, "submit", "--like", str(job["id"]))
    assert copied.returncode == 2, copied.stdout
    assert "hidden from you" in copied.stderr
    assert token not in copied.stdout + copied.stderr
    assert trainq_as(workstation, accounts.bob, "ls").returncode == 0  # trainqd serves bob
