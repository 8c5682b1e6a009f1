"""Waiting for a job to end (`trainq wait`, `trainq submit --wait`): following its events
(`trainq.client.following`, which reconnects while trainqd is away, saying so once on
stderr), showing its progress on a terminal (`trainq.progress`) and how it ended.

Exit statuses (trainq.core.errors.ExitCode): 0 COMPLETED, 1 FAILED, 3 STOPPED, 9 TIMEOUT (STOPPED
by its time limit). Ctrl-C ends the
wait only; the job keeps running and the message says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from trainq.client.api import Api
from trainq.client.following import Followed, follow_until_ended
from trainq.core.errors import ExitCode, TrainqError
from trainq.core.states import TERMINAL, JobState
from trainq.humanize import end_summary
from trainq.progress import Progress

if TYPE_CHECKING:
    from trainq.context import Context

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


def _final_record(client: Api, job_id: int, event: Mapping[str, Any]) -> Mapping[str, Any]:
    """The ended job's record, for its failure or stop reason; the event if that fails."""
    try:
        job = client.get_job(job_id)
    except TrainqError:
        job = None
    if isinstance(job, dict) and job.get("state") in TERMINAL:
        return job
    state = event.get("to_state")
    reason = event.get("reason")
    return {"id": job_id, "state": state, "failure_reason": reason}


def wait_until_ended(ctx: Context, client: Api, job_id: int, state: Any = None) -> int:
    """Follow the job's events until it ends; report how on stderr; return the exit status."""
    shown = Progress(ctx, ctx.client(), job_id)  # the lines a terminal gets meanwhile
    followed = Followed(state, shown.event)

    def say_lost(problem: str) -> None:
        ctx.say(f"{problem}; still waiting for job {job_id} (reconnecting)")

    try:
        ended = follow_until_ended(client, job_id, followed, say_lost)
        shown.close()
        job = _final_record(client, job_id, ended)
        report_end(ctx, job)
        return job_exit_status(job)
    except KeyboardInterrupt:
        shown.close()
        where = f" ({followed.state})" if followed.state else ""
        ctx.say(
            f"stopped waiting; job {job_id}{where} keeps running (`trainq stop {job_id}` stops it)"
        )
        return INTERRUPTED
