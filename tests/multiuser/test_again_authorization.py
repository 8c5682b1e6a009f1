"""Running another user's job again, with real users: `requeue` is the owner's alone (the
job would run as whoever asks), and `submit --like` copies only what the caller may see: a
spec with hidden values is refused in one line, one without runs as the caller. trainqd
serves on after each refusal."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.accounts import Accounts
from tests.support.daemon import Daemon
from tests.support.users import http_as, one_line, trainq_as
from trainq.core.errors import ExitCode

pytestmark = pytest.mark.multiuser


def test_another_users_job_is_not_requeued_and_its_hidden_values_are_not_copied(
    workstation: Daemon, accounts: Accounts, shared_dir: Path
) -> None:
    alice, bob = accounts.alice, accounts.bob
    done = trainq_as(
        workstation, alice, "submit", "--env", "TOKEN=alices-secret", "--", "true",
        cwd=shared_dir,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    job = int(done.stdout)
    assert workstation.wait_state(job)["state"] == "COMPLETED"
    done = trainq_as(workstation, bob, "requeue", str(job))
    assert done.returncode == ExitCode.FORBIDDEN
    assert one_line(done.stderr) == (
        f"trainq: job {job} belongs to tq-alice; only its owner may requeue it "
        f"(`trainq submit --like {job}` makes a job of your own from it)\n"
    )
    status, body = http_as(workstation, bob, "POST", f"/v1/jobs/{job}/requeue")
    assert (status, body["error"]["code"]) == (403, "forbidden")
    done = trainq_as(workstation, bob, "submit", "--like", str(job), cwd=shared_dir)
    assert done.returncode == ExitCode.USAGE
    assert one_line(done.stderr) == (
        f"trainq: environment: the values of TOKEN are hidden from you (job {job} is not "
        "yours); give them with --env/--hp or copy a job of yours\n"
    )
    assert trainq_as(workstation, bob, "health").returncode == 0
    # Nothing was queued for either of them; Alice requeues her own.
    assert [j["id"] for j in workstation.get("/v1/jobs?all=true").json()["jobs"]] == [job]
    again = trainq_as(workstation, alice, "requeue", str(job))
    assert again.returncode == 0, again.stderr
    record = workstation.wait_state(int(again.stdout))
    assert (record["owner"]["user"], record["state"]) == ("tq-alice", "COMPLETED")


def test_a_job_copied_with_like_runs_as_the_one_who_copied_it(
    workstation: Daemon, accounts: Accounts, shared_dir: Path
) -> None:
    alice, bob = accounts.alice, accounts.bob
    done = trainq_as(workstation, alice, "submit", "--", "id", "-un", cwd=shared_dir)
    job = int(done.stdout)
    workstation.wait_state(job)
    copied = trainq_as(workstation, bob, "submit", "--like", str(job), cwd=shared_dir)
    assert copied.returncode == 0, copied.stderr
    record = workstation.wait_state(int(copied.stdout))
    assert (record["owner"]["user"], record["state"]) == ("tq-bob", "COMPLETED")
    logs = trainq_as(workstation, bob, "logs", copied.stdout.strip())
    assert logs.stdout == "tq-bob\n"
