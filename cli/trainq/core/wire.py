"""Wire types of the HTTP/JSON API (DESIGN §6): what the daemon sends and the CLI reads.

The daemon builds these with validation off (`model_construct` is not used: records are
small and correctness beats microseconds); the OpenAPI document is generated from them.
Timestamps are RFC 3339 in UTC.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictFloat

from trainq.core.spec import JobSpec
from trainq.core.states import JobState

# How an attempt ended (data, not states; DESIGN §3).
Outcome = Literal[
    "exited",  # the trainer exited by itself; exit_code says how
    "signaled",  # the trainer died of a signal trainq did not send
    "stopped",  # trainq stopped it on request
    "timed_out",  # trainq stopped it at its time limit
    "interrupted",  # the host shut down under it (SIGTERM to its monitor); it runs again
    "start_failed",  # the trainer could not be started (no such program, bad working dir)
    "engine_error",  # the container engine failed before or around the trainer
    "feeder_failed",  # a Pipe mode channel could not be fed (unreadable data)
    "oom_killed",  # the kernel's out-of-memory killer ended it
    "lost",  # its monitor vanished without a record (reboot); retried from checkpoint
]


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class Owner(_Wire):
    uid: int
    user: str


class AttemptRecord(_Wire):
    number: int
    gpus: list[int] = Field(default_factory=list)
    started_at: datetime | None = None
    ended_at: datetime | None = None
    exit_code: int | None = None
    signal: int | None = None
    signal_name: str | None = None
    outcome: Outcome | None = None
    reason: str | None = None
    retried: bool = False
    container: str | None = None  # the engine's name for it (container jobs)


class JobRecord(_Wire):
    id: int
    name: str
    state: JobState
    priority: int
    owner: Owner
    runtime: Literal["subprocess", "container"]
    gpus: list[int] = Field(default_factory=list)
    gpu_uuids: list[str] = Field(default_factory=list)
    job_dir: str
    attempts: list[AttemptRecord] = Field(default_factory=list)
    failure_reason: str | None = None
    stop_reason: str | None = None
    pending_reason: str | None = None
    next_attempt_at: datetime | None = None
    created_at: datetime
    started_at: datetime | None = None
    ended_at: datetime | None = None
    spec: JobSpec


class JobList(_Wire):
    jobs: list[JobRecord]


class StopRequest(_Wire):
    model_config = ConfigDict(extra="forbid", frozen=True)
    grace_seconds: StrictFloat | None = Field(default=None, ge=0, le=86400)


class GpuRecord(_Wire):
    index: int
    uuid: str
    name: str
    memory_total_mib: int
    memory_used_mib: int | None = None
    job_id: int | None = None
    foreign_pids: list[int] = Field(default_factory=list)
    available: bool


class GpuList(_Wire):
    backend: Literal["nvml", "fake", "none"]
    gpus: list[GpuRecord]


class HealthRecord(_Wire):
    status: Literal["ok", "stopping"]
    version: str
    pid: int
    uid: int
    started_at: datetime
    gpu_backend: Literal["nvml", "fake", "none"]
    gpus: int
    cpu_slots: int
    jobs: dict[str, int]


class EventRecord(_Wire):
    id: int
    time: datetime
    job_id: int
    from_state: JobState | None = None
    to_state: JobState
    reason: str | None = None


class ErrorDetail(_Wire):
    code: str
    message: str


class ErrorBody(_Wire):
    error: ErrorDetail
