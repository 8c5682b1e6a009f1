"""Classes and preemption to checkpoint with a real trainqd (two simulated GPUs), real
trainers and the real `trainq` command: a high class's submission takes the GPUs of a
preemptible job, which saves a checkpoint, waits in the queue and resumes from it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daemon import Daemon, python_job, running_daemon
from tests.support.daemon import event_reasons as events
from tests.support.factories import PREEMPTION_CONFIG
from tests.support.waiting import wait_for


@pytest.fixture
def daemon() -> Iterator[Daemon]:
    with running_daemon(PREEMPTION_CONFIG, gpus="fake:2") as started:
        yield started


def refused(daemon: Daemon, *args: str) -> str:
    done = daemon.cli(*args)
    assert done.returncode != 0, done.stdout
    assert done.stderr.count("\n") == 1, done.stderr
    return done.stderr


def test_a_preempted_job_resumes_from_its_checkpoint(daemon: Daemon) -> None:
    low = daemon.submit(python_job("checkpoint_on_sigterm.py", gpus=2, name="long"))["id"]
    ready = Path(daemon.wait_state(low, "RUNNING")["job_dir"]) / "output" / "data" / "ready"
    wait_for(ready.exists, timeout=20, what="the trainer to be ready for SIGTERM")

    done = daemon.cli(
        "submit", "--class", "urgent", "--gpus", "1", "--max-runtime", "60", "--", "true"
    )
    assert done.returncode == 0, done.stderr
    high = int(done.stdout)
    assert daemon.wait_state(high)["state"] == "COMPLETED"

    # The victim went back to the queue with its attempt marked preempted, by whom, and
    # ran again, finding the checkpoint its first attempt saved on SIGTERM.
    job = daemon.wait_state(low, timeout=30)
    assert job["state"] == "COMPLETED"
    assert job["preempted_count"] == 1
    first, second = job["attempts"]
    assert first["outcome"] == "preempted"
    assert first["reason"].startswith(f"preempted by job {high} (root)")
    assert second["outcome"] == "exited"
    resumed = json.loads((Path(job["job_dir"]) / "model" / "resumed.json").read_text())
    assert resumed == {"step": 7, "saved_on": 1, "resumed_on": 2}

    shown = daemon.cli("show", str(low)).stdout
    assert f"preempted by job {high} (root)" in shown
    assert f"preempted by job {high} (root)" in events(daemon, low)
    metrics = daemon.get("/v1/metrics").text
    assert "trainq_preemptions_total 1.0" in metrics.splitlines()
    assert "trainq_attempts_retried_total 0.0" in metrics.splitlines()


def test_a_job_of_a_class_that_may_not_preempt_waits(daemon: Daemon) -> None:
    low = daemon.submit(python_job("checkpoint_on_sigterm.py", gpus=2))["id"]
    daemon.wait_state(low, "RUNNING")
    other = daemon.submit({"command": ["true"], "gpus": 1})["id"]  # batch: may not preempt
    listed = daemon.cli("ls").stdout
    assert "#1 waiting for 1 GPU (0 free)" in listed
    assert daemon.job(other)["place"] == 1
    assert daemon.job(low)["state"] == "RUNNING"
    assert daemon.job(low)["attempts"][0]["outcome"] is None


def test_unknown_and_forbidden_classes_are_refused_at_submit(daemon: Daemon) -> None:
    assert refused(daemon, "submit", "--class", "gold", "--", "true") == (
        "trainq: no class 'gold'; the classes are batch, staff, urgent\n"
    )
    assert refused(daemon, "submit", "--class", "urgent", "--", "true") == (
        "trainq: class 'urgent' runs jobs for at most 600 s: "
        "set max_runtime_seconds (--max-runtime) to 600 or less\n"
    )
    spec = daemon.base / "job.toml"
    spec.write_text('class = "nope"\ncommand = ["true"]\n')
    assert "no class 'nope'" in refused(daemon, "submit", "-f", str(spec))
    # root is an admin: a class restricted to others is still open to it.
    done = daemon.cli("submit", "--class", "staff", "--", "true")
    assert done.returncode == 0, done.stderr


def test_users_shows_usage_and_waiting_work(daemon: Daemon) -> None:
    job = daemon.submit({"command": ["true"], "gpus": 1})["id"]
    daemon.wait_state(job)
    body = daemon.get("/v1/users").json()
    assert body["half_life_days"] == 7
    (root,) = [u for u in body["users"] if u["user"] == "root"]
    assert root["gpu_hours"] > 0
    assert root["share"] == 1.0
    table = daemon.cli("users")
    assert table.returncode == 0, table.stderr
    assert "usage halved every 7 days" in table.stdout
    assert "root" in table.stdout


def test_the_usage_report_by_class_counts_each_class_once(daemon: Daemon) -> None:
    plain = daemon.submit({"command": ["sleep", "1"], "gpus": 1})
    urgent = daemon.submit(
        {"command": ["sleep", "1"], "gpus": 2, "class": "urgent", "max_runtime_seconds": 60}
    )
    for job in (plain, urgent):
        assert daemon.wait_state(job["id"])["state"] == "COMPLETED"
    done = daemon.cli("report", "--by", "class", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["by"] == "class"
    rows = {row["class"]: row for row in report["rows"]}
    assert set(rows) == {"batch", "urgent"}  # the job that named no class is the default's
    assert (rows["batch"]["jobs"], rows["urgent"]["jobs"]) == (1, 1)
    # Twice the GPUs for about as long: the urgent class used the more GPU-hours.
    assert rows["urgent"]["gpu_hours"] > rows["batch"]["gpu_hours"] > 0
    table = daemon.cli("report", "--by", "class")
    assert table.stdout.splitlines()[1].split()[:2] == ["CLASS", "JOBS"], table.stdout
    bad = daemon.cli("report", "--by", "gpu")
    assert bad.returncode == 2
    assert "choose from 'user', 'class'" in bad.stderr
