"""trainqd's side of the dispatch profile (bench/profile_dispatch.py): a `profile` log
event per step, only with TRAINQ_PROFILE=1 in trainqd's environment; off, a mark is one call
and one test of a constant. The monitor's side is monitor/profile.py."""

from __future__ import annotations

import os

import structlog

from trainqd.monitor.profile import PROFILE_ENV

PROFILING = os.environ.get(PROFILE_ENV) == "1"
log = structlog.get_logger("trainqd.profile")


def mark(step: str, job_id: int) -> None:
    if PROFILING:
        log.info("profile", step=step, job_id=job_id)
