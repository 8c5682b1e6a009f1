"""A job that forks without end must hit its owner's process cap, not the host's pid space:
on a host whose pid_max is 32768, one user's fork bomb would otherwise leave trainqd unable
to start a monitor and every other user unable to run anything."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.accounts import ADMINS, Accounts, User
from tests.support.containers import Engine, attempt_log, container_job, engine_daemon
from tests.support.daemon import Daemon, running_daemon, trainer
from tests.support.users import http_as, trainq_as

pytestmark = pytest.mark.multiuser

CAP = 64


@pytest.fixture
def capped(accounts: Accounts) -> Iterator[Daemon]:
    config = {"admin_group": ADMINS, "max_processes_per_user": CAP}
    with running_daemon(gpus="fake:2", config=config) as daemon:
        yield daemon


def test_a_fork_bomb_stops_at_its_owners_cap_and_others_run_on(
    capped: Daemon, accounts: Accounts, shared_dir: Path
) -> None:
    alice, bob = accounts.alice, accounts.bob
    bomb = trainq_as(
        capped, alice, "submit", "--", "python3", trainer("fork_bomb.py"), cwd=shared_dir
    )
    assert bomb.returncode == 0, bomb.stderr
    job_id = int(bomb.stdout)
    # Meanwhile bob's jobs start and finish as ever.
    other = trainq_as(capped, bob, "submit", "--wait", "--", "true", cwd=shared_dir)
    assert other.returncode == 0, other.stderr

    ended = capped.wait_state(job_id, timeout=60)
    assert ended["state"] == "COMPLETED", ended
    logs = trainq_as(capped, alice, "logs", str(job_id))
    made, why = logs.stdout.split()
    # The monitor and the trainer count too; what else alice runs is not much here.
    assert 0 < int(made) < CAP
    assert why == "EAGAIN"
    assert trainq_as(capped, bob, "health").returncode == 0


@pytest.mark.containers
def test_a_container_fork_bomb_stops_at_its_pids_limit(engine: Engine, submitter: User) -> None:
    with engine_daemon(engine, engine.env, "podman", max_processes_per_user=CAP) as daemon:
        status, job = http_as(daemon, submitter, "POST", "/v1/jobs", container_job("fork_bomb.py"))
        assert status == 201, job
        ended = daemon.wait_state(job["id"], timeout=60)
        assert ended["state"] == "COMPLETED", attempt_log(daemon, job["id"])
        stdout = daemon.state_dir / "jobs" / str(job["id"]) / "attempts" / "1" / "stdout"
        made, why = stdout.read_text().split()
        assert 0 < int(made) < CAP
        assert why == "EAGAIN"
