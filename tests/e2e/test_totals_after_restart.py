"""What trainqd counts survives it: the `/v1/metrics` counters (submissions, ends, retries,
preemptions) start from the store's totals after a `kill -9` and a restart, removed jobs
included, and `ls` counts a preempted job's running time only, not its time back in the
queue."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.daemon import Daemon, python_job, running_daemon
from tests.support.factories import PREEMPTION_CONFIG
from tests.support.waiting import wait_for
from trainq.humanize import format_duration, parse_time

COUNTERS = (
    "trainq_jobs_submitted_total",
    "trainq_jobs_ended_total",
    "trainq_attempts_retried_total",
    "trainq_preemptions_total",
)


@pytest.fixture
def daemon() -> Iterator[Daemon]:
    with running_daemon(PREEMPTION_CONFIG, gpus="fake:2") as started:
        yield started


def counters(daemon: Daemon) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = daemon.get("/v1/metrics")
    assert response.status_code == 200, response.text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
        if sample.name in COUNTERS
    }


def ran(job: dict[str, object]) -> float:
    attempts = job["attempts"]
    assert isinstance(attempts, list)
    total = 0.0
    for attempt in attempts:
        started, ended = parse_time(attempt["started_at"]), parse_time(attempt["ended_at"])
        assert started is not None
        assert ended is not None
        total += (ended - started).total_seconds()
    return total


def test_counters_and_runtimes_survive_a_kill(daemon: Daemon) -> None:
    low = daemon.submit(python_job("checkpoint_on_sigterm.py", gpus=2, name="long"))["id"]
    ready = Path(daemon.wait_state(low, "RUNNING")["job_dir"]) / "output" / "data" / "ready"
    wait_for(ready.exists, timeout=20, what="the trainer to be ready for SIGTERM")
    # The preemptor runs a while, so the victim spends that while back in the queue.
    high = daemon.cli(
        "submit", "--class", "urgent", "--gpus", "1", "--max-runtime", "60", "--", "sleep", "2"
    )
    assert high.returncode == 0, high.stderr
    retried = daemon.submit(
        python_job("exit_with.py", "3", retry_exit_codes=[3], max_retries=1)
        | {"retry_backoff_seconds": 0.0}
    )["id"]
    removed = daemon.submit({"command": ["true"]})["id"]
    for job_id in (int(high.stdout), retried, removed):
        daemon.wait_state(job_id, timeout=30)
    victim = daemon.wait_state(low, timeout=30)
    assert victim["state"] == "COMPLETED"
    assert [a["outcome"] for a in victim["attempts"]] == ["preempted", "exited"]
    assert daemon.cli("rm", str(removed)).returncode == 0

    before = counters(daemon)
    assert before["trainq_jobs_submitted_total", (("user", "root"),)] == 4
    assert before["trainq_preemptions_total", ()] == 1
    assert before["trainq_attempts_retried_total", ()] == 1
    assert before["trainq_jobs_ended_total", (("state", "COMPLETED"),)] == 3
    assert before["trainq_jobs_ended_total", (("state", "FAILED"),)] == 1

    daemon.kill()
    daemon.start()
    assert counters(daemon) == before
    # Counting goes on from there.
    assert daemon.wait_state(daemon.submit({"command": ["true"]})["id"])["state"] == "COMPLETED"
    after = counters(daemon)
    assert after["trainq_jobs_submitted_total", (("user", "root"),)] == 5
    assert after["trainq_jobs_ended_total", (("state", "COMPLETED"),)] == 4

    # RUNTIME is the attempts' running time, not the span from the first start to the end.
    listed = json.loads(daemon.cli("ls", "--all", "--json").stdout)["jobs"]
    record = next(job for job in listed if job["id"] == low)
    table = daemon.cli("ls", "--all").stdout.splitlines()
    row = next(line.split() for line in table if line.split()[:1] == [str(low)])
    assert format_duration(ran(record)) in row
    span = parse_time(record["ended_at"]) - parse_time(record["started_at"])  # type: ignore[operator]
    assert format_duration(span.total_seconds()) not in row
