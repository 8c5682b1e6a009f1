"""`stop`, `hold`, `release` and `rm` over several jobs picked by filters (`--user`,
`--state`, `--name GLOB`, `--group`; `rm --ended [--older-than]`), as real users: filters
pick the caller's own jobs, and another user's jobs named with `--user` are refused one
line each (exit 5), untouched, while trainqd serves everyone."""

from __future__ import annotations

import sys

import pytest

from tests.support.accounts import Accounts, User
from tests.support.daemon import Daemon, trainer
from tests.support.users import trainq_as
from trainq.core.errors import ExitCode

pytestmark = pytest.mark.multiuser


def submit(daemon: Daemon, user: User, name: str, *command: str) -> int:
    argv = command or (sys.executable, trainer("sleeper.py"))
    done = trainq_as(daemon, user, "submit", "--gpus", "1", "--name", name, "--", *argv, cwd="/tmp")
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


def state(daemon: Daemon, job_id: int) -> str:
    return str(daemon.job(job_id)["state"])


def refused_each(done: object, jobs: list[int], owner: str, action: str) -> None:
    assert done.returncode == ExitCode.FORBIDDEN  # type: ignore[attr-defined]
    lines = done.stderr.splitlines()  # type: ignore[attr-defined]
    assert lines == [
        f"trainq: job {job} belongs to {owner}; only its owner or root or members of "
        f"tq-admins may {action} it"
        for job in jobs
    ]


def test_stop_by_filters_and_another_users_jobs_refused(
    workstation: Daemon, accounts: Accounts
) -> None:
    alice, bob = accounts.alice, accounts.bob
    lr = [submit(workstation, alice, f"lr-{n}") for n in (1, 2)]
    other = submit(workstation, alice, "other")
    mine = submit(workstation, bob, "b-1")
    for job in [*lr, other, mine]:
        workstation.wait_state(job, "RUNNING")

    refused_each(
        trainq_as(workstation, bob, "stop", "--user", alice.name), [*lr, other], alice.name, "stop"
    )
    assert {state(workstation, job) for job in [*lr, other]} == {"RUNNING"}
    # bob's own, by name: trainqd went on serving him
    done = trainq_as(workstation, bob, "stop", "--grace", "0", "--name", "b-*")
    assert (done.returncode, done.stdout.split()[0]) == (0, str(mine))

    done = trainq_as(workstation, alice, "stop", "--grace", "0", "--name", "lr-*")
    assert done.returncode == 0, done.stderr
    assert [line.split()[0] for line in done.stdout.splitlines()] == [str(j) for j in lr]
    for job in lr:
        workstation.wait_state(job, "STOPPED")
    assert state(workstation, other) == "RUNNING"
    done = trainq_as(workstation, alice, "stop", "--grace", "0", "--state", "running")
    assert (done.returncode, done.stdout.split()[0]) == (0, str(other))
    workstation.wait_state(other, "STOPPED")
    none = trainq_as(workstation, alice, "stop", "--name", "lr-*")
    assert (none.returncode, none.stdout, none.stderr) == (0, "", "trainq: no job matches\n")


def test_hold_and_release_by_filters(workstation: Daemon, accounts: Accounts) -> None:
    alice, bob = accounts.alice, accounts.bob
    drained = workstation.cli("drain", "--reason", "test")  # root: nothing starts
    assert drained.returncode == 0, drained.stderr
    try:
        sweep = [submit(workstation, alice, f"sweep-{n}", "true") for n in (1, 2)]
        keep = submit(workstation, alice, "keep", "true")

        refused_each(
            trainq_as(workstation, bob, "hold", "--user", alice.name), [*sweep, keep],
            alice.name, "hold",
        )  # fmt: skip
        assert all(workstation.job(job)["held_by"] is None for job in [*sweep, keep])

        done = trainq_as(workstation, alice, "hold", "--name", "sweep-*")
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines() == [f"{job} held by {alice.name}" for job in sweep]
        assert workstation.job(keep)["held_by"] is None

        refused_each(
            trainq_as(workstation, bob, "release", "--user", alice.name, "--name", "sweep-*"),
            sweep, alice.name, "release",
        )  # fmt: skip
        done = trainq_as(workstation, alice, "release", "--name", "sweep-*")
        assert done.stdout.splitlines() == [f"{job} released" for job in sweep]
        assert all(workstation.job(job)["held_by"] is None for job in sweep)
    finally:
        assert workstation.cli("resume").returncode == 0


def test_rm_ended_jobs(workstation: Daemon, accounts: Accounts) -> None:
    alice, bob = accounts.alice, accounts.bob
    ended = [submit(workstation, alice, f"done-{n}", "true") for n in (1, 2)]
    for job in ended:
        workstation.wait_state(job, "COMPLETED")
    running = submit(workstation, alice, "running")
    workstation.wait_state(running, "RUNNING")

    refused_each(
        trainq_as(workstation, bob, "rm", "--ended", "--user", alice.name), ended, alice.name,
        "remove",
    )  # fmt: skip
    recent = trainq_as(workstation, alice, "rm", "--ended", "--older-than", "1h")
    assert (recent.returncode, recent.stderr) == (0, "trainq: no job matches\n")
    done = trainq_as(workstation, alice, "rm", "--ended")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"{job} removed" for job in ended]
    for job in ended:
        assert workstation.get(f"/v1/jobs/{job}").status_code == 404
    assert state(workstation, running) == "RUNNING"
    trainq_as(workstation, alice, "stop", "--grace", "0", str(running))
