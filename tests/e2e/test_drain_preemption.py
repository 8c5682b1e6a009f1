"""Preemption instead of a drain (`preempt_rather_than_drain`) with a real trainqd (two
simulated GPUs), real trainers and the real `trainq` command: a short 2-GPU job takes the
GPU of a 1-GPU job without a time limit rather than wait for it, which saves a checkpoint
and resumes from it once the short job is done; a 2-GPU job without a limit waits."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.daemon import Daemon, running_daemon
from tests.helpers import wait_for
from tests.preempting import checkpointing_job, resumed_from_checkpoint

CONFIG = """
default_stop_grace_seconds = 10
preempt_after_seconds = 0
min_runtime_before_preemption_seconds = 0
preempt_rather_than_drain = true

[classes.default]
preemptible = true
may_preempt = true
"""


@pytest.fixture
def daemon() -> Iterator[Daemon]:
    with running_daemon(CONFIG, gpus="fake:2") as started:
        yield started


def test_a_short_job_takes_a_smaller_ones_gpu_rather_than_wait(daemon: Daemon) -> None:
    low = checkpointing_job(daemon, gpus=1)
    done = daemon.cli("submit", "--gpus", "2", "--max-runtime", "60", "--", "true")
    assert done.returncode == 0, done.stderr
    short = int(done.stdout)
    assert daemon.wait_state(short)["state"] == "COMPLETED"

    resumed_from_checkpoint(daemon, low, by=short)


def test_a_job_without_a_time_limit_waits_for_the_gpus(daemon: Daemon) -> None:
    low = checkpointing_job(daemon, gpus=1)
    endless = daemon.submit({"command": ["true"], "gpus": 2})["id"]
    wait_for(lambda: daemon.job(endless).get("waiting"), what="the 2-GPU job to be planned")
    assert daemon.job(endless)["waiting"]["kind"] == "gpus"
    assert "waiting for 2 GPUs (1 free)" in daemon.cli("ls").stdout
    assert daemon.job(low)["state"] == "RUNNING"
    assert daemon.job(low)["attempts"][0]["outcome"] is None
