"""Scheduling with real processes: priority order, and never one GPU to two running jobs."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from tests.support.daemon import Daemon, python_job


def ledger_entries(path: Path) -> list[dict[str, Any]]:
    """gpu_ledger.py's lines: {"job": id, "gpus": "0,1", "start": t, "end": t}."""
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_no_gpu_overlap_under_contention(daemon: Daemon, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    ids = [
        daemon.submit(python_job("gpu_ledger.py", str(ledger), "0.3", gpus=gpus))["id"]
        for gpus in (2, 1, 3, 2, 1, 4, 1, 2)
    ]
    for job_id in ids:
        assert daemon.wait_state(job_id, timeout=60)["state"] == "COMPLETED"
    entries = ledger_entries(ledger)
    assert sorted(e["job"] for e in entries) == sorted(ids)
    for a, b in itertools.combinations(entries, 2):
        overlap_in_time = a["start"] < b["end"] and b["start"] < a["end"]
        shared = set(str(a["gpus"]).split(",")) & set(str(b["gpus"]).split(","))
        assert not (overlap_in_time and shared), (a, b)
    # Every job saw exactly the GPUs its record says it got.
    for entry in entries:
        job = daemon.job(int(entry["job"]))
        assert sorted(map(int, str(entry["gpus"]).split(","))) == sorted(job["attempts"][0]["gpus"])


def test_priority_then_submit_order(daemon: Daemon, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    # Hold all four GPUs so the rest queue up (for as long as submitting them takes), then
    # release them.
    release = tmp_path / "release"
    blocker = daemon.submit(python_job("until_released.py", str(release), gpus=4))["id"]
    daemon.wait_state(blocker, "RUNNING")
    queued = [
        (
            prio,
            daemon.submit(python_job("gpu_ledger.py", str(ledger), "0.05", gpus=4, priority=prio))[
                "id"
            ],
        )
        for prio in (0, 5, 0, 10, 5)
    ]
    pending = daemon.job(queued[0][1])
    assert pending["state"] == "PENDING"
    assert "4 GPUs" in pending["pending_reason"]
    release.touch()
    assert daemon.wait_state(blocker)["state"] == "COMPLETED"
    for _, job_id in queued:
        daemon.wait_state(job_id, timeout=60)
    started = [e["job"] for e in sorted(ledger_entries(ledger), key=lambda e: e["start"])]
    expected = [j for _, j in sorted(queued, key=lambda pj: (-pj[0], pj[1]))]
    assert started == expected


def test_cpu_jobs_do_not_wait_for_gpus(daemon: Daemon, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    big = daemon.submit(python_job("sleeper.py", gpus=4))["id"]
    daemon.wait_state(big, "RUNNING")
    waiting = daemon.submit(python_job("gpu_ledger.py", str(ledger), "0", gpus=1))["id"]
    cpu = daemon.submit({"command": ["true"]})["id"]
    assert daemon.wait_state(cpu)["state"] == "COMPLETED"
    assert daemon.job(waiting)["state"] == "PENDING"
    daemon.post(f"/v1/jobs/{big}/stop", json={"grace_seconds": 0})
    assert daemon.wait_state(waiting)["state"] == "COMPLETED"
