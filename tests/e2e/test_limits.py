"""Time limits and stop grace through the daemon (issue: supervision, items 1 and 2)."""

from __future__ import annotations

from pathlib import Path

from tests.support.daemon import Daemon, pids_alive, python_job
from tests.support.waiting import wait_for


def test_time_limit_stops_the_job(daemon: Daemon) -> None:
    job = daemon.submit(
        python_job("sleeper.py", gpus=1, max_runtime_seconds=1, stop_grace_seconds=5)
    )
    done = daemon.wait_state(job["id"], timeout=15)
    assert done["state"] == "STOPPED"
    assert done["stop_reason"] == "time limit of 1 s reached"
    assert done["attempts"][0]["outcome"] == "timed_out"
    # The trainer got SIGTERM and its grace: it checkpointed.
    assert (Path(done["job_dir"]) / "checkpoints" / "on-sigterm").exists()
    assert daemon.cli("wait", str(job["id"])).returncode == 9  # TIMEOUT


def test_stop_kills_a_tree_that_ignores_sigterm(daemon: Daemon) -> None:
    job = daemon.submit(
        python_job(
            "monitor_tree.py",
            "--trainer-ignores-term",
            "--children-ignore-term",
            stop_grace_seconds=0.5,
        )
    )
    tree_file = Path(job["job_dir"]) / "output" / "data" / "tree"
    wait_for(
        lambda: tree_file.exists() and tree_file.read_text().strip(),
        what="the process tree to start",
    )
    pids = [int(p) for p in tree_file.read_text().split()]
    assert len(pids_alive(pids)) == 4
    assert daemon.cli("stop", str(job["id"])).returncode == 0
    done = daemon.wait_state(job["id"])
    assert done["state"] == "STOPPED"
    wait_for(lambda: not pids_alive(pids), timeout=5, what="every process of the job to die")


def test_stop_grace_override(daemon: Daemon) -> None:
    job = daemon.submit(python_job("sleeper.py", "--ignore-sigterm", stop_grace_seconds=60))
    pid_file = Path(job["job_dir"]) / "output" / "data" / "pid"
    wait_for(pid_file.exists, what="the trainer to start")
    daemon.cli("stop", str(job["id"]))  # a 60 s grace...
    assert daemon.job(job["id"])["state"] == "STOPPING"
    assert daemon.cli("stop", "--grace", "0", str(job["id"])).returncode == 0  # ...cut short
    done = daemon.wait_state(job["id"], timeout=10)
    assert done["state"] == "STOPPED"
    assert done["attempts"][0]["signal_name"] == "SIGKILL"


def test_leftovers_of_a_finished_trainer_are_killed(daemon: Daemon) -> None:
    job = daemon.submit(python_job("monitor_tree.py", "--exit"))
    done = daemon.wait_state(job["id"])
    assert done["state"] == "COMPLETED"
    tree = Path(done["job_dir"]) / "output" / "data" / "tree"
    pids = [int(p) for p in tree.read_text().split()]
    wait_for(lambda: not pids_alive(pids), timeout=5, what="the leftovers to die")
