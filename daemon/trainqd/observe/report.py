"""Usage reports (`trainq report`, GET /v1/report): GPU-hours, jobs, failures and idle
GPU-hours per user over a period, computed from the store.

An attempt counts for the part of it that falls in the period, times its number of GPUs;
a running attempt counts up to now. Idle GPU-hours are what the sampler saw (attempts it did
not sample count none), spread over the attempt's GPUs the same way, and counted once the
attempt has ended.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime

from trainq.core.errors import InvalidRequest
from trainq.core.states import JobState
from trainq.core.wire import UsageReport, UsageRow
from trainqd.store import Store

_SINCE = re.compile(r"([0-9]+(?:\.[0-9]+)?)([smhdw])")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
MAX_PERIOD = 100 * 365 * 86400


GROUPINGS = ("user", "class")


def period_seconds(text: str) -> float:
    """`30d`, `12h`, `90m`, `2w`, `45s`: the length of a report's period."""
    match = _SINCE.fullmatch(text.strip())
    if match is None:
        raise InvalidRequest(f"since: {text!r} is not a period such as 30d, 12h, 90m or 2w")
    seconds = float(match[1]) * _UNIT[match[2]]
    if not 0 < seconds <= MAX_PERIOD:
        raise InvalidRequest(f"since: {text!r} must be longer than 0 and at most 100 years")
    return seconds


@dataclass
class _Totals:
    jobs: int = 0
    completed: int = 0
    failed: int = 0
    stopped: int = 0
    gpu_seconds: float = 0.0
    idle_gpu_seconds: float = 0.0


def usage_report(
    store: Store,
    since: float,
    now: float,
    by: str = "user",
    default_class: str = "",
) -> UsageReport:
    """The report of everything since `since` (a time), one row per user (or per class,
    jobs that name none in `default_class`), busiest first."""
    if by not in GROUPINGS:
        raise InvalidRequest(f"by: {by!r} is not one of: {', '.join(GROUPINGS)}")
    jobs, attempts = store.usage_since(since, by_class=default_class if by == "class" else None)
    totals: dict[str, _Totals] = {}
    for user, state, created_at, ended_at in jobs:
        entry = totals.setdefault(user, _Totals())
        if created_at >= since:
            entry.jobs += 1
        if ended_at is not None and ended_at >= since:
            if state == JobState.COMPLETED:
                entry.completed += 1
            elif state == JobState.FAILED:
                entry.failed += 1
            elif state == JobState.STOPPED:
                entry.stopped += 1
    for user, gpus_json, started_at, ended_at, idle_seconds in attempts:
        gpus = len(json.loads(gpus_json))
        end = now if ended_at is None else ended_at
        ran = max(0.0, end - started_at)
        inside = max(0.0, end - max(started_at, since))
        entry = totals.setdefault(user, _Totals())
        entry.gpu_seconds += inside * gpus
        if idle_seconds and ran > 0:
            entry.idle_gpu_seconds += min(idle_seconds, ran) * gpus * (inside / ran)
    rows = [
        UsageRow(
            user=user if by == "user" else None,
            job_class=user if by == "class" else None,
            jobs=t.jobs,
            completed=t.completed,
            failed=t.failed,
            stopped=t.stopped,
            gpu_hours=round(t.gpu_seconds / 3600, 4),
            idle_gpu_hours=round(t.idle_gpu_seconds / 3600, 4),
        )
        for user, t in totals.items()
    ]
    rows.sort(key=lambda r: (-r.gpu_hours, r.user or r.job_class or ""))
    return UsageReport(
        since=datetime.fromtimestamp(since, UTC),
        until=datetime.fromtimestamp(now, UTC),
        by=by,
        rows=rows,
    )
