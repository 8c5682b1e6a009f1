"""A job's owner can write its attempt directory, and so the records trainqd reads there:
an exit record with numbers that overflow, times from far in the future, a FIFO or a link in
its place. None of it may crash trainqd (now or at its next start) or break what it serves:
the attempt ends `lost`, with a reason that says the record was unreadable, and the other
users' jobs and requests go on."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.accounts import Accounts, User
from tests.support.daemon import Daemon, trainer
from tests.support.users import http_as, trainq_as
from tests.support.waiting import wait_for

pytestmark = pytest.mark.multiuser

# Attempt 1 puts its forgery in place of exit.json and makes the directory read-only, so
# the monitor cannot write the real record over it; attempt 2 (the retry of a lost
# attempt) completes.
_FORGE = """
d="$SAGEMAKER_BASE_DIR/../attempts/$TRAINQ_ATTEMPT"
[ "$TRAINQ_ATTEMPT" = 1 ] || exit 0
while [ -n "$WAIT_FOR" ] && [ ! -e "$WAIT_FOR" ]; do sleep 0.05; done
{forge}
chmod 0555 "$d"
exit 3
"""
_RECORD = (
    'printf \'{{"job_id":%s,"attempt":1,"outcome":"exited","started_at":1,%s}}\' '
    '"$TRAINQ_JOB_ID" \'{fields}\' > "$d/exit.json"'
)
FORGERIES = {
    "overflowing exit code": _RECORD.format(
        fields='"ended_at":2,"exit_code":99999999999999999999999'
    ),
    "ended_at 1e300": _RECORD.format(fields='"ended_at":1e300,"exit_code":0'),
    # An integer no float holds: comparing it as a time must not overflow.
    "ended_at of 400 digits": _RECORD.format(fields='"ended_at":1' + "0" * 400 + ',"exit_code":0'),
    "a FIFO": 'mkfifo "$d/exit.json"',
    "a symlink": 'ln -s /etc/shadow "$d/exit.json"',
}


def submit(
    daemon: Daemon, user: User, cwd: Path, *command: str, env: dict[str, str] | None = None
) -> int:
    extra = [f"--env={k}={v}" for k, v in (env or {}).items()]
    done = trainq_as(daemon, user, "submit", "--gpus", "1", *extra, "--", *command, cwd=cwd)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.strip())


def bobs_sleeper(daemon: Daemon, accounts: Accounts, cwd: Path) -> int:
    job_id = submit(daemon, accounts.bob, cwd, sys.executable, trainer("sleeper.py"))
    daemon.wait_state(job_id, "RUNNING")
    return job_id


def still_serving(daemon: Daemon, accounts: Accounts, bobs_job: int) -> None:
    """trainqd is alive, lists every job to anyone, and bob's job runs on."""
    assert daemon.proc is not None
    assert daemon.proc.poll() is None, daemon.log()
    status, listed = http_as(daemon, accounts.bob, "GET", "/v1/jobs?all=true")
    assert status == 200, listed
    done = trainq_as(daemon, accounts.bob, "ls", "--json")
    assert done.returncode == 0, done.stderr
    states = {j["id"]: j["state"] for j in json.loads(done.stdout)["jobs"]}
    assert states[bobs_job] == "RUNNING"


def first_attempt(daemon: Daemon, job_id: int) -> dict[str, Any]:
    job = daemon.wait_state(job_id, "COMPLETED", "FAILED", timeout=30)
    attempt: dict[str, Any] = job["attempts"][0]
    return attempt


@pytest.mark.parametrize("forgery", sorted(FORGERIES))
def test_a_forged_exit_record_ends_the_attempt_as_lost(
    workstation: Daemon, accounts: Accounts, shared_dir: Path, forgery: str
) -> None:
    bobs_job = bobs_sleeper(workstation, accounts, shared_dir)
    script = _FORGE.format(forge=FORGERIES[forgery])
    job_id = submit(workstation, accounts.alice, shared_dir, "/bin/sh", "-c", script)

    attempt = first_attempt(workstation, job_id)
    assert attempt["outcome"] == "lost", attempt
    assert "exit record was unreadable" in attempt["reason"], attempt
    assert workstation.job(job_id)["state"] == "COMPLETED"  # attempt 2 ran and completed
    still_serving(workstation, accounts, bobs_job)

    workstation.restart()
    still_serving(workstation, accounts, bobs_job)


def test_a_forged_exit_record_found_at_start_is_not_trusted(
    workstation: Daemon, accounts: Accounts, shared_dir: Path
) -> None:
    """The record is forged while no trainqd runs: the next one's reconciliation reads it."""
    bobs_job = bobs_sleeper(workstation, accounts, shared_dir)
    go = shared_dir / "go"
    script = _FORGE.format(forge=FORGERIES["overflowing exit code"])
    job_id = submit(
        workstation, accounts.alice, shared_dir, "/bin/sh", "-c", script, env={"WAIT_FOR": str(go)}
    )
    workstation.wait_state(job_id, "RUNNING")
    workstation.stop()
    go.touch()
    monitor_log = workstation.state_dir / "jobs" / str(job_id) / "attempts" / "1" / "monitor.log"
    wait_for(
        lambda: "exit record" in monitor_log.read_text(),
        timeout=20,
        what="the monitor to fail to write its record",
    )

    workstation.start()
    attempt = first_attempt(workstation, job_id)
    assert attempt["outcome"] == "lost", attempt
    assert "exit record was unreadable" in attempt["reason"], attempt
    still_serving(workstation, accounts, bobs_job)
    workstation.restart()
    still_serving(workstation, accounts, bobs_job)
