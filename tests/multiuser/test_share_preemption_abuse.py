"""Fair-share preemption cannot be turned into harassment: in a class that may both preempt
and be preempted, a user whose fair-share preemptor ended at once does not get to preempt
another user's job again with the next such job, however long the victim has run; the
victim's jobs run on and trainqd serves both."""

from __future__ import annotations

import sys
import time
from datetime import datetime
from typing import Any

import pytest

from tests.support.accounts import Accounts
from tests.support.daemon import Daemon, running_daemon, trainer
from tests.support.users import submit_as
from tests.support.waiting import wait_for

pytestmark = pytest.mark.multiuser

MIN_RUNTIME = 1

CONFIG = f"""
default_stop_grace_seconds = 5
preempt_after_seconds = 0
min_runtime_before_preemption_seconds = {MIN_RUNTIME}
preempt_for_fair_share = true
gpu_rescan_seconds = 0.2

[classes.default]
preemptible = true
may_preempt = true
"""


def sleeper() -> dict[str, Any]:
    return {"command": [sys.executable, trainer("sleeper.py")], "gpus": 1}


def running_longer_than_the_minimum(daemon: Daemon, job_id: int) -> bool:
    job = daemon.job(job_id)
    if job["state"] != "RUNNING":
        return False
    started = datetime.fromisoformat(job["attempts"][-1]["started_at"]).timestamp()
    return time.time() - started > MIN_RUNTIME


def test_jobs_that_end_at_once_preempt_once(accounts: Accounts) -> None:
    alice, bob = accounts.alice, accounts.bob
    with running_daemon(CONFIG, gpus="fake:2") as daemon:
        bobs = [submit_as(daemon, bob, sleeper())["id"] for _ in range(2)]
        for job_id in bobs:
            wait_for(lambda j=job_id: running_longer_than_the_minimum(daemon, j), timeout=20)

        # Bob holds both GPUs: alice's first job takes one back by fair share, and ends.
        first = submit_as(daemon, alice, {"command": ["true"], "gpus": 1})["id"]
        assert daemon.wait_state(first, timeout=30)["state"] == "COMPLETED"
        victim = next(j for j in bobs if daemon.job(j)["preempted_count"] == 1)
        wait_for(lambda: running_longer_than_the_minimum(daemon, victim), timeout=30)

        # Bob's resumed job is past the minimum: the next zero-second job may not take it.
        second = submit_as(daemon, alice, {"command": ["true"], "gpus": 1})["id"]

        def planned() -> dict[str, Any] | None:
            job = daemon.job(second)
            return job if job["pending_reason"] != "queued" else None

        job = wait_for(planned, timeout=15, what="alice's second job to be planned")
        assert (job["state"], job["pending_reason"]) == ("PENDING", "waiting for 1 GPU (0 free)")
        for job_id in bobs:
            seen = daemon.job(job_id)
            assert seen["state"] == "RUNNING"
            assert seen["preempted_count"] == (1 if job_id == victim else 0)
        assert daemon.cli("health").returncode == 0
