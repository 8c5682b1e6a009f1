"""A hostile user against the ways users share the workstation: changing a waiting job past
the rules, queueing without end, claiming a preemption for free retries, removing a huge
directory, and naming another user's sweep by its group. Each attack is made with real users
against a real root trainqd; each refusal is one line, and trainqd goes on serving the
others."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.accounts import ADMINS, Accounts, User
from tests.support.daemon import Daemon, running_daemon
from tests.support.users import SYSTEM_PYTHON, http_as, start_sleeper, submit_as, trainq_as
from tests.support.waiting import wait_for
from trainq.core.errors import ExitCode

pytestmark = pytest.mark.multiuser

QUEUE_CAP = 6


@pytest.fixture
def capped(accounts: Accounts) -> Iterator[Daemon]:
    """A root trainqd whose users may each have at most QUEUE_CAP unfinished jobs."""
    config = {
        "admin_group": ADMINS,
        "default_stop_grace_seconds": 1,
        "max_unfinished_jobs_per_user": QUEUE_CAP,
    }
    with running_daemon(gpus="fake:4", config=config) as daemon:
        yield daemon


def unfinished(daemon: Daemon, owner: str) -> int:
    answer = daemon.get("/v1/jobs", params={"user": owner, "limit": 1000})
    assert answer.status_code == 200, answer.text
    return len(answer.json()["jobs"])


def test_a_change_past_the_rules_is_a_clean_refusal(
    capped: Daemon, accounts: Accounts, shared_dir: Path
) -> None:
    """`"boost": null` slipped past the admins-only check and reached the database's NOT
    NULL column: a 500 with a traceback in the log. Now one line, as every bad change is."""
    alice = accounts.alice
    start_sleeper(capped, alice, shared_dir, "--gpus", "4")
    done = trainq_as(capped, alice, "submit", "--gpus", "1", "--", "true", cwd=shared_dir)
    job = int(done.stdout)
    status, body = http_as(capped, alice, "PATCH", f"/v1/jobs/{job}", {"boost": None})
    assert (status, body["error"]["code"]) == (400, "invalid_request"), body
    assert "\n" not in body["error"]["message"]
    status, body = http_as(capped, alice, "PATCH", f"/v1/jobs/{job}", {"boost": 5})
    assert (status, body["error"]["code"]) == (403, "forbidden"), body
    assert capped.job(job)["boost"] == 0
    # GPUs past the host, below zero or past any integer the database holds: one line each.
    for gpus in (5, -1, 2**80):
        status, body = http_as(capped, alice, "PATCH", f"/v1/jobs/{job}", {"gpus": gpus})
        assert (status, body["error"]["code"]) == (400, "invalid_spec"), (gpus, body)
    assert capped.job(job)["spec"]["gpus"] == 1
    assert "Traceback" not in capped.log_file.read_text()


def test_one_user_cannot_queue_without_end(
    capped: Daemon, accounts: Accounts, shared_dir: Path
) -> None:
    """Every unfinished job is held in trainqd's memory and weighed on each scheduling pass:
    sweep after sweep of 10,000 would make every user's request slower and the daemon's
    memory grow without end. Past max_unfinished_jobs_per_user a submission gets one line,
    also when many arrive at once."""
    alice, bob = accounts.alice, accounts.bob
    start_sleeper(capped, alice, shared_dir, "--gpus", "4")  # 1 of her 6
    spec = {"command": ["true"], "gpus": 1, "working_dir": str(shared_dir)}
    status, answer = http_as(capped, alice, "POST", "/v1/jobs", [spec] * 3)
    assert status == 201, answer
    status, answer = http_as(capped, alice, "POST", "/v1/jobs", [spec] * 3)
    assert (status, answer["error"]["code"]) == (409, "conflict"), answer
    message = answer["error"]["message"]
    assert message.startswith("tq-alice has 4 unfinished jobs and may have at most 6"), message
    assert "\n" not in message

    # Ten single submissions at once: only the two that fit are queued.
    answers: list[int] = []

    def submit() -> None:
        answers.append(http_as(capped, alice, "POST", "/v1/jobs", spec)[0])

    threads = [threading.Thread(target=submit) for _ in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(answers) == [201] * 2 + [409] * 8, answers
    assert unfinished(capped, "tq-alice") == QUEUE_CAP
    done = trainq_as(capped, alice, "submit", "--gpus", "1", "--", "true", cwd=shared_dir)
    assert done.returncode == ExitCode.CONFLICT, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr

    # The cap is hers alone: tq-bob queues and is served.
    status, answer = http_as(capped, bob, "POST", "/v1/jobs", [spec] * 3)
    assert status == 201, answer
    assert trainq_as(capped, bob, "ls").returncode == 0


MANY_FILES = """
import os, sys
base = sys.argv[1]
for d in range(20):
    where = os.path.join(base, f"d{d:02}")
    os.mkdir(where)
    first = os.path.join(where, "first")  # links are cheaper to make than files
    with open(first, "w"):
        pass
    for i in range(8000):
        os.link(first, os.path.join(where, str(i)))
"""


def ended_job(daemon: Daemon, user: User, cwd: Path) -> int:
    done = trainq_as(daemon, user, "submit", "--", "true", cwd=cwd)
    assert done.returncode == 0, done.stderr
    job = int(done.stdout)
    daemon.wait_state(job, "COMPLETED")
    return job


def test_a_huge_removal_delays_no_other_users_rm(
    workstation: Daemon, accounts: Accounts, shared_dir: Path
) -> None:
    """tq-alice fills her ended job's directory with 160,000 entries and removes it; tq-bob's
    `trainq rm` of his own job does not wait for her walk to end."""
    alice, bob = accounts.alice, accounts.bob
    hers, his = ended_job(workstation, alice, shared_dir), ended_job(workstation, bob, shared_dir)
    ml = workstation.state_dir / "jobs" / str(hers) / "ml"
    made = alice.run([SYSTEM_PYTHON, "-I", "-c", MANY_FILES, str(ml)], timeout=120)
    assert made.returncode == 0, made.stderr

    answers: dict[str, Any] = {}

    def remove_hers() -> None:
        answers["alice"] = http_as(workstation, alice, "DELETE", f"/v1/jobs/{hers}")

    theirs = threading.Thread(target=remove_hers)
    theirs.start()
    try:
        # Her walk is under way once its first directory is gone.
        wait_for(lambda: not (ml / "d00").exists(), timeout=30, interval=0.01)
        assert http_as(workstation, bob, "DELETE", f"/v1/jobs/{his}")[0] == 200
        assert "alice" not in answers, "tq-bob's rm waited for the end of tq-alice's"
    finally:
        theirs.join(timeout=120)
    status, removed = answers["alice"]
    assert status == 200, removed
    assert removed["files"] > 160_000


# Every attempt writes a `preempted` record in place of the monitor's and keeps the monitor
# from writing over it: a preemption's retry is free and immediate, so were it believed, the
# job would start again at once, without end.
FORGED_PREEMPTION = """
d="$SAGEMAKER_BASE_DIR/../attempts/$TRAINQ_ATTEMPT"
now=$(date +%s)
printf '{"job_id":%s,"attempt":%s,"outcome":"preempted","started_at":%s,"ended_at":%s}' \
  "$TRAINQ_JOB_ID" "$TRAINQ_ATTEMPT" "$now" "$now" > "$d/exit.json"
chmod 0555 "$d"
exit 0
"""


def test_a_job_cannot_claim_a_preemption_to_run_again_for_ever(
    workstation: Daemon, accounts: Accounts, shared_dir: Path
) -> None:
    alice, bob = accounts.alice, accounts.bob
    done = trainq_as(
        workstation, alice, "submit", "--", "/bin/sh", "-c", FORGED_PREEMPTION, cwd=shared_dir
    )
    assert done.returncode == 0, done.stderr
    job = int(done.stdout)
    record = workstation.wait_state(job, "COMPLETED", "FAILED", "STOPPED", timeout=20)
    assert record["state"] == "FAILED", record
    assert len(record["attempts"]) == 1, record["attempts"]
    assert record["preempted_count"] == 0
    assert trainq_as(workstation, bob, "health").returncode == 0


def test_another_users_sweep_cannot_be_stopped_or_read_through_its_group(
    workstation: Daemon, accounts: Accounts, shared_dir: Path
) -> None:
    """A group's id is its first job's: tq-bob names tq-alice's group, and his own lone job
    as a group. Nothing of hers stops, and her hyperparameter values stay hidden."""
    alice, bob = accounts.alice, accounts.bob
    start_sleeper(workstation, alice, shared_dir, "--gpus", "4")
    spec = {
        "command": ["true"],
        "gpus": 1,
        "working_dir": str(shared_dir),
        "hyperparameters": {"token": "SECRET-42"},
    }
    status, sweep = http_as(workstation, alice, "POST", "/v1/jobs", [spec] * 2)
    assert status == 201, sweep
    group = sweep["group_id"]
    status, answer = http_as(workstation, bob, "POST", f"/v1/groups/{group}/stop")
    assert (status, answer["error"]["code"]) == (403, "forbidden"), answer
    assert {workstation.job(j["id"])["state"] for j in sweep["jobs"]} == {"PENDING"}
    status, page = http_as(workstation, bob, "GET", f"/v1/jobs?group={group}")
    assert status == 200, page
    assert len(page["jobs"]) == 2
    assert "SECRET-42" not in json.dumps(page)
    done = trainq_as(workstation, bob, "ls", "--group", str(group), "--json")
    assert done.returncode == 0, done.stderr
    assert "SECRET-42" not in done.stdout
    lone = submit_as(workstation, bob, {"command": ["true"], "working_dir": str(shared_dir)})
    status, answer = http_as(workstation, bob, "POST", f"/v1/groups/{lone['id']}/stop")
    assert status == 404, answer
    # A sweep's list nested 100,000 deep is refused in one line, without a traceback.
    deep = workstation.post(
        "/v1/jobs", content=b"[" * 100_000, headers={"content-type": "application/json"}
    )
    assert deep.status_code == 400, deep.text
    assert "recursion limit" in deep.json()["error"]["message"]
    assert "Traceback" not in workstation.log_file.read_text()
