"""`trainq hold`, `release`, `update`, `rm`, `drain` and `resume`: sharing the workstation.

Commands that take several jobs (or filters: trainq.selection) act on each in turn: a
refusal for one is its one line on stderr, the others still happen, and the exit status is
that of the last refusal (0 when none was refused).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import Any

from trainq.context import Context
from trainq.core.errors import InvalidRequest
from trainq.selection import each, jobs_to_act_on


def hold(ctx: Context, args: argparse.Namespace) -> int:
    """POST /v1/jobs/{id}/hold for each job: it does not start until released; a running
    one is paused (stopped with its grace, then queued again held)."""
    client = ctx.client()
    jobs = jobs_to_act_on(ctx, args, default_state="PENDING")

    def act(job_id: int) -> str:
        job = client.post_job_hold(job_id)
        if job.get("state") != "PENDING":
            return f"{job_id} pausing: {job.get('stop_reason')}; `trainq release` resumes it"
        return f"{job_id} held by {job.get('held_by')}"

    return each(ctx, jobs, act)


def release(ctx: Context, args: argparse.Namespace) -> int:
    """POST /v1/jobs/{id}/release for each job."""
    client = ctx.client()
    jobs = jobs_to_act_on(ctx, args, default_state="PENDING")

    def act(job_id: int) -> str:
        client.post_job_release(job_id)
        return f"{job_id} released"

    return each(ctx, jobs, act)


def rm(ctx: Context, args: argparse.Namespace) -> int:
    """DELETE /v1/jobs/{id} for each job: its directory, logs and records."""
    client = ctx.client()
    jobs = jobs_to_act_on(ctx, args)

    def act(job_id: int) -> str:
        client.delete_job(job_id)
        return f"{job_id} removed"

    return each(ctx, jobs, act)


UPDATE_KEYS = (
    ("priority", "priority"),
    ("gpus", "gpus"),
    ("max_runtime", "max_runtime_seconds"),
    ("job_class", "class"),
    ("boost", "boost"),
)


def update(ctx: Context, args: argparse.Namespace) -> int:
    """PATCH /v1/jobs/{id} with the keys given; prints what the job is now."""
    given = {key: getattr(args, flag) for flag, key in UPDATE_KEYS}
    body = {key: value for key, value in given.items() if value is not None}
    if not body:
        raise InvalidRequest(
            "nothing to change: give --priority, --gpus, --max-runtime, --class or --boost"
        )
    job = ctx.client().patch_job(args.job, body)
    spec = job.get("spec") if isinstance(job.get("spec"), dict) else {}
    now = [f"{key}={spec.get(key)}" for _, key in UPDATE_KEYS[:4] if key in body]
    if "boost" in body:
        now.append(f"boost={job.get('boost')}")
    ctx.print(f"{args.job} updated: {' '.join(now)}")
    return 0


def drain_lines(drains: Sequence[Mapping[str, Any]]) -> list[str]:
    """`host drained by root: new driver` / `GPU 2 drained by tq-carol: fan noise`."""
    lines = []
    for drain in drains:
        gpu = drain.get("gpu")
        what = "host" if gpu is None else f"GPU {gpu}"
        lines.append(f"{what} drained by {drain.get('by')}: {drain.get('reason')}")
    return lines


def _drains_now(ctx: Context, body: Any) -> int:
    drains = body.get("drains", []) if isinstance(body, dict) else []
    ctx.print("\n".join(drain_lines(drains)) if drains else "nothing is drained")
    return 0


def drain(ctx: Context, args: argparse.Namespace) -> int:
    """POST /v1/drain: nothing new starts on those GPUs (or the host); prints every drain."""
    return _drains_now(ctx, ctx.client().post_drain(args.reason, args.gpus))


def resume(ctx: Context, args: argparse.Namespace) -> int:
    """POST /v1/resume: lift the drains of those GPUs (or all); prints what stays drained."""
    return _drains_now(ctx, ctx.client().post_resume(args.gpus))
