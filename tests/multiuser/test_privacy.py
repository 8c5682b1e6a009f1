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


def test_other_users_do_not_see_a_jobs_environment_values(
    workstation: Daemon, accounts: Accounts
) -> None:
    job, token = job_with_a_token(workstation, accounts)
    own = trainq_as(workstation, accounts.alice, "show", "--json", str(job["id"]))
    assert token in own.stdout  # the owner sees her own job whole
    for command in (("show", "--json", str(job["id"])), ("ls", "--all", "--json")):
        seen = trainq_as(workstation, accounts.bob, *command)
        assert seen.returncode == 0, seen.stderr
        assert str(job["id"]) in seen.stdout
        assert token not in seen.stdout, command


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
    own = trainq_as(workstation, accounts.alice, "show", "--json", str(job["id"]))
    assert token in own.stdout  # the owner sees her own job whole
    for command in (("show", "--json", str(job["id"])), ("ls", "--all", "--json")):
        seen = trainq_as(workstation, accounts.bob, *command)
        assert seen.returncode == 0, seen.stderr
        assert str(job["id"]) in seen.stdout
        assert token not in seen.stdout, command
        assert "HF_TOKEN" in seen.stdout  # the name stays, as the job's own do
    # Nor can a copy carry the placeholder, or the token, into a job of bob's.
    copied = trainq_as(workstation, accounts.bob, "submit", "--like", str(job["id"]))
    assert copied.returncode == 2, copied.stdout
    assert "hidden from you" in copied.stderr
    assert token not in copied.stdout + copied.stderr
    assert trainq_as(workstation, accounts.bob, "ls").returncode == 0  # trainqd serves bob
