"""`trainq logs`: an attempt's stdout and stderr, and `-f` following them as they are written,
across retries, to the end of the job."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.daemon import TRAINQ, Daemon, python_job
from tests.support.waiting import wait_for

TALKER = """
import os, sys, time
print("first line", flush=True)
print("an error line", file=sys.stderr, flush=True)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.01)
print("last line", flush=True)
"""


def test_logs_select_their_stream(daemon: Daemon) -> None:
    job = daemon.submit(python_job("exit_with.py", "0"))
    daemon.wait_state(job["id"])
    both = daemon.cli("logs", str(job["id"]))
    assert both.returncode == 0
    assert "stdout line from a trainer exiting 0" in both.stdout
    assert "stderr line 2" in both.stdout
    out = daemon.cli("logs", "--stdout", str(job["id"])).stdout
    assert "stdout line" in out
    assert "stderr line" not in out
    err = daemon.cli("logs", "--stderr", str(job["id"])).stdout
    assert err == "stderr line 0\nstderr line 1\nstderr line 2\n"


def follow(daemon: Daemon, job_id: int, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [TRAINQ, "--socket", str(daemon.socket), "logs", "-f", *args, str(job_id)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_follow_streams_as_written_and_ends_with_the_job(daemon: Daemon, tmp_path: Path) -> None:
    release = tmp_path / "release"
    job = daemon.submit({"command": [sys.executable, "-c", TALKER, str(release)]})
    with follow(daemon, job["id"], "--stdout") as follower:
        assert follower.stdout is not None
        # The first line arrives while the trainer still runs.
        assert follower.stdout.readline() == "first line\n"
        assert follower.poll() is None
        release.touch()
        assert follower.stdout.readline() == "last line\n"
        assert follower.wait(timeout=15) == 0  # the job ended: so does the stream
    assert daemon.job(job["id"])["state"] == "COMPLETED"


CRASH_ONCE = """
import os, sys, time
if os.environ["TRAINQ_ATTEMPT"] == "1":
    print("attempt 1 running", flush=True)
    while not os.path.exists(sys.argv[1]):
        time.sleep(0.01)
    print("attempt 1 crashing", flush=True)
    sys.exit(134)
print("attempt 2 resumed", flush=True)
"""


def test_follow_goes_on_into_a_retry(daemon: Daemon, tmp_path: Path) -> None:
    release = tmp_path / "release"
    job = daemon.submit(
        {
            "command": [sys.executable, "-c", CRASH_ONCE, str(release)],
            "retry_backoff_seconds": 0,
        }
    )
    with follow(daemon, job["id"]) as follower:
        assert follower.stdout is not None
        assert follower.stdout.readline() == "attempt 1 running\n"
        release.touch()
        rest = follower.stdout.read()
        assert follower.wait(timeout=15) == 0
    assert rest.splitlines() == [
        "attempt 1 crashing", "==> attempt 2 <==", "attempt 2 resumed"
    ]  # fmt: skip
    first_only = daemon.cli("logs", "--attempt", "1", str(job["id"])).stdout
    assert first_only == "attempt 1 running\nattempt 1 crashing\n"


def test_logs_of_a_job_that_has_not_run(daemon: Daemon) -> None:
    blocker = daemon.submit(python_job("sleeper.py", gpus=4))["id"]
    daemon.wait_state(blocker, "RUNNING")
    waiting = daemon.submit({"command": ["true"], "gpus": 1})["id"]
    shown = daemon.cli("logs", str(waiting))
    assert (shown.returncode, shown.stdout) == (0, "")
    daemon.cli("stop", "--grace", "0", str(blocker))
    wait_for(lambda: daemon.job(waiting)["state"] == "COMPLETED", what="the waiting job")
