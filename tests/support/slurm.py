"""What the tests of trainqd's Slurm back end share: a real trainqd handing its jobs to the
test's Slurm, and where it keeps the Slurm job of each attempt."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

from tests.slurm.conftest import Slurm
from tests.support.daemon import Daemon, running_daemon
from tests.support.waiting import wait_for

POLL = 0.2  # slurm_poll_seconds: Slurm's answers are followed this often


@contextlib.contextmanager
def slurm_trainqd(
    slurm: Slurm, env: dict[str, str] | None = None, **config: Any
) -> Iterator[Daemon]:
    """A real trainqd whose back end is the test's Slurm, with no GPUs of its own."""
    settings = {
        "backend": "slurm",
        "slurm_poll_seconds": POLL,
        "default_stop_grace_seconds": 5,
        **config,
    }
    env = {"SLURM_CONF": slurm.env["SLURM_CONF"], **(env or {})}
    with running_daemon(gpus="none", config=settings, env=env) as d:
        try:
            yield d
        finally:  # nothing a failed test handed over holds Slurm's GPUs for the next one
            handed = [
                json.loads(p.read_text())["slurm_job_id"]
                for p in d.state_dir.glob("jobs/*/attempts/*.slurm")
            ]
            if handed:
                slurm.run("scancel", *map(str, handed))


def slurm_job_of(daemon: Daemon, job_id: int, attempt: int = 1) -> str:
    """The Slurm job trainqd handed the attempt to, from its own record."""
    record = daemon.state_dir / "jobs" / str(job_id) / "attempts" / f"{attempt}.slurm"
    found: bool = wait_for(record.exists, timeout=10, interval=0.05, what="the hand-off to Slurm")
    assert found
    return str(json.loads(record.read_text())["slurm_job_id"])
