"""`trainq report` against the jobs a real trainqd ran."""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime

import pytest

from tests.support.daemon import Daemon, python_job
from tests.support.watching import watched_daemon, write_readings

IDLE = {"utilization": 0, "memory_used_mib": 10}
BUSY = {"utilization": 95, "memory_used_mib": 1000}


def _seconds(attempt: dict[str, str]) -> float:
    started = datetime.fromisoformat(attempt["started_at"])
    ended = datetime.fromisoformat(attempt["ended_at"])
    return (ended - started).total_seconds()


def test_report_matches_the_jobs_run() -> None:
    with watched_daemon([IDLE, IDLE], idle_after_seconds=0.2) as (daemon, gpus_file):
        ok = daemon.submit({"command": ["sleep", "0.5"], "gpus": 2})
        failed = daemon.submit(python_job("exit_with.py", "3", gpus=1))
        cpu = daemon.submit({"command": ["true"]})
        for job in (ok, failed, cpu):
            daemon.wait_state(job["id"])
        write_readings(gpus_file, [BUSY, BUSY])
        stopped = daemon.submit(python_job("sleeper.py", gpus=1))
        daemon.wait_state(stopped["id"], "RUNNING")
        daemon.cli("stop", "--grace", "0", str(stopped["id"]))
        daemon.wait_state(stopped["id"])

        jobs = [daemon.job(j["id"]) for j in (ok, failed, cpu, stopped)]
        gpu_hours = sum(_seconds(a) * len(a["gpus"]) for j in jobs for a in j["attempts"]) / 3600
        idle_hours = (
            sum((a["gpu_idle_seconds"] or 0) * len(a["gpus"]) for j in jobs for a in j["attempts"])
            / 3600
        )
        assert idle_hours > 0  # the first job's GPUs sat idle while it slept

        result = daemon.cli("report", "--since", "1h", "--json")
        assert result.returncode == 0, result.stderr
        report = json.loads(result.stdout)
        [row] = report["rows"]
        user = ok["owner"]["user"]
        assert row["user"] == user
        assert (row["jobs"], row["completed"], row["failed"], row["stopped"]) == (4, 2, 1, 1)
        assert row["gpu_hours"] == pytest.approx(gpu_hours, abs=1e-4)
        assert row["idle_gpu_hours"] == pytest.approx(idle_hours, abs=1e-4)

        result = daemon.cli("report", "--csv")
        assert result.returncode == 0, result.stderr
        [parsed] = list(csv.DictReader(io.StringIO(result.stdout)))
        assert parsed["user"] == user
        assert (parsed["jobs"], parsed["failed"]) == ("4", "1")

        table = daemon.cli("report")
        assert table.returncode == 0, table.stderr
        assert "GPU-H" in table.stdout
        assert user in table.stdout


def test_report_refuses_a_bad_period_with_one_line(shared_daemon: Daemon) -> None:
    result = shared_daemon.cli("report", "--since", "yesterday")
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0
    assert "30d" in result.stderr
    assert shared_daemon.cli("health").returncode == 0
