"""Store rows as the API shows them (the wire models of trainq.core.wire)."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from trainq.core.nodes import is_gang, layout, split_gpus
from trainq.core.reasons import Wait, WaitReason, own_reason, render
from trainq.core.spec import JobSpec
from trainq.core.spec_parts import InstanceGroup
from trainq.core.states import JobState
from trainq.core.wire import (
    AttemptRecord,
    EventRecord,
    GpuUseSample,
    JobRecord,
    JobSamples,
    NodeRecord,
    Owner,
)
from trainqd.access.authorization import Sight
from trainqd.attempts.engine import container_name
from trainqd.attempts.jobdir import JobDirs
from trainqd.scheduling.outcomes import ended_by_time_limit, is_pause
from trainqd.scheduling.retry import signal_name
from trainqd.scheduling.sampling import AttemptUse
from trainqd.store import AttemptRow, EventRow, JobRow


def ts(value: float | None) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(value, UTC)


def attempt_record(
    row: AttemptRow, container: str | None = None, *, reveal: Sight = Sight.WHOLE
) -> AttemptRecord:
    return AttemptRecord(
        number=row.number,
        gpus=list(row.gpus),
        started_at=ts(row.started_at),
        ended_at=ts(row.ended_at),
        exit_code=row.exit_code,
        signal=row.signal,
        signal_name=None if row.signal is None else signal_name(row.signal),
        outcome=row.outcome,
        reason=visible_reason(row.reason, reveal),
        retried=row.retried,
        container=container,
        gpu_util_peak=row.gpu_util_peak,
        gpu_util_mean=row.gpu_util_mean,
        gpu_memory_peak_mib=row.gpu_memory_peak_mib,
        gpu_idle_seconds=row.gpu_idle_seconds,
        opt_ml=row.opt_ml,
    )


def wait_reason(
    job: JobRow, waiting: WaitReason | None, now: float, *, paused: bool = False
) -> WaitReason | None:
    if job.state != JobState.PENDING:
        return None
    # The job's own reasons are known before the scheduler has planned again.
    own = own_reason(job.held_by, job.not_before, now, paused=paused)
    return own or waiting or WaitReason(Wait.QUEUED)


HIDDEN = "<hidden>"
# What other users read instead of a failure's details: an attempt's reason is often the tail
# of the trainer's stderr, where tokens and paths end up.
REDACTED_REASON = "details visible to the owner"


def visible_reason(reason: str | None, reveal: Sight) -> str | None:
    """A failure's reason as a caller may see it: the owner and admins read it whole, every
    other user learns only that there is one."""
    if reveal is Sight.WHOLE or reason is None:
        return reason
    return REDACTED_REASON


def visible_name(job: JobRow, reveal: Sight) -> str:
    """The job's name, or under `private_data` for other users the one trainq gives it."""
    return f"job-{job.id}" if reveal is Sight.PRIVATE else job.display_name


def visible_spec(spec: JobSpec, reveal: Sight) -> JobSpec:
    """The spec as a caller may see it: environment and hyperparameter values (API tokens
    travel in both) only for the job's owner and admins; the names stay, so everyone sees
    what the job relies on. Under `private_data` other users see what it asks of the host
    (GPUs, class, limits) and nothing of what it runs: its name, command or image, working
    directory, channels, hyperparameters and environment are hidden or left out."""
    if reveal is Sight.PRIVATE:
        return spec.model_copy(
            update={
                "instance_groups": _visible_groups(spec, reveal),
                "name": None,
                "command": None if spec.command is None else [HIDDEN],
                "image": None if spec.image is None else HIDDEN,
                "working_dir": None if spec.working_dir is None else HIDDEN,
                "hyperparameters": {},
                "environment": {},
                "channels": {},
                "notify": None if spec.notify is None else [HIDDEN],
                "source_dir": None if spec.source_dir is None else HIDDEN,
                # Their names and patterns say what it computes; its metrics are the
                # owner's anyway.
                "metric_definitions": [],
            }
        )
    grouped = any(group.environment for group in spec.instance_groups)
    if reveal is Sight.WHOLE or not (
        spec.environment or spec.hyperparameters or spec.notify or grouped
    ):
        return spec
    return spec.model_copy(
        update={
            "instance_groups": _visible_groups(spec, reveal),
            "environment": dict.fromkeys(spec.environment, HIDDEN),
            "hyperparameters": dict.fromkeys(spec.hyperparameters, HIDDEN),
            # A notify command often carries a webhook's token in its arguments.
            "notify": None if spec.notify is None else [HIDDEN],
        }
    )


def job_record(
    job: JobRow,
    attempts: list[AttemptRow],
    dirs: JobDirs,
    waiting: WaitReason | None,
    *,
    reveal: Sight,
    instance: str,
    use: AttemptUse | None = None,
    place: int | None = None,
) -> JobRecord:
    pending = job.state == JobState.PENDING
    # Paused: held since its last attempt was paused (`trainq hold` of it running).
    paused = bool(attempts) and is_pause(attempts[-1].reason) and is_pause(job.stop_reason)
    why = wait_reason(job, waiting, time.time(), paused=paused)
    latest = use.latest if use is not None else None
    return JobRecord(
        id=job.id,
        name=visible_name(job, reveal),
        state=job.state,
        priority=job.priority,
        owner=Owner(uid=job.owner.uid, user=job.owner.user),
        runtime=job.spec.runtime,
        gpus=list(job.gpus) if job.state in (JobState.RUNNING, JobState.STOPPING) else [],
        gpu_uuids=list(job.gpu_uuids) if job.state in (JobState.RUNNING, JobState.STOPPING) else [],
        job_dir=str(dirs.ml_root(job.id)),
        attempts=[
            attempt_record(
                a,
                None if job.spec.image is None else container_name(instance, job.id, a.number),
                reveal=reveal,
            )
            for a in attempts
        ],
        failure_reason=visible_reason(job.failure_reason, reveal),
        stop_reason=job.stop_reason,
        pending_reason=None if why is None else render(why),
        waiting=why,
        next_attempt_at=ts(job.not_before) if pending else None,
        gpu_util=None if latest is None else latest.utilization_percent,
        gpu_memory_used_mib=None if latest is None else latest.memory_used_mib,
        gpu_idle_since=ts(None if use is None else use.idle.flagged_since),
        created_at=ts(job.created_at),
        started_at=ts(job.started_at),
        ended_at=ts(job.ended_at),
        group_id=job.group_id,
        preempted_count=job.preempted_count,
        place=place if pending else None,
        held_by=job.held_by if pending else None,
        boost=job.boost,
        timed_out=ended_by_time_limit(job),
        nodes=node_records(job, dirs, attempts[-1] if attempts else None, reveal),
        spec=visible_spec(job.spec, reveal),
    )


def _visible_groups(spec: JobSpec, reveal: Sight) -> list[InstanceGroup]:
    """A job of several nodes' groups as `visible_spec` shows the job: their environments'
    values hidden; under `private_data` their names (numbered instead), commands and images
    too, and their environments left out."""
    if reveal is Sight.PRIVATE:
        return [
            group.model_copy(
                update={
                    "name": f"group-{i}",
                    "command": None if group.command is None else [HIDDEN],
                    "image": None if group.image is None else HIDDEN,
                    "environment": {},
                }
            )
            for i, group in enumerate(spec.instance_groups, 1)
        ]
    return [
        group.model_copy(update={"environment": dict.fromkeys(group.environment, HIDDEN)})
        for group in spec.instance_groups
    ]


def node_records(
    job: JobRow,
    dirs: JobDirs,
    latest: AttemptRow | None = None,
    reveal: Sight = Sight.WHOLE,
) -> list[NodeRecord]:
    """A job of several nodes' nodes, each with its share of the GPUs it holds now (else of
    those the `latest` attempt held) and how it ended that attempt, if that ended (group
    names as `reveal` shows them)."""
    if not is_gang(job.spec):
        return []
    nodes = layout(visible_spec(job.spec, reveal) if reveal is Sight.PRIVATE else job.spec)
    holding = job.state in (JobState.RUNNING, JobState.STOPPING) and job.gpus
    # An ended job's table says which GPUs each node ran on, beside how it ended there.
    held = tuple(job.gpus) if holding else latest.gpus if latest is not None else ()
    shares = split_gpus(nodes, held) if held else [() for _ in nodes]
    ends = {end.name: end for end in latest.nodes} if latest is not None else {}
    records = []
    for node, share in zip(nodes, shares, strict=True):
        end = ends.get(node.name)
        records.append(
            NodeRecord(
                name=node.name,
                rank=node.rank,
                group=node.group,
                gpus=list(share),
                job_dir=str(dirs.node_ml_root(job.id, node.name)),
                attempt=None if latest is None else latest.number,
                outcome=None if end is None else end.outcome,
                exit_code=None if end is None else end.exit_code,
                signal=None if end is None else end.signal,
                signal_name=None if end is None or end.signal is None else signal_name(end.signal),
                restarts=None if end is None else end.restarts,
            )
        )
    return records


def event_record(row: EventRow) -> EventRecord:
    return EventRecord(
        id=row.id,
        time=ts(row.time),
        job_id=row.job_id,
        from_state=row.from_state,
        to_state=row.to_state,
        reason=row.reason,
    )


def job_samples(job_id: int, use: AttemptUse) -> JobSamples:
    return JobSamples(
        job_id=job_id,
        attempt=use.attempt.number,
        samples=[
            GpuUseSample(
                time=datetime.fromtimestamp(s.time, UTC),
                utilization_percent=s.utilization_percent,
                memory_used_mib=s.memory_used_mib,
                process_memory_mib=s.process_memory_mib,
                power_watts=s.power_watts,
            )
            for s in list(use.history)  # a copy: the sampler appends as it reads
        ],
    )
