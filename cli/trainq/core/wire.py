"""Wire types of the HTTP/JSON API (docs/architecture.md): what the daemon sends and the CLI reads.

The daemon builds these with validation off (`model_construct` is not used: records are
small and correctness beats microseconds); the OpenAPI document is generated from them.
Timestamps are RFC 3339 in UTC.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, StrictStr

from trainq.core.outcomes import Outcome
from trainq.core.reasons import WaitReason
from trainq.core.spec import JobSpec
from trainq.core.states import JobState


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
    # What trainqd sampled of its GPUs (unknown for attempts it did not sample).
    gpu_util_peak: float | None = None  # percent, the mean over its GPUs at the busiest sample
    gpu_util_mean: float | None = None
    gpu_memory_peak_mib: int | None = None  # used on its GPUs together
    gpu_idle_seconds: float | None = None  # time its GPUs spent under the idle threshold
    # A subprocess attempt: whether its ml root was at /opt/ml (False: SAGEMAKER_BASE_DIR only).
    opt_ml: bool | None = None


class NodeRecord(_Wire):
    """One node of a job of several nodes: its host name, rank, instance group, its share of
    the job's GPUs (while it runs; then of its latest attempt's) and its ml root (its logs:
    `trainq logs --node`); and how it ended the job's latest attempt (`attempt`), once that
    ended: as an attempt's outcome, exit status or signal, and how many times it was
    restarted in place (restart = "node")."""

    name: str
    rank: int
    group: str
    gpus: list[int] = Field(default_factory=list)
    job_dir: str
    attempt: int | None = None
    outcome: Outcome | None = None
    exit_code: int | None = None
    signal: int | None = None
    signal_name: str | None = None
    restarts: int | None = None


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
    pending_reason: str | None = None  # `waiting` in words (trainq.core.reasons.render)
    waiting: WaitReason | None = None  # why a PENDING job waits, as data
    next_attempt_at: datetime | None = None
    # The running attempt's GPUs at the last sample, and since when they have been idle
    # (set once the idle rule has flagged the job).
    gpu_util: float | None = None
    gpu_memory_used_mib: int | None = None
    gpu_idle_since: datetime | None = None
    created_at: datetime
    started_at: datetime | None = None
    ended_at: datetime | None = None
    group_id: int | None = None  # a sweep's group: the id of its first job
    held_by: str | None = None  # who holds it back from starting (`trainq release` lets it)
    boost: int = 0  # an admin's raise of the job above other users' work
    preempted_count: int = 0  # times it was preempted and queued again
    place: int | None = None  # a PENDING job's place in the queue at the last plan (1: next)
    # STOPPED by its time limit: `ls` and `show` say TIMEOUT, `wait` exits 9. Its own field,
    # not a state, so clients that know the states keep working.
    timed_out: bool = False
    # A job of several nodes: each node (README.md, "Several nodes"); empty for one node.
    nodes: list[NodeRecord] = Field(default_factory=list)
    spec: JobSpec


class JobList(_Wire):
    jobs: list[JobRecord]
    # How many jobs match the filters, and the `after` of the next page (None on the last).
    total: int | None = None
    next: str | None = None


class SubmittedGroup(_Wire):
    """The answer to a list of specs in one POST /v1/jobs: the jobs, in the list's order,
    and their group (the first job's id)."""

    group_id: int
    jobs: list[JobRecord]


class GroupStopped(_Wire):
    """POST /v1/groups/{id}/stop: the jobs asked to stop, and how many unfinished jobs of
    the group the caller may not stop."""

    group_id: int
    stopped: list[int]
    not_allowed: int = 0


class StopRequest(_Wire):
    model_config = ConfigDict(extra="forbid", frozen=True)
    grace_seconds: StrictFloat | None = Field(default=None, ge=0, le=86400)


class JobUpdate(_Wire):
    """PATCH /v1/jobs/{id}: what changes in a pending job; each key left out stays."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    priority: StrictInt | None = None
    gpus: StrictInt | None = None
    max_runtime_seconds: StrictInt | None = None
    job_class: StrictStr | None = Field(default=None, alias="class")
    boost: StrictInt | None = Field(default=None, ge=-1_000_000, le=1_000_000)


class DrainRequest(_Wire):
    """POST /v1/drain: these GPUs (none named: the whole host) take no new job."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    gpus: list[StrictInt] | None = Field(default=None, max_length=1024)
    reason: StrictStr = Field(min_length=1, max_length=500)


class ResumeRequest(_Wire):
    """POST /v1/resume: lift the drains of these GPUs (none named: every drain)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    gpus: list[StrictInt] | None = Field(default=None, max_length=1024)


class DrainRecord(_Wire):
    gpu: int | None = None  # None: the whole host
    reason: str
    by: str
    since: datetime


class DrainList(_Wire):
    drains: list[DrainRecord]


class Removed(_Wire):
    """DELETE /v1/jobs/{id}: the job, and how many files and directories went with it."""

    id: int
    files: int


class GpuRecord(_Wire):
    index: int
    uuid: str
    name: str
    memory_total_mib: int
    memory_used_mib: int | None = None
    job_id: int | None = None
    foreign_pids: list[int] = Field(default_factory=list)
    available: bool
    # The last sample (trainqd.scheduling.sampling), None before the first or where unknown.
    utilization_percent: float | None = None
    power_watts: float | None = None
    drain: DrainRecord | None = None  # drained: takes no new job (its job runs on)


class GpuList(_Wire):
    backend: Literal["nvml", "fake", "none"]
    gpus: list[GpuRecord]
    host_drain: DrainRecord | None = None  # the whole host drained: nothing new starts


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
    drains: list[DrainRecord] = Field(default_factory=list)  # gpu None: the whole host


class EventRecord(_Wire):
    id: int
    time: datetime
    job_id: int
    from_state: JobState | None = None
    to_state: JobState
    reason: str | None = None


class UsageRow(_Wire):
    model_config = ConfigDict(
        extra="ignore", frozen=True, populate_by_name=True, serialize_by_alias=True
    )

    user: str | None = None  # the row's user (by user)
    job_class: str | None = Field(default=None, alias="class")  # or its class (by class)
    jobs: int  # submitted in the period
    completed: int  # ended in the period, by final state
    failed: int
    stopped: int
    gpu_hours: float  # GPUs held by its attempts, times the hours of the period they ran
    idle_gpu_hours: float  # of those, hours the GPUs sat under the idle threshold


class UsageReport(_Wire):
    since: datetime
    until: datetime
    by: Literal["user", "class"]
    rows: list[UsageRow]


class UserShare(_Wire):
    """One user's part of the workstation (`trainq users`): recent use, decayed with the
    fair share half-life, and the jobs they have running and waiting now."""

    user: str
    uid: int
    gpu_hours: float  # decayed GPU-hours
    cpu_slot_hours: float  # decayed CPU-slot-hours
    share: float  # of all users' decayed GPU-hours, 0..1
    running_jobs: int
    running_gpus: int
    waiting_jobs: int
    waiting_gpus: int


class UserList(_Wire):
    half_life_days: float  # 0: fair share is off, and usage is not kept
    users: list[UserShare]


class ErrorDetail(_Wire):
    code: str
    message: str


class ErrorBody(_Wire):
    error: ErrorDetail


class MetricSeriesRecord(_Wire):
    """One metric of one attempt: its kept points (the first, the latest and evenly thinned
    ones between), how many reports it had, its latest and its best."""

    points: list[tuple[float, float]] = Field(default_factory=list)  # (step, value)
    count: int = 0
    direction: Literal["minimize", "maximize"] = "minimize"
    latest: tuple[float, float] | None = None
    best: float | None = None


class AttemptMetricsRecord(_Wire):
    number: int
    series: dict[str, MetricSeriesRecord] = Field(default_factory=dict)
    dropped: int = 0  # reports of metrics beyond the limit of series per attempt


class JobMetrics(_Wire):
    job_id: int
    attempts: list[AttemptMetricsRecord] = Field(default_factory=list)


class TrialRecord(_Wire):
    """One trial of a tune: an ordinary job of the tune's owner."""

    number: int
    job_id: int
    job_state: JobState | None = None
    params: dict[str, str | bool | int | float] | None = None  # None: not yours to see
    state: Literal["running", "completed", "pruned", "failed", "stopped"]
    value: float | None = None  # the objective's last report
    best: float | None = None  # its best report
    step: float | None = None  # the step of the last report
    reason: str | None = None  # why it ended, as its job's stop or failure reason says
    model_dir: str | None = None  # where its model is (the owner's and admins' to see)
    # pbt: each resume from another trial's checkpoints, {"attempt", "from_trial", "params"}
    history: list[dict[str, Any]] | None = None


class TuneRecord(_Wire):
    id: int
    owner: Owner
    state: Literal["RUNNING", "COMPLETED", "FAILED", "STOPPED"]
    reason: str | None = None
    objective: str
    direction: Literal["minimize", "maximize"]
    search: str
    early_stopping: str
    max_trials: int
    max_parallel: int
    group_id: int | None = None
    created_at: datetime
    ended_at: datetime | None = None
    trials: list[TrialRecord] = Field(default_factory=list)
    best_trial: int | None = None  # the number of the trial with the best objective


class TuneList(_Wire):
    tunes: list[TuneRecord]


class GpuUseSample(_Wire):
    """One sample of a running attempt's GPUs taken together (trainqd.scheduling.sampling)."""

    time: datetime
    utilization_percent: float | None = None  # the mean over its GPUs
    memory_used_mib: int | None = None  # everything on its GPUs
    process_memory_mib: int | None = None  # the job's own processes, where known
    power_watts: float | None = None


class JobSamples(_Wire):
    """The samples trainqd keeps of a job's running attempt (the last gpu_sample_history)."""

    job_id: int
    attempt: int | None = None  # the attempt sampled; None: none is running
    samples: list[GpuUseSample] = Field(default_factory=list)
