"""A job's owner can write its attempt directory. When trainqd could not record a monitor's
pid (a full disk), a later trainqd must find that monitor again, but never through a file
the owner wrote: a forged record naming another user's process, with its real start time and
the boot id (anyone can read both), would have trainqd watch that process and SIGTERM it on
`trainq stop`. The monitor's record lies beside the stop file, in trainqd's directory."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from pathlib import Path

import pytest

from tests.support.accounts import Accounts
from tests.support.daemon import Daemon
from tests.support.users import trainq_as
from tests.support.waiting import wait_for

pytestmark = pytest.mark.multiuser

_TRAINER = 'echo $$ > "$SM_MODEL_DIR/pid"; exec sleep 300'


def start_ticks(pid: int) -> int:
    """/proc/PID/stat's starttime (field 22), which any user can read of any process."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2 :].split()[19])


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def forget_monitor(daemon: Daemon, job_id: int) -> None:
    """What a full disk leaves: the attempt runs, but its monitor's pid is not recorded."""
    with sqlite3.connect(daemon.state_dir / "trainq.db") as db:
        db.execute(
            "UPDATE attempts SET monitor_pid = NULL, monitor_start = NULL, boot_id = NULL"
            " WHERE job_id = ?",
            (job_id,),
        )
    db.close()


def test_a_forged_monitor_record_makes_trainqd_signal_no_other_process(
    workstation: Daemon, accounts: Accounts, shared_dir: Path
) -> None:
    alice, bob = accounts.alice, accounts.bob
    done = trainq_as(
        workstation,
        alice,
        "submit",
        "--max-retries",
        "0",
        "--",
        "/bin/sh",
        "-c",
        _TRAINER,
        cwd=shared_dir,
    )
    assert done.returncode == 0, done.stderr
    job_id = int(done.stdout)
    workstation.wait_state(job_id, "RUNNING")
    job_dir = workstation.state_dir / "jobs" / str(job_id)
    pid_file = job_dir / "ml" / "model" / "pid"
    trainer = int(wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(),
                           timeout=15, what="alice's trainer"))  # fmt: skip

    victim = bob.popen(["sleep", "300"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        workstation.stop()  # the job runs on without trainqd
        forget_monitor(workstation, job_id)
        forged = json.dumps(
            {
                "monitor_pid": victim.pid,
                "monitor_start": start_ticks(victim.pid),
                "boot_id": Path("/proc/sys/kernel/random/boot_id").read_text().strip(),
            }
        )
        attempt_dir = job_dir / "attempts" / "1"
        wrote = alice.run(["sh", "-c", f"printf '%s' '{forged}' > {attempt_dir}/monitor.json"])
        assert wrote.returncode == 0, wrote.stderr  # her own directory
        # The record trainqd does trust is out of her reach.
        beside = alice.run(["sh", "-c", f"printf '%s' '{forged}' > {attempt_dir}.monitor"])
        assert beside.returncode != 0
        workstation.start()

        stopped = trainq_as(workstation, alice, "stop", str(job_id))
        assert stopped.returncode == 0, stopped.stderr
        ended = workstation.wait_state(job_id, "STOPPED", "FAILED", timeout=30)
        assert ended["attempts"][0]["ended_at"] is not None
        wait_for(lambda: not alive(trainer), timeout=15, what="alice's trainer to end")
        assert victim.poll() is None, "trainqd signalled bob's process"
        assert alive(victim.pid)

        served = trainq_as(workstation, bob, "ls", "--all", "--json")
        assert served.returncode == 0, served.stderr
        assert job_id in {j["id"] for j in json.loads(served.stdout)["jobs"]}
    finally:
        victim.kill()
        victim.wait()
        if alive(trainer):
            os.kill(trainer, 9)
