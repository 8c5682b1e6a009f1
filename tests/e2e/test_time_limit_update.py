"""A running job's time limit changed with `trainq update --max-runtime`, and a job its time
limit ended shown as TIMEOUT, with a real trainqd, real monitors and the real `trainq`."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.support.daemon import Daemon, python_job, running_daemon
from tests.support.daemon import event_reasons as events
from tests.support.waiting import wait_for
from trainq.core.errors import ExitCode


def monitor_log(job: dict[str, object]) -> str:
    path = Path(str(job["job_dir"])).parent / "attempts" / "1" / "monitor.log"
    return path.read_text() if path.exists() else ""


def test_a_shortened_time_limit_ends_the_running_job_as_timeout(daemon: Daemon) -> None:
    job_id = daemon.submit(python_job("sleeper.py", max_runtime_seconds=3600))["id"]
    daemon.wait_state(job_id, "RUNNING")
    done = daemon.cli("update", str(job_id), "--max-runtime", "1")
    assert (done.returncode, done.stdout) == (0, f"{job_id} updated: max_runtime_seconds=1\n")
    # The monitor learned the new deadline: the job ends long before its old limit.
    ended = daemon.wait_state(job_id, timeout=30)
    assert (ended["state"], ended["timed_out"]) == ("STOPPED", True)
    assert ended["stop_reason"] == "time limit of 1 s reached"
    assert ended["attempts"][0]["outcome"] == "timed_out"
    assert "time limit changed" in monitor_log(ended)
    assert "updated by root: max runtime 3600 -> 1" in events(daemon, job_id)
    # TIMEOUT wherever the job is shown, and `wait` says so in its exit status.
    waited = daemon.cli("wait", str(job_id))
    assert waited.returncode == ExitCode.TIMEOUT == 9
    assert waited.stderr == f"trainq: job {job_id} TIMEOUT: time limit of 1 s reached\n"
    listed = daemon.cli("ls", "--all").stdout.splitlines()
    assert any(line.split()[:3] == [str(job_id), ended["name"], "TIMEOUT"] for line in listed)
    shown = daemon.cli("show", str(job_id)).stdout
    assert any(line.split() == ["state", "TIMEOUT"] for line in shown.splitlines()), shown
    # A stop by a user is no timeout.
    stopped = daemon.submit(python_job("sleeper.py"))["id"]
    daemon.wait_state(stopped, "RUNNING")
    daemon.cli("stop", "--grace", "0", str(stopped))
    assert daemon.wait_state(stopped)["timed_out"] is False
    assert daemon.cli("wait", str(stopped)).returncode == ExitCode.STOPPED


def test_an_extended_time_limit_lets_the_job_run_past_its_old_deadline(
    daemon: Daemon, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    job = daemon.submit(python_job("until_released.py", str(release), max_runtime_seconds=4))
    job_id = job["id"]
    daemon.wait_state(job_id, "RUNNING")
    old_deadline = time.time() + 4
    assert daemon.cli("update", str(job_id), "--max-runtime", "1h").returncode == 0
    assert daemon.job(job_id)["spec"]["max_runtime_seconds"] == 3600
    wait_for(lambda: "time limit changed" in monitor_log(job), what="the monitor to hear of it")
    # Well past the old limit, the job still runs; released, it completes.
    wait_for(lambda: time.time() > old_deadline + 2, timeout=15, what="the old deadline to pass")
    assert daemon.job(job_id)["state"] == "RUNNING"
    release.touch()
    done = daemon.wait_state(job_id)
    assert (done["state"], done["timed_out"]) == ("COMPLETED", False)


def test_the_new_limit_outlives_a_restart_of_trainqd(daemon: Daemon) -> None:
    job_id = daemon.submit(python_job("sleeper.py", max_runtime_seconds=3600))["id"]
    daemon.wait_state(job_id, "RUNNING")
    daemon.stop()
    daemon.start()
    assert daemon.cli("update", str(job_id), "--max-runtime", "2").returncode == 0
    assert daemon.wait_state(job_id, timeout=30)["timed_out"] is True


CLASSES = """
[classes.default]
max_runtime_seconds = 600
"""


def test_a_running_jobs_other_keys_and_the_class_maximum_are_refused_in_one_line() -> None:
    with running_daemon(CLASSES, gpus="fake:1") as daemon:
        job_id = daemon.submit(python_job("sleeper.py", max_runtime_seconds=60))["id"]
        daemon.wait_state(job_id, "RUNNING")
        done = daemon.cli("update", str(job_id), "--priority", "3")
        assert (done.returncode, done.stderr) == (
            ExitCode.CONFLICT,
            f"trainq: job {job_id} is RUNNING; only its max_runtime_seconds can change now\n",
        )
        with daemon.client() as client:
            answer = client.patch(f"/v1/jobs/{job_id}", json={"max_runtime_seconds": 0})
        assert answer.status_code == 400
        # root is an admin: beyond the class's maximum is allowed (the owner's case, with
        # real users, is in tests/multiuser/test_time_limit_authorization.py).
        assert daemon.cli("update", str(job_id), "--max-runtime", "2h").returncode == 0
        record = daemon.job(job_id)
        assert (record["state"], record["spec"]["max_runtime_seconds"]) == ("RUNNING", 7200)
        daemon.cli("stop", "--grace", "0", str(job_id))
        ended = daemon.wait_state(job_id)
        done = daemon.cli("update", str(job_id), "--max-runtime", "10")
        assert done.returncode == ExitCode.CONFLICT
        assert ended["state"] == "STOPPED"
        assert json.loads(daemon.cli("show", "--json", str(job_id)).stdout)["timed_out"] is False
