"""A trainer that checkpoints on SIGTERM, preempted and resumed under a real trainqd
(tests/e2e/test_preemption.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.daemon import Daemon, python_job
from tests.helpers import wait_for


def checkpointing_job(daemon: Daemon, gpus: int) -> int:
    """A job without a time limit, running, its trainer ready to checkpoint on SIGTERM."""
    job_id = int(
        daemon.submit(python_job("checkpoint_on_sigterm.py", gpus=gpus, name="long"))["id"]
    )
    ready = Path(daemon.wait_state(job_id, "RUNNING")["job_dir"]) / "output" / "data" / "ready"
    wait_for(ready.exists, timeout=20, what="the trainer to be ready for SIGTERM")
    return job_id


def resumed_from_checkpoint(daemon: Daemon, job_id: int, by: int) -> dict[str, Any]:
    """The job, once it has ended: preempted once by job `by`, queued again, and run to
    the end from the checkpoint its first attempt saved on SIGTERM."""
    job = daemon.wait_state(job_id, timeout=30)
    assert job["state"] == "COMPLETED"
    assert job["preempted_count"] == 1
    first, second = job["attempts"]
    assert first["outcome"] == "preempted"
    assert first["reason"].startswith(f"preempted by job {by} (root)")
    assert second["outcome"] == "exited"
    resumed = json.loads((Path(job["job_dir"]) / "model" / "resumed.json").read_text())
    assert resumed == {"step": 7, "saved_on": 1, "resumed_on": 2}
    return job
