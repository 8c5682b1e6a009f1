"""Who may hold, release, change and remove a job, and drain the workstation, with real users:
the owner and the admins may act on a job (an admin's hold is an admin's to release), the
admins alone may drain, resume or boost. Each refusal is one line (exit 5, HTTP 403), leaves
everything as it was, and trainqd goes on serving the others."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.accounts import Accounts, User
from tests.support.daemon import Daemon, running_daemon
from tests.support.users import http_as, one_line, start_sleeper, trainq_as
from trainq.core.errors import ExitCode

pytestmark = pytest.mark.multiuser

ADMINS = "root or members of tq-admins"


def ok(daemon: Daemon, user: User, *args: str) -> str:
    done = trainq_as(daemon, user, *args)
    assert done.returncode == 0, done.stderr
    return str(done.stdout)


def forbidden(daemon: Daemon, user: User, *args: str) -> str:
    done = trainq_as(daemon, user, *args)
    assert done.returncode == ExitCode.FORBIDDEN, (done.stdout, done.stderr)
    line = one_line(done.stderr)
    # The refused user is still served.
    assert trainq_as(daemon, user, "health").returncode == 0
    return line


@pytest.fixture
def alices_queue(
    workstation: Daemon, accounts: Accounts, shared_dir: Path
) -> Iterator[dict[str, Any]]:
    """tq-alice's job holding every GPU, and her job waiting behind it."""
    blocker = start_sleeper(workstation, accounts.alice, shared_dir, "--gpus", "4")
    queued = trainq_as(
        workstation, accounts.alice, "submit", "--gpus", "1", "--", "true", cwd=shared_dir
    )
    assert queued.returncode == 0, queued.stderr
    yield {"blocker": blocker["id"], "queued": int(queued.stdout)}
    workstation.cli("stop", "--grace", "0", str(blocker["id"]))
    workstation.cli("stop", queued.stdout.strip())


def test_another_user_cannot_hold_release_or_change_a_job(
    workstation: Daemon, accounts: Accounts, alices_queue: dict[str, Any]
) -> None:
    job = str(alices_queue["queued"])
    bob = accounts.bob
    owned = f"trainq: job {job} belongs to tq-alice; only its owner or {ADMINS} may"
    assert forbidden(workstation, bob, "hold", job) == f"{owned} hold it\n"
    assert forbidden(workstation, bob, "update", job, "--priority", "9") == f"{owned} change it\n"
    ok(workstation, accounts.alice, "hold", job)
    assert forbidden(workstation, bob, "release", job) == f"{owned} release it\n"
    status, body = http_as(workstation, bob, "POST", f"/v1/jobs/{job}/release")
    assert (status, body["error"]["code"]) == (403, "forbidden")
    status, body = http_as(workstation, bob, "PATCH", f"/v1/jobs/{job}", {"gpus": 2})
    assert (status, body["error"]["code"]) == (403, "forbidden")
    record = workstation.job(int(job))
    assert (record["held_by"], record["priority"], record["spec"]["gpus"]) == ("tq-alice", 0, 1)
    assert ok(workstation, accounts.alice, "release", job) == f"{job} released\n"


def test_an_admins_hold_is_released_by_an_admin_alone(
    workstation: Daemon, accounts: Accounts, alices_queue: dict[str, Any]
) -> None:
    job = str(alices_queue["queued"])
    alice, carol = accounts.alice, accounts.carol
    ok(workstation, alice, "hold", job)
    # An admin's hold replaces the owner's, so that she cannot lift it.
    assert ok(workstation, carol, "hold", job) == f"{job} held by tq-carol\n"
    line = forbidden(workstation, alice, "release", job)
    assert (
        line == f"trainq: job {job} was held by tq-carol, an admin; only {ADMINS} may release it\n"
    )
    assert workstation.job(int(job))["held_by"] == "tq-carol"
    assert ok(workstation, carol, "release", job) == f"{job} released\n"
    assert workstation.job(int(job))["held_by"] is None


def test_boost_is_an_admins_and_priority_the_owners(
    workstation: Daemon, accounts: Accounts, alices_queue: dict[str, Any]
) -> None:
    job = str(alices_queue["queued"])
    line = forbidden(workstation, accounts.alice, "update", job, "--boost", "100")
    assert line == f"trainq: only {ADMINS} may boost a job above other users' work\n"
    assert workstation.job(int(job))["boost"] == 0
    assert ok(workstation, accounts.alice, "update", job, "--priority", "7") == (
        f"{job} updated: priority=7\n"
    )
    assert ok(workstation, accounts.carol, "update", job, "--boost", "100") == (
        f"{job} updated: boost=100\n"
    )
    record = workstation.job(int(job))
    assert (record["priority"], record["boost"]) == (7, 100)


def test_only_admins_drain_and_resume(workstation: Daemon, accounts: Accounts) -> None:
    bob, carol = accounts.bob, accounts.carol
    line = forbidden(workstation, bob, "drain", "--gpus", "1", "--reason", "mine now")
    assert line == f"trainq: only {ADMINS} may drain GPUs\n"
    status, _ = http_as(workstation, bob, "POST", "/v1/drain", {"reason": "x"})
    assert status == 403
    assert workstation.get("/v1/health").json()["drains"] == []
    assert ok(workstation, carol, "drain", "--gpus", "1", "--reason", "reseating") == (
        "GPU 1 drained by tq-carol: reseating\n"
    )
    assert (
        forbidden(workstation, bob, "resume") == f"trainq: only {ADMINS} may resume drained GPUs\n"
    )
    assert [d["gpu"] for d in workstation.get("/v1/health").json()["drains"]] == [1]
    assert ok(workstation, carol, "resume") == "nothing is drained\n"


def test_rm_is_for_the_owner_and_admins(
    workstation: Daemon, accounts: Accounts, shared_dir: Path
) -> None:
    alice, bob, carol = accounts.alice, accounts.bob, accounts.carol
    ids = []
    for _ in range(2):
        done = trainq_as(workstation, alice, "submit", "--wait", "--", "true", cwd=shared_dir)
        assert done.returncode == 0, done.stderr
        ids.append(done.stdout.strip())
    first, second = ids
    line = forbidden(workstation, bob, "rm", first)
    assert (
        line
        == f"trainq: job {first} belongs to tq-alice; only its owner or {ADMINS} may remove it\n"
    )
    status, _ = http_as(workstation, bob, "DELETE", f"/v1/jobs/{first}")
    assert status == 403
    job_dir = workstation.state_dir / "jobs" / first
    assert job_dir.is_dir()
    assert workstation.job(int(first))["state"] == "COMPLETED"
    assert ok(workstation, alice, "rm", first) == f"{first} removed\n"
    assert ok(workstation, carol, "rm", second) == f"{second} removed\n"
    assert not job_dir.exists()
    assert workstation.get(f"/v1/jobs/{second}").status_code == 404


def test_a_class_is_changed_to_only_by_those_who_may_use_it(
    accounts: Accounts, shared_dir: Path
) -> None:
    config = 'admin_group = "tq-admins"\n[classes.default]\n[classes.staff]\nusers = ["tq-alice"]\n'
    with running_daemon(config, gpus="fake:1") as daemon:
        blocker = start_sleeper(daemon, accounts.alice, shared_dir, "--gpus", "1")
        queued = trainq_as(
            daemon, accounts.bob, "submit", "--gpus", "1", "--", "true", cwd=shared_dir
        )
        assert queued.returncode == 0, queued.stderr
        job = queued.stdout.strip()
        line = forbidden(daemon, accounts.bob, "update", job, "--class", "staff")
        assert line == "trainq: class 'staff' is for tq-alice; tq-bob may not use it\n"
        assert daemon.job(int(job))["spec"]["class"] is None
        assert ok(daemon, accounts.carol, "update", job, "--class", "staff") == (
            f"{job} updated: class=staff\n"
        )
        daemon.cli("stop", "--grace", "0", str(blocker["id"]))
        assert daemon.wait_state(int(job))["state"] == "COMPLETED"
