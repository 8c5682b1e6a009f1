"""The store's rows as typed Python values: jobs, attempts and events, and how a row of each
table becomes one, read by column name. The column lists here and the schema (schema.py)
go together."""

from __future__ import annotations

import dataclasses
import json
import math
import sqlite3
from dataclasses import dataclass

from trainq.core.outcomes import NodeEnd, Outcome
from trainq.core.spec import JobSpec
from trainq.core.states import JobState


@dataclass(frozen=True)
class JobOwner:
    uid: int
    gid: int
    user: str


@dataclass(frozen=True)
class JobRow:
    id: int
    name: str | None
    state: JobState
    priority: int
    owner: JobOwner
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
    group_id: int | None = None  # a sweep's group: the id of its first job
    held_by: str | None = None  # who holds it back from starting (None: not held)
    boost: int = 0  # an admin's raise above other users' work; users order only their own
    preempted_count: int = 0

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
    outcome: Outcome | None  # stored as its text value
    reason: str | None
    retried: bool
    monitor_pid: int | None
    monitor_start: int | None
    boot_id: str | None
    gpu_util_peak: float | None = None
    gpu_util_mean: float | None = None
    gpu_memory_peak_mib: int | None = None
    gpu_idle_seconds: float | None = None
    opt_ml: bool | None = None  # a subprocess attempt: whether /opt/ml was its ml root
    nodes: tuple[NodeEnd, ...] = ()  # a job of several nodes: each node's end


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
    " runtime_used, attempt_count, lost_count, group_id, held_by, boost, preempted_count"
)
ATTEMPT_COLUMNS = (
    "job_id, number, gpus, started_at, ended_at, exit_code, signal, outcome, reason, retried,"
    " monitor_pid, monitor_start, boot_id,"
    " gpu_util_peak, gpu_util_mean, gpu_memory_peak_mib, gpu_idle_seconds, opt_ml,"
    " nodes"
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
    """A `jobs` row read by column name (the store's connection makes `sqlite3.Row`s)."""
    return JobRow(
        id=row["id"],
        name=row["name"],
        state=JobState(row["state"]),
        priority=row["priority"],
        owner=owner_from(row),
        spec=JobSpec.model_validate_json(row["spec"]) if spec is None else spec,
        gpus=tuple(json.loads(row["gpus"])),
        gpu_uuids=tuple(json.loads(row["gpu_uuids"])),
        created_at=_when_known(row["created_at"]),
        started_at=_when(row["started_at"]),
        ended_at=_when(row["ended_at"]),
        failure_reason=row["failure_reason"],
        stop_reason=row["stop_reason"],
        not_before=_when(row["not_before"]),
        runtime_used=_seconds(row["runtime_used"]),
        attempt_count=row["attempt_count"],
        lost_count=row["lost_count"],
        group_id=row["group_id"],
        held_by=row["held_by"],
        boost=row["boost"],
        preempted_count=row["preempted_count"],
    )


def owner_from(row: sqlite3.Row) -> JobOwner:
    """Who a job (or a tune) belongs to, from its owner_uid, owner_gid and owner_user."""
    return JobOwner(uid=row["owner_uid"], gid=row["owner_gid"], user=row["owner_user"])


def attempt_from(row: sqlite3.Row) -> AttemptRow:
    return AttemptRow(
        job_id=row["job_id"],
        number=row["number"],
        gpus=tuple(json.loads(row["gpus"])),
        started_at=_when_known(row["started_at"]),
        ended_at=_when(row["ended_at"]),
        exit_code=row["exit_code"],
        signal=row["signal"],
        outcome=None if row["outcome"] is None else Outcome(row["outcome"]),
        reason=row["reason"],
        retried=bool(row["retried"]),
        monitor_pid=row["monitor_pid"],
        monitor_start=row["monitor_start"],
        boot_id=row["boot_id"],
        gpu_util_peak=row["gpu_util_peak"],
        gpu_util_mean=row["gpu_util_mean"],
        gpu_memory_peak_mib=row["gpu_memory_peak_mib"],
        gpu_idle_seconds=row["gpu_idle_seconds"],
        opt_ml=None if row["opt_ml"] is None else bool(row["opt_ml"]),
        nodes=node_ends_from(row["nodes"]),
    )


def node_ends_to(nodes: tuple[NodeEnd, ...]) -> str | None:
    return json.dumps([dataclasses.asdict(end) for end in nodes]) if nodes else None


def node_ends_from(text: str | None) -> tuple[NodeEnd, ...]:
    if not text:
        return ()
    return tuple(
        NodeEnd(
            name=end["name"],
            outcome=Outcome(end["outcome"]),
            exit_code=end.get("exit_code"),
            signal=end.get("signal"),
            restarts=end.get("restarts", 0),
        )
        for end in json.loads(text)
    )


def event_from(row: sqlite3.Row) -> EventRow:
    return EventRow(
        id=row["id"],
        time=_when_known(row["time"]),
        job_id=row["job_id"],
        from_state=None if row["from_state"] is None else JobState(row["from_state"]),
        to_state=JobState(row["to_state"]),
        reason=row["reason"],
    )


HOST = -1  # a drain's `gpu` for the whole host


@dataclass(frozen=True)
class DrainRow:
    """A drained GPU (or, with gpu == HOST, the whole host): it takes no new job."""

    gpu: int
    reason: str
    by_user: str
    since: float
