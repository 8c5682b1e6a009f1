"""Under trainqd's Slurm back end (Slurm's commands the stand-ins of test_slurm_attacks.py,
whose squeue says every job it is asked about runs): a job waiting for another is not handed
to Slurm while its dependency has not succeeded, and a running job's time limit, Slurm's
now, is not changed behind Slurm's back (one line, trainqd serving on)."""

from __future__ import annotations

import pytest

from tests.support.accounts import Accounts
from tests.support.daemon import Daemon
from tests.support.users import trainq_as
from tests.support.waiting import wait_for
from trainq.core.errors import ExitCode

pytestmark = pytest.mark.multiuser


def test_a_dependent_job_waits_in_trainqd_and_the_time_limit_stays_slurms(
    slurm_daemon: Daemon, accounts: Accounts, shared_dir: object
) -> None:
    alice = accounts.alice
    done = trainq_as(slurm_daemon, alice, "submit", "--", "true", cwd=str(shared_dir))
    first = int(done.stdout)
    record = slurm_daemon.state_dir / "jobs" / str(first) / "attempts" / "1.slurm"
    wait_for(record.exists, timeout=15, interval=0.05, what="the hand-off to Slurm")
    wait_for(lambda: slurm_daemon.job(first)["state"] == "RUNNING", timeout=10, interval=0.1)
    done = trainq_as(slurm_daemon, alice, "submit", "--after", str(first), "--", "true")
    second = int(done.stdout)
    words = f"waiting for job {first} to succeed"
    wait_for(lambda: slurm_daemon.job(second)["pending_reason"] == words, timeout=10)
    assert not (slurm_daemon.state_dir / "jobs" / str(second)).exists()  # never handed over
    done = trainq_as(slurm_daemon, alice, "update", str(first), "--max-runtime", "60")
    assert done.returncode == ExitCode.CONFLICT
    assert done.stderr.startswith(f"trainq: job {first} runs under Slurm, which holds the time")
    assert done.stderr.count("\n") == 1
    assert trainq_as(slurm_daemon, alice, "health").returncode == 0
    for job in (first, second):
        slurm_daemon.cli("stop", "--grace", "0", str(job))
