"""Waiting for a job to end (`trainq wait`, `trainq submit --wait`) on the events stream.

The client follows `GET /v1/events?job=ID&since=N`: first the job's stored events, then live
ones, so a job that ends between the submit and the first read is never missed, and nothing
polls. A training run can outlast the daemon's process (an upgrade, a restart: the job's
monitor keeps it running), so a lost connection is not the end: the wait reconnects from the
last event it saw for up to `RECONNECT_SECONDS`, saying so once on stderr.

Exit statuses (trainq.core.errors.ExitCode): 0 COMPLETED, 1 FAILED, 3 STOPPED, 9 TIMEOUT (STOPPED
by its time limit). Ctrl-C ends the
wait only; the job keeps running and the message says so.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from trainq.client import Client, iter_lines
from trainq.core.errors import ExitCode, TrainqError, Unavailable
from trainq.core.states import TERMINAL, JobState
from trainq.humanize import end_summary
from trainq.progress import Progress

if TYPE_CHECKING:
    from trainq.commands import Context

RECONNECT_SECONDS = 120.0
RECONNECT_INTERVAL = 1.0
INTERRUPTED = 130  # as a shell reports a process ended by SIGINT

_EXIT_BY_STATE = {
    JobState.COMPLETED: ExitCode.OK,
    JobState.FAILED: ExitCode.FAILED,
    JobState.STOPPED: ExitCode.STOPPED,
}


def exit_status_of(state: Any) -> int:
    """The exit status for an ended job's state (FAILED's for anything unexpected)."""
    try:
        return int(_EXIT_BY_STATE.get(JobState(state), ExitCode.FAILED))
    except ValueError:
        return int(ExitCode.FAILED)


def job_exit_status(job: Mapping[str, Any]) -> int:
    """The exit status for an ended job's record: TIMEOUT's for one its time limit ended."""
    if job.get("state") == JobState.STOPPED and job.get("timed_out") is True:
        return int(ExitCode.TIMEOUT)
    return exit_status_of(job.get("state"))


def report_end(ctx: Context, job: Mapping[str, Any]) -> None:
    ctx.say(end_summary(job))


def _parse_event(line: bytes) -> dict[str, Any] | None:
    if not line.strip():
        return None  # a keep-alive
    try:
        event = json.loads(line)
    except ValueError:
        raise Unavailable(f"trainqd sent an event that is not JSON: {line[:80]!r}") from None
    return event if isinstance(event, dict) else None


class _Progress:
    """How far the wait has read: the last event's id (to resume after), the job's state,
    and how many lines have come (a stream that delivered something was a working one)."""

    def __init__(self, state: Any, shown: Progress | None = None) -> None:
        self.since = 0
        self.state = state
        self.lines = 0
        self.shown = shown  # the lines a terminal gets meanwhile (trainq.progress)


def _follow_once(client: Client, job_id: int, progress: _Progress) -> dict[str, Any] | None:
    """Read events until the job's terminal one (returned) or the stream's end (None)."""
    query = {"job": job_id, "since": progress.since}
    with client.stream("GET", "/v1/events", query) as chunks:
        for line in iter_lines(chunks):
            progress.lines += 1
            event = _parse_event(line)
            if event is None:
                continue
            if isinstance(event.get("id"), int):
                progress.since = max(progress.since, event["id"])
            if event.get("job_id", job_id) != job_id:
                continue
            progress.state = event.get("to_state", progress.state)
            if progress.shown is not None:
                progress.shown.event(event)
            if progress.state in TERMINAL:
                return event
    return None


def _final_record(client: Client, job_id: int, event: Mapping[str, Any]) -> Mapping[str, Any]:
    """The ended job's record, for its failure or stop reason; the event if that fails."""
    try:
        _, job = client.request("GET", f"/v1/jobs/{job_id}")
    except TrainqError:
        job = None
    if isinstance(job, dict) and job.get("state") in TERMINAL:
        return job
    state = event.get("to_state")
    reason = event.get("reason")
    return {"id": job_id, "state": state, "failure_reason": reason}


def follow_until_ended(
    client: Client,
    job_id: int,
    progress: _Progress | None = None,
    on_lost: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Read the job's events until its terminal one (returned), reconnecting from the last
    event seen while trainqd is away, for up to RECONNECT_SECONDS of outage; `on_lost` hears
    the first error of each outage."""
    progress = progress or _Progress(None)
    lost_at: float | None = None  # when trainqd was last seen working, if it is not now
    while True:
        lines_before = progress.lines
        try:
            ended = _follow_once(client, job_id, progress)
            if ended is not None:
                return ended
            problem = "trainqd closed the events stream"
        except Unavailable as exc:  # DaemonUnreachable included
            problem = exc.message
        now = time.monotonic()
        if progress.lines > lines_before:
            lost_at = None  # it worked for a while: this is a new outage
        if lost_at is None:
            lost_at = now
            if on_lost is not None:
                on_lost(problem)
        elif now - lost_at > RECONNECT_SECONDS:
            raise Unavailable(
                f"gave up waiting for job {job_id} after {RECONNECT_SECONDS:g} s "
                f"without trainqd; last error: {problem}"
            )
        time.sleep(RECONNECT_INTERVAL)


def wait_until_ended(ctx: Context, client: Client, job_id: int, state: Any = None) -> int:
    """Follow the job's events until it ends; report how on stderr; return the exit status."""
    progress = _Progress(state, Progress(ctx, ctx.client(), job_id))

    def say_lost(problem: str) -> None:
        ctx.say(f"{problem}; still waiting for job {job_id} (reconnecting)")

    try:
        ended = follow_until_ended(client, job_id, progress, say_lost)
        if progress.shown is not None:
            progress.shown.close()
        job = _final_record(client, job_id, ended)
        report_end(ctx, job)
        return job_exit_status(job)
    except KeyboardInterrupt:
        if progress.shown is not None:
            progress.shown.close()
        where = f" ({progress.state})" if progress.state else ""
        ctx.say(
            f"stopped waiting; job {job_id}{where} keeps running (`trainq stop {job_id}` stops it)"
        )
        return INTERRUPTED
