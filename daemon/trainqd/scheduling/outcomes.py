"""What an ended attempt means for its job: a pure function of the job, its history and the
exit record (or its absence). The record is trainq.core.outcomes'; endings.py applies the
result to the store, in one transaction.

    exit 0                          -> COMPLETED (also when it finished during a stop's grace)
    stopped / timed out             -> STOPPED, stop_reason says who or what
    transient failure, retries left -> PENDING again, after the policy's backoff
    monitor lost, or host shut down -> PENDING again at once (the host's doing, not the job's)
    preempted                       -> PENDING again at once, retries not spent, keeping its
                                       place (its submit time orders it)
    paused (hold of a running job)  -> PENDING and held, retries not spent
    anything else                   -> FAILED, failure_reason from the attempt
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from trainq.core.outcomes import REASON_CHARS, Ending, ExitRecord, Outcome
from trainq.core.states import JobState
from trainqd.scheduling.retry import Decision, RetryPolicy, signal_name
from trainqd.store import AttemptRow, JobChanges, JobRow

PREEMPTED_BY = "preempted by job "  # a preemption's stop reason: "preempted by job 12 (alice)"
PAUSED_BY = "paused by "  # a pause's stop reason: "paused by alice"
LOST_REASON = "its monitor vanished without an exit record (host restart or killed monitor)"


@dataclass(frozen=True)
class Verdict:
    target: JobState
    outcome: Outcome
    exit_code: int | None
    signal: int | None
    reason: str | None
    started_at: float | None
    ended_at: float
    retried: bool
    event_reason: str
    changes: JobChanges = field(default_factory=JobChanges)

    @property
    def ending(self) -> Ending:
        """How the attempt ended, as the store records it."""
        return Ending(self.outcome, self.exit_code, self.signal, self.reason)


def describe(ended: Ending) -> str:
    """A failure in words when the trainer left none."""
    if ended.outcome == Outcome.SIGNALED and ended.signal is not None:
        return f"killed by {signal_name(ended.signal)}"
    if ended.outcome == Outcome.EXITED:
        return f"exited with status {ended.exit_code}"
    return ended.outcome.replace("_", " ")


def is_preemption(stop_reason: str | None) -> bool:
    return stop_reason is not None and stop_reason.startswith(PREEMPTED_BY)


def is_pause(stop_reason: str | None) -> bool:
    return stop_reason is not None and stop_reason.startswith(PAUSED_BY)


def was_paused(job: JobRow) -> bool:
    """Whether the job is being paused (`trainq hold` of a running job), as `was_preempted`
    asks of a preemption: a user's stop meanwhile makes it a stop."""
    return job.state == JobState.STOPPING and is_pause(job.stop_reason)


def was_preempted(job: JobRow) -> bool:
    """Whether trainq is preempting the job, and nobody stopped it meanwhile. A `preempted`
    record is believed only then: the owner can write one in a subprocess job's attempt
    directory, and a free, immediate retry on demand would let a job loop for ever."""
    return job.state == JobState.STOPPING and is_preemption(job.stop_reason)


TIME_LIMIT = "time limit of "  # a time limit's stop reason: "time limit of 3600 s reached"


def time_limit_reason(job: JobRow) -> str:
    return f"{TIME_LIMIT}{job.spec.max_runtime_seconds} s reached"


def ended_by_time_limit(job: JobRow) -> bool:
    """A STOPPED job that its time limit ended (shown as TIMEOUT); the stop reason is
    trainqd's own words, never a user's."""
    return (
        job.state == JobState.STOPPED
        and job.stop_reason is not None
        and job.stop_reason.startswith(TIME_LIMIT)
    )


def judge_end(
    job: JobRow,
    history: list[AttemptRow],
    record: ExitRecord | None,
    now: float,
    policy: RetryPolicy | None = None,
) -> Verdict:
    """`history`: the job's attempts before the one that ended."""
    policy = policy or RetryPolicy.for_spec(job.spec)
    if record is None:
        ended = Ending(Outcome.LOST, reason=LOST_REASON)
        started_at, ended_at = None, now
    else:
        ended = record.ending
        started_at, ended_at = record.started_at, record.ended_at
    reason = (ended.reason or "")[:REASON_CHARS] or None

    def done(
        target: JobState, event: str, retried: bool = False, changes: JobChanges | None = None
    ) -> Verdict:
        changes = changes or JobChanges()
        if target in (JobState.COMPLETED, JobState.FAILED, JobState.STOPPED):
            changes = replace(changes, ended_at=now)
        return Verdict(
            target,
            ended.outcome,
            ended.exit_code,
            ended.signal,
            reason,
            started_at,
            ended_at,
            retried,
            event,
            changes,
        )

    if ended.outcome == Outcome.EXITED and ended.exit_code == 0:
        return done(JobState.COMPLETED, "completed")
    if ended.outcome == Outcome.PREEMPTED and was_preempted(job):
        # Whatever the trainer did in its grace (a checkpointing trainer often exits 0), it
        # has not finished: it resumes from its checkpoints with the next attempt.
        who = job.stop_reason or "preempted"
        return Verdict(
            JobState.PENDING,
            ended.outcome,
            ended.exit_code,
            ended.signal,
            who if reason is None else f"{who}: {reason.removeprefix('preempted: ')}",
            started_at,
            ended_at,
            True,
            who,
            JobChanges(preempted_count=job.preempted_count + 1),
        )
    if ended.outcome == Outcome.PREEMPTED and was_paused(job):
        # Paused: back to the queue, held by whoever paused it, retries not spent; its next
        # attempt, once released, finds its checkpoints as they were.
        who = job.stop_reason or PAUSED_BY
        return Verdict(
            JobState.PENDING,
            ended.outcome,
            ended.exit_code,
            ended.signal,
            who,
            started_at,
            ended_at,
            True,
            who,
            JobChanges(held_by=who.removeprefix(PAUSED_BY)),
        )
    if ended.outcome == Outcome.TIMED_OUT:
        return done(
            JobState.STOPPED, "time limit", changes=JobChanges(stop_reason=time_limit_reason(job))
        )
    if job.state == JobState.STOPPING or ended.outcome == Outcome.STOPPED:
        # However the trainer ended once asked to stop, the job was stopped.
        return done(
            JobState.STOPPED,
            "stopped",
            changes=JobChanges(stop_reason=job.stop_reason or "stopped"),
        )

    past = [
        Ending(a.outcome or Outcome.LOST, a.exit_code, a.signal, a.reason)
        for a in history
        if a.ended_at is not None
    ]
    decision: Decision = policy.decide(ended, past)
    failure = reason or describe(ended)
    if decision.retry:
        changes = JobChanges(
            not_before=now + decision.delay,
            lost_count=None if decision.counts else job.lost_count + 1,
        )
        return done(JobState.PENDING, f"retry: {decision.why}", retried=True, changes=changes)
    return done(JobState.FAILED, "failed", changes=JobChanges(failure_reason=failure))
