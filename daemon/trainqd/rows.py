"""The store's rows as Python values: jobs, attempts and events, and how a row of each
table becomes one. The column lists here and the schema (schema.py) go together."""

from __future__ import annotations

import json
import math
import sqlite3
from dataclasses import dataclass

from trainq.core.spec import JobSpec
from trainq.core.states import JobState


@dataclass(frozen=True)
class Owner:
    uid: int
    gid: int
    user: str


@dataclass(frozen=True)
class JobRow:
    id: int
    name: str | None
    state: JobState
    priority: int
    owner: Owner
    spec: JobSpec
    gpus: tuple[int, ...]
    gpu_uuids: tuple[str, ...]
    created_at: float
    started_at: float | None
    ended_at: float | None
    failure_reason: str | None
    stop_reason: str | None
    not_before: float | None
    runtime_used: float
    attempt_count: int
    lost_count: int

    @property
    def display_name(self) -> str:
        return self.name or f"job-{self.id}"


@dataclass(frozen=True)
class AttemptRow:
    job_id: int
    number: int
    gpus: tuple[int, ...]
    started_at: float
    ended_at: float | None
    exit_code: int | None
    signal: int | None
    outcome: str | None
    reason: str | None
    retried: bool
    monitor_pid: int | None
    monitor_start: int | None
    boot_id: str | None


@dataclass(frozen=True)
class EventRow:
    id: int
    time: float
    job_id: int
    from_state: JobState | None
    to_state: JobState
    reason: str | None


JOB_COLUMNS = (
    "id, name, state, priority, owner_uid, owner_gid, owner_user, spec, gpus, gpu_uuids,"
    " created_at, started_at, ended_at, failure_reason, stop_reason, not_before,"
    " runtime_used, attempt_count, lost_count"
)
ATTEMPT_COLUMNS = (
    "job_id, number, gpus, started_at, ended_at, exit_code, signal, outcome, reason, retried,"
    " monitor_pid, monitor_start, boot_id"
)


# Every time read back is one that JSON and datetime can represent: a row written by an
# older trainqd from a hostile exit record (1e300, inf) must not break every listing.
_LAST_TIME = 253402300799.0  # 9999-12-31T23:59:59Z, datetime's last second


def _when(value: float | None) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return min(max(float(value), 0.0), _LAST_TIME)


def _when_known(value: float) -> float:
    return _when(value) or 0.0


def _seconds(value: float) -> float:
    return float(value) if math.isfinite(value) and value >= 0 else 0.0


def job_from(row: sqlite3.Row, spec: JobSpec | None = None) -> JobRow:
    return JobRow(
        id=row[0],
        name=row[1],
        state=JobState(row[2]),
        priority=row[3],
        owner=Owner(uid=row[4], gid=row[5], user=row[6]),
        spec=JobSpec.model_validate_json(row[7]) if spec is None else spec,
        gpus=tuple(json.loads(row[8])),
        gpu_uuids=tuple(json.loads(row[9])),
        created_at=_when_known(row[10]),
        started_at=_when(row[11]),
        ended_at=_when(row[12]),
        failure_reason=row[13],
        stop_reason=row[14],
        not_before=_when(row[15]),
        runtime_used=_seconds(row[16]),
        attempt_count=row[17],
        lost_count=row[18],
    )


def attempt_from(row: sqlite3.Row) -> AttemptRow:
    return AttemptRow(
        job_id=row[0],
        number=row[1],
        gpus=tuple(json.loads(row[2])),
        started_at=_when_known(row[3]),
        ended_at=_when(row[4]),
        exit_code=row[5],
        signal=row[6],
        outcome=row[7],
        reason=row[8],
        retried=bool(row[9]),
        monitor_pid=row[10],
        monitor_start=row[11],
        boot_id=row[12],
    )


def event_from(row: sqlite3.Row) -> EventRow:
    return EventRow(
        id=row[0],
        time=_when_known(row[1]),
        job_id=row[2],
        from_state=None if row[3] is None else JobState(row[3]),
        to_state=JobState(row[4]),
        reason=row[5],
    )
