"""The chaos soak's invariants over what trainqd's API answers (bench/chaos.py). Each check
returns the broken invariants in words; an empty list: it held.

The jobs are the API's records, as root (an admin) sees them: every job, whole.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from bench.chaos_procs import Proc

Job = dict[str, Any]
ACTIVE = {"RUNNING", "STOPPING"}
TERMINAL = {"COMPLETED", "FAILED", "STOPPED"}
STATES = {"PENDING", *ACTIVE, *TERMINAL}
# The report gives GPU-hours to 4 decimals: half of the last digit, and float sums.
USAGE_TOLERANCE_HOURS = 0.00005 + 1e-9


def when(text: str | None) -> float | None:
    return None if text is None else datetime.fromisoformat(text).timestamp()


def acknowledged_kept(acknowledged: Mapping[int, str], jobs: Mapping[int, Job]) -> list[str]:
    """Every job whose submission trainqd answered is in the store, its submitter's, in a
    state of the lifecycle."""
    broken = []
    for job_id, user in sorted(acknowledged.items()):
        job = jobs.get(job_id)
        if job is None:
            broken.append(f"job {job_id} of {user} was acknowledged and is gone")
        elif job["owner"]["user"] != user:
            broken.append(f"job {job_id} of {user} now belongs to {job['owner']['user']}")
        elif job["state"] not in STATES:
            broken.append(f"job {job_id} is in an unknown state {job['state']!r}")
    return broken


def attempts_in_turn(jobs: Iterable[Job]) -> list[str]:
    """A job's attempts one after another: each ends before the next starts, only the last
    may still run, and it runs exactly while the job holds its GPUs."""
    broken = []
    for job in jobs:
        attempts = sorted(job["attempts"], key=lambda a: a["number"])
        for one, two in itertools.pairwise(attempts):
            ended, started = when(one["ended_at"]), when(two["started_at"])
            if ended is None or (started is not None and started < ended):
                broken.append(
                    f"job {job['id']}: attempt {two['number']} started while attempt "
                    f"{one['number']} ran"
                )
        running = attempts and attempts[-1]["ended_at"] is None
        if job["state"] in TERMINAL and running:
            broken.append(f"job {job['id']} is {job['state']} with attempt still running")
        if job["state"] == "PENDING" and running:
            broken.append(f"job {job['id']} is PENDING with an attempt still running")
    return broken


def gpus_exclusive(jobs: Iterable[Job]) -> list[str]:
    """No GPU held by two jobs: not among the jobs holding GPUs now, and no two jobs'
    attempts on one GPU ever overlapping in time (trainqd's own records)."""
    broken = []
    holder: dict[int, int] = {}
    spans: dict[int, list[tuple[float, float, int, int]]] = defaultdict(list)
    for job in jobs:
        if job["state"] in ACTIVE:
            for gpu in job["gpus"]:
                if gpu in holder:
                    broken.append(f"GPU {gpu} is held by jobs {holder[gpu]} and {job['id']}")
                holder[gpu] = job["id"]
        for attempt in job["attempts"]:
            start = when(attempt["started_at"])
            if start is None:
                continue
            end = when(attempt["ended_at"]) or float("inf")
            for gpu in attempt["gpus"]:
                spans[gpu].append((start, end, job["id"], attempt["number"]))
    for gpu, used in spans.items():
        used.sort()
        for (_, end, job_a, n_a), (start, _, job_b, n_b) in itertools.pairwise(used):
            if start < end and job_a != job_b:
                broken.append(
                    f"GPU {gpu}: job {job_b} attempt {n_b} started before job {job_a} "
                    f"attempt {n_a} ended"
                )
    return broken


def stopped_stay_stopped(stops: Mapping[int, float], jobs: Mapping[int, Job]) -> list[str]:
    """A job whose stop trainqd acknowledged never queues or starts again."""
    broken = []
    for job_id, acknowledged in sorted(stops.items()):
        job = jobs[job_id]
        if job["state"] == "PENDING":
            broken.append(f"job {job_id} is PENDING again after its stop was acknowledged")
        broken.extend(
            f"job {job_id} attempt {a['number']} started after its stop was acknowledged"
            for a in job["attempts"]
            if (when(a["started_at"]) or 0.0) > acknowledged
        )
    return broken


def failed_by_trainq(jobs: Iterable[Job]) -> list[str]:
    """The soak's trainers fail nothing of their own (their one crash is retried): an attempt
    that could not start, or a job FAILED other than by the monitors the soak killed (lost,
    beyond their budget), is trainq's doing."""
    broken = []
    for job in jobs:
        broken.extend(
            f"job {job['id']} attempt {a['number']} could not start: {a['reason']!r}"
            for a in job["attempts"]
            if a["outcome"] == "start_failed"
        )
        last = job["attempts"][-1]["outcome"] if job["attempts"] else None
        if job["state"] == "FAILED" and last not in ("lost", "start_failed"):
            broken.append(f"job {job['id']} FAILED: {job['failure_reason']!r}")
    return broken


def stops_take_effect(
    stops: Mapping[int, float], jobs: Mapping[int, Job], now: float, limit: float
) -> list[str]:
    """A job whose stop trainqd acknowledged has ended `limit` seconds later (the stop's
    grace and trainqd's restarts included)."""
    return [
        f"job {job_id} still {jobs[job_id]['state']} {limit:g} s after its stop was acknowledged"
        for job_id, acknowledged in sorted(stops.items())
        if jobs[job_id]["state"] not in TERMINAL and now - acknowledged > limit
    ]


Drain = tuple[int, float, float | None]  # a GPU, drained at, resumed at (None: still)


def none_started_on_drained(drains: Sequence[Drain], jobs: Iterable[Job]) -> list[str]:
    """No attempt started on a GPU between trainqd's answer to its drain and the request
    that lifted it."""
    broken = []
    for job in jobs:
        for attempt in job["attempts"]:
            start = when(attempt["started_at"])
            for gpu, since, until in drains:
                if (
                    start is not None
                    and gpu in attempt["gpus"]
                    and since < start < (until or float("inf"))
                ):
                    broken.append(
                        f"job {job['id']} attempt {attempt['number']} started on GPU {gpu} "
                        f"while it was drained"
                    )
    return broken


def ended_attempts(jobs: Iterable[Job]) -> set[tuple[int, int]]:
    """(job, attempt) of every attempt trainqd recorded as ended, and every attempt of an
    ended job."""
    ended = set()
    for job in jobs:
        for attempt in job["attempts"]:
            if attempt["ended_at"] is not None or job["state"] in TERMINAL:
                ended.add((job["id"], attempt["number"]))
    return ended


def leftovers(
    procs: Sequence[Proc], jobs: Mapping[int, Job], users: Mapping[int, str], ours: set[int]
) -> list[Proc]:
    """Processes that should be gone: one of an attempt trainqd says ended, of an ended job,
    or of a soak user with no attempt to belong to (ours: the soak's own agents). Each is a
    suspect only: the caller looks again after a moment, as a kill takes effect."""
    ended = ended_attempts(jobs.values())
    suspects = []
    for proc in procs:
        if proc.job is not None and proc.attempt is not None:
            job = jobs.get(proc.job)
            if (proc.job, proc.attempt) in ended or (job and job["state"] in TERMINAL):
                suspects.append(proc)
        elif proc.uid in users and proc.pid not in ours:
            suspects.append(proc)
    return suspects


def usage_matches(report: dict[str, Any], jobs: Iterable[Job]) -> list[str]:
    """The usage report's GPU-hours and job counts per user equal what the attempts and jobs
    add up to (a running attempt counted up to the report's `until`)."""
    until = when(report["until"])
    since = when(report["since"])
    assert until is not None
    assert since is not None
    hours: dict[str, float] = defaultdict(float)
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for job in jobs:
        user = job["owner"]["user"]
        counts[user]["jobs"] += 1
        if job["state"] in TERMINAL:
            counts[user][job["state"].lower()] += 1
        for attempt in job["attempts"]:
            start = when(attempt["started_at"])
            if start is None:
                continue
            end = when(attempt["ended_at"]) or until
            hours[user] += max(0.0, end - max(start, since)) * len(attempt["gpus"]) / 3600
    broken = []
    rows = {row["user"]: row for row in report["rows"]}
    for user in sorted(set(rows) | set(counts)):
        row = rows.get(user, {})
        if abs(row.get("gpu_hours", 0.0) - hours[user]) > USAGE_TOLERANCE_HOURS:
            broken.append(
                f"{user}: the report says {row.get('gpu_hours', 0.0)} GPU-hours, the attempts "
                f"add up to {hours[user]:.6f}"
            )
        broken.extend(
            f"{user}: the report counts {row.get(key, 0)} {key}, the jobs {counts[user][key]}"
            for key in ("jobs", "completed", "failed", "stopped")
            if row.get(key, 0) != counts[user][key]
        )
    return broken


def attempts_signature(jobs: Iterable[Job]) -> set[tuple[int, int, str | None, str]]:
    """What the usage check depends on: no attempt started or ended between two listings
    with the same signature."""
    return {
        (job["id"], a["number"], a["ended_at"], job["state"])
        for job in jobs
        for a in job["attempts"]
    } | {(job["id"], 0, None, job["state"]) for job in jobs}
