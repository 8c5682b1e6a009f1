"""Pausing a running job (`trainq hold` of it) as Slurm's `scontrol requeuehold`: SIGTERM,
its grace, back to PENDING and held, its GPUs freed, its checkpoints kept; `trainq release`
resumes it from its checkpoint as the next attempt, no retry spent."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.support.daemon import Daemon, python_job
from tests.support.daemon import event_reasons as events
from tests.support.waiting import wait_for


def running_checkpointer(daemon: Daemon, **spec: object) -> tuple[int, Path]:
    job = daemon.submit(python_job("checkpoint_on_sigterm.py", gpus=4, max_retries=0, **spec))
    job_dir = Path(daemon.wait_state(job["id"], "RUNNING")["job_dir"])
    ready = job_dir / "output" / "data" / "ready"
    wait_for(ready.exists, timeout=20, what="the trainer to be ready for SIGTERM")
    return job["id"], job_dir


def test_hold_pauses_a_running_job_and_release_resumes_it(daemon: Daemon) -> None:
    job_id, job_dir = running_checkpointer(daemon)
    held = daemon.cli("hold", str(job_id))
    assert held.returncode == 0, held.stderr
    assert held.stdout == f"{job_id} pausing: paused by root; `trainq release` resumes it\n"

    paused = daemon.wait_state(job_id, "PENDING")
    assert paused["held_by"] == "root"
    assert paused["pending_reason"] == (
        "paused by root; `trainq release` resumes it from its checkpoints"
    )
    assert paused["attempts"][0]["outcome"] == "preempted"
    assert (job_dir / "checkpoints" / "state.json").exists()
    listing = daemon.cli("ls", "--wide")
    assert "paused by root" in listing.stdout, listing.stdout
    # Its GPUs are free: another job takes all four meanwhile.
    other = daemon.submit(python_job("exit_with.py", "0", gpus=4))
    assert daemon.wait_state(other["id"])["state"] == "COMPLETED"
    assert daemon.job(job_id)["state"] == "PENDING"

    released = daemon.cli("release", str(job_id))
    assert released.returncode == 0, released.stderr
    done = daemon.wait_state(job_id)
    assert done["state"] == "COMPLETED"  # max_retries = 0: the pause spent none
    assert [a["number"] for a in done["attempts"]] == [1, 2]
    resumed = json.loads((job_dir / "model" / "resumed.json").read_text())
    assert resumed == {"step": 7, "saved_on": 1, "resumed_on": 2}
    assert "paused by root" in events(daemon, job_id)


# Deaf to SIGTERM: a pause takes its whole grace.
STUBBORN = """
import os, signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
open(os.path.join(os.environ["SAGEMAKER_BASE_DIR"], "output", "data", "ready"), "w").close()
time.sleep(600)
"""


def test_a_stop_while_pausing_stops_it(daemon: Daemon) -> None:
    job = daemon.submit({"command": [sys.executable, "-c", STUBBORN], "stop_grace_seconds": 60.0})
    ready = Path(daemon.wait_state(job["id"], "RUNNING")["job_dir"]) / "output" / "data" / "ready"
    wait_for(ready.exists, timeout=20, what="the trainer to ignore SIGTERM")
    assert daemon.cli("hold", str(job["id"])).returncode == 0
    assert daemon.job(job["id"])["state"] == "STOPPING"
    assert daemon.cli("stop", "--grace", "0", str(job["id"])).returncode == 0
    ended = daemon.wait_state(job["id"])
    assert (ended["state"], ended["stop_reason"]) == ("STOPPED", "stopped by root")
    assert ended["held_by"] is None


def test_a_job_that_has_ended_cannot_be_held(daemon: Daemon) -> None:
    job = daemon.submit(python_job("exit_with.py", "0"))
    daemon.wait_state(job["id"])
    refused = daemon.cli("hold", str(job["id"]))
    assert refused.returncode != 0
    assert refused.stderr == (
        f"trainq: job {job['id']} is COMPLETED; only a pending or running job can be held\n"
    )
