"""Idempotent submits: a submission sent with a client token (`Idempotency-Key`) is queued
once, whatever happens to its answer. The token is stored with the jobs, so a repeat after
trainqd was killed and restarted gets the same jobs in the same answer, and `trainq submit`
sends its request again by itself when trainqd went away before answering."""

from __future__ import annotations

import signal
import subprocess
from typing import Any

from tests.support.daemon import TRAINQ, Daemon
from tests.support.waiting import wait_for
from trainq import Client


def post(daemon: Daemon, body: Any, token: str) -> tuple[int, Any]:
    response = daemon.post("/v1/jobs", json=body, headers={"Idempotency-Key": token})
    return response.status_code, response.json()


def total_jobs(daemon: Daemon) -> int:
    answer = daemon.get("/v1/jobs", params={"all": "true"})
    assert answer.status_code == 200, answer.text
    total: int = answer.json()["total"]
    return total


def test_a_token_queues_once_across_a_kill_and_a_restart(daemon: Daemon) -> None:
    one = {"command": ["sleep", "600"], "gpus": 4}
    sweep = [{"command": ["true"], "hyperparameters": {"lr": str(lr)}} for lr in (1, 2, 3)]
    status, job = post(daemon, one, "run-1")
    assert status == 201
    status, group = post(daemon, sweep, "sweep-1")
    assert status == 201
    ids = [j["id"] for j in group["jobs"]]
    assert total_jobs(daemon) == 4

    daemon.kill()  # as a crash after the commit whose answer never left
    daemon.start()

    status, again = post(daemon, one, "run-1")
    assert (status, again["id"], again["spec"]) == (201, job["id"], job["spec"])
    status, group_again = post(daemon, sweep, "sweep-1")
    assert status == 201
    assert group_again["group_id"] == group["group_id"]
    assert [j["id"] for j in group_again["jobs"]] == ids
    assert total_jobs(daemon) == 4  # nothing queued twice

    # The same token with another request is a mistake, said in one line; a bad token too.
    status, refused = post(daemon, {**one, "gpus": 1}, "run-1")
    assert status == 409
    assert "used for another request" in refused["error"]["message"]
    status, refused = post(daemon, one, "a token with spaces")
    assert status == 400
    assert "Idempotency-Key" in refused["error"]["message"]
    # Without a token, or with a new one, a submission is new.
    status, other = post(daemon, one, "run-2")
    assert status == 201
    assert other["id"] not in (job["id"], *ids)
    assert total_jobs(daemon) == 5


def test_the_cli_token_returns_the_same_job(daemon: Daemon) -> None:
    first = daemon.cli("submit", "--token", "cli-1", "--", "true")
    assert first.returncode == 0, first.stderr
    daemon.kill()
    daemon.start()
    again = daemon.cli("submit", "--token", "cli-1", "--", "true")
    assert again.returncode == 0, again.stderr
    assert again.stdout == first.stdout
    assert total_jobs(daemon) == 1
    bad = daemon.cli("submit", "--token", "no/slash", "--", "true")
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1
    assert "Idempotency-Key" in bad.stderr
    # Once its job is removed, the token answers with one line, not with a new job.
    job_id = first.stdout.strip()
    daemon.wait_state(int(job_id))
    assert daemon.cli("rm", job_id).returncode == 0
    gone = daemon.cli("submit", "--token", "cli-1", "--", "true")
    assert gone.returncode == 6
    assert (
        gone.stderr == f"trainq: Idempotency-Key 'cli-1' queued job {job_id}, removed since; "
        "a new submission needs a new key\n"
    )
    assert total_jobs(daemon) == 0


def pending_connections(daemon: Daemon) -> int:
    """Connections waiting in the listening socket's backlog (ss's Recv-Q)."""
    listing = subprocess.run(
        ["ss", "-xlnH", "src", str(daemon.socket)], capture_output=True, text=True, check=True
    )
    fields = listing.stdout.split()
    return int(fields[2]) if len(fields) > 2 else 0


def test_submit_resends_when_trainqd_dies_before_answering(daemon: Daemon) -> None:
    assert daemon.proc is not None
    daemon.proc.send_signal(signal.SIGSTOP)  # it takes the request and never answers
    submit = subprocess.Popen(
        [TRAINQ, "--socket", str(daemon.socket), "submit", "--", "true"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=daemon.env,
    )
    try:
        wait_for(lambda: pending_connections(daemon) >= 1, what="the submission to be sent")
        daemon.kill()
        daemon.start()
        out, err = submit.communicate(timeout=60)
    finally:
        if submit.poll() is None:
            submit.kill()
    assert submit.returncode == 0, err
    job_id = int(out)
    assert daemon.job(job_id)["spec"]["command"] == ["true"]
    assert total_jobs(daemon) == 1
    # trainqd serves on.
    assert daemon.wait_state(job_id)["state"] == "COMPLETED"


def test_the_python_client_token(daemon: Daemon) -> None:
    client = Client(daemon.socket)
    job = client.submit({"command": ["true"]}, client_token="py-1")
    assert client.submit({"command": ["true"]}, client_token="py-1").id == job.id
    specs = [{"command": ["true"], "name": f"p-{n}"} for n in range(3)]
    group = client.submit_many(specs, client_token="py-2")
    again = client.submit_many(specs, client_token="py-2")
    assert [j.id for j in again.jobs] == [j.id for j in group.jobs]
    assert total_jobs(daemon) == 4
