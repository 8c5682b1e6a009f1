"""A job's `--notify` command runs as the job's owner, never as trainqd's root: with real
users, the command's identity and what it can reach are the owner's alone."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support.accounts import Accounts
from tests.support.daemon import Daemon
from tests.support.users import trainq_as
from tests.support.waiting import wait_for

pytestmark = pytest.mark.multiuser


def test_notify_runs_as_the_owner_and_reaches_only_what_she_may(
    workstation: Daemon, accounts: Accounts, shared_dir: Path
) -> None:
    alice = accounts.alice
    mine = shared_dir / "alice"
    mine.mkdir()
    os.chown(mine, alice.uid, alice.gid)
    root_only = shared_dir / "root-only"
    root_only.mkdir(mode=0o700)
    said = mine / "said"
    script = (
        f"id -u > {said}.tmp; id -G >> {said}.tmp; "
        f"touch {root_only}/planted 2>/dev/null || echo denied >> {said}.tmp; "
        f"mv {said}.tmp {said}"
    )
    done = trainq_as(
        workstation, alice, "submit", "--notify", f"sh -c '{script}'", "--", "true",
        cwd=shared_dir,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert workstation.wait_state(int(done.stdout))["state"] == "COMPLETED"
    wait_for(said.exists, timeout=20, what="the notify command to run")
    uid, groups, denied = said.read_text().splitlines()
    assert int(uid) == alice.uid
    assert sorted(int(g) for g in groups.split()) == sorted(set(alice.groups))
    assert denied == "denied"
    assert said.stat().st_uid == alice.uid
    assert not (root_only / "planted").exists()
    assert trainq_as(workstation, alice, "health").returncode == 0


def test_another_user_sees_no_more_of_a_notify_command_than_that_there_is_one(
    workstation: Daemon, accounts: Accounts, shared_dir: Path
) -> None:
    alice, bob = accounts.alice, accounts.bob
    hook = "curl -s https://hooks.example/T0KEN-alice-webhook"
    done = trainq_as(
        workstation, alice, "submit", "--notify", hook, "--", "sleep", "60", cwd=shared_dir
    )
    assert done.returncode == 0, done.stderr
    job = done.stdout.strip()
    for args in (("show", "--json", job), ("ls", "--json")):
        seen = trainq_as(workstation, bob, *args)
        assert seen.returncode == 0
        assert "T0KEN" not in seen.stdout
    shown = json.loads(trainq_as(workstation, bob, "show", "--json", job).stdout)
    assert shown["spec"]["notify"] == ["<hidden>"]
    mine = json.loads(trainq_as(workstation, alice, "show", "--json", job).stdout)
    assert mine["spec"]["notify"] == ["curl", "-s", "https://hooks.example/T0KEN-alice-webhook"]
    # Copied by Bob, the job is his without Alice's command.
    copied = trainq_as(workstation, bob, "submit", "--like", job, "--", "true", cwd=shared_dir)
    assert copied.returncode == 0, copied.stderr
    assert workstation.job(int(copied.stdout))["spec"]["notify"] is None
    workstation.cli("stop", "--grace", "0", job)
