"""Stopping jobs, the one home of it: a user's (or an admin's) stop, where a queued job ends
at once and a running one is moved to STOPPING and its monitor asked to stop the trainer
within the grace; trainq's own stop of a running job (its GPUs idle too long); and a
preemption, a stop after which the job is queued again.

Time limits are not stopped from here: the monitor enforces its attempt's deadline itself
and reports `timed_out`, which the daemon only records (endings.py, outcomes.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import suppress

from trainq.core.errors import Conflict
from trainq.core.states import TERMINAL, JobState
from trainqd.access.authorization import Authorizer
from trainqd.access.identity import account
from trainqd.attempts.watcher import Watcher
from trainqd.planning import inputs as plan_inputs
from trainqd.scheduling.outcomes import PAUSED_BY, PREEMPTED_BY, is_pause, is_preemption
from trainqd.store import JobRow, Store


class Stopping:
    def __init__(
        self,
        *,
        store: Store,
        authorizer: Authorizer,
        watcher: Callable[[], Watcher],
        default_grace: float,
        changed: Callable[[], None],
    ) -> None:
        self._store = store
        self._authorizer = authorizer
        self._watcher = watcher
        self._default_grace = default_grace
        self._changed = changed

    def stop(self, job_id: int, uid: int, grace: float | None) -> JobRow:
        job = self._store.get(job_id)
        self._authorizer.require_manage(uid, job)
        now = time.time()
        who = account(uid).user if uid != job.owner.uid else job.owner.user
        if job.state in TERMINAL:
            raise Conflict(f"job {job_id} has already ended ({job.state})")
        if job.state == JobState.PENDING:
            self._store.transition(
                job_id,
                JobState.STOPPED,
                now,
                f"stopped by {who}",
                stop_reason=_queued_stop_reason(who, ran=job.attempt_count > 0),
                ended_at=now,
            )
        else:
            if job.state == JobState.RUNNING:
                self._store.transition(
                    job_id,
                    JobState.STOPPING,
                    now,
                    f"stopped by {who}",
                    stop_reason=f"stopped by {who}",
                )
            elif is_preemption(job.stop_reason) or is_pause(job.stop_reason):
                # Being preempted or paused: it ends stopped, not queued again
                # (outcomes.judge_end).
                self._store.restate_stop(job_id, now, f"stopped by {who}")
            # A second stop may shorten the grace; the monitor never lengthens it.
            own_grace = plan_inputs.grace(job, self._default_grace)
            self._watcher().request_stop(job_id, own_grace if grace is None else grace, "user", uid)
        self._changed()
        return self._store.get(job_id)

    def stop_many(
        self, jobs: Sequence[JobRow], uid: int, grace: float | None
    ) -> tuple[list[int], int]:
        """Stop each of `jobs` the caller may stop, as `stop` does one (a sweep's group): the
        queued ones end together in one transaction, then the running ones are stopped one
        by one, and the scheduler hears of it once. The ids stopped, and how many of the
        jobs the caller may not stop."""
        mine = [job for job in jobs if self._authorizer.may_manage(uid, job)]
        if not mine:
            return [], len(jobs)
        now = time.time()
        owner = mine[0].owner
        who = account(uid).user if uid != owner.uid else owner.user
        queued = [job for job in mine if job.state == JobState.PENDING]
        stopped: list[int] = []
        for ran in (False, True):  # one transaction each: never started, or waiting again
            ids = [job.id for job in queued if (job.attempt_count > 0) == ran]
            if ids:
                stopped += self._store.stop_pending(
                    ids, now, f"stopped by {who}", stop_reason=_queued_stop_reason(who, ran=ran)
                )
        for job in mine:
            if job.state != JobState.PENDING and job.state not in TERMINAL:
                with suppress(Conflict):  # it ended meanwhile
                    self.stop(job.id, uid, grace)
                    stopped.append(job.id)
        self._changed()
        return sorted(stopped), len(jobs) - len(mine)

    def preempt(self, victim_id: int, for_job: JobRow, now: float) -> float:
        """Stop a RUNNING job of a preemptible class so that `for_job` can start: its
        monitor stops the trainer with the grace and records the attempt as `preempted`,
        and the job is queued again (outcomes.py). Returns when the grace is over;
        TransitionError if it is no longer running, DiskFull if the stop cannot be
        recorded."""
        reason = f"{PREEMPTED_BY}{for_job.id} ({for_job.owner.user})"
        self._store.transition(victim_id, JobState.STOPPING, now, reason, stop_reason=reason)
        job = self._store.get(victim_id)
        grace = plan_inputs.grace(job, self._default_grace)
        self._watcher().request_stop(victim_id, grace, "preempt", None)
        self._changed()
        return now + grace

    def pause(self, job_id: int, uid: int) -> JobRow:
        """Pause a RUNNING job (`trainq hold` of it): stopped as a preemption is, with its
        grace, then queued again held by whoever paused it (outcomes.judge_end), its
        checkpoints kept and no retry spent. TransitionError if it is no longer running."""
        job = self._store.get(job_id)
        self._authorizer.require_manage(uid, job, "hold")
        who = account(uid).user if uid != job.owner.uid else job.owner.user
        return self.pause_for(job_id, who, f"{PAUSED_BY}{who}")

    def pause_for(self, job_id: int, who: str, event: str) -> JobRow:
        """Pause a RUNNING job on `who`'s behalf (its owner's, for a tune), with `event` as
        the event row's reason. TransitionError if it is no longer running."""
        reason = f"{PAUSED_BY}{who}"
        self._store.transition(job_id, JobState.STOPPING, time.time(), event, stop_reason=reason)
        grace = plan_inputs.grace(self._store.get(job_id), self._default_grace)
        self._watcher().request_stop(job_id, grace, "preempt", None)
        self._changed()
        return self._store.get(job_id)

    def stop_by_trainq(self, job_id: int, now: float, event: str, reason: str) -> None:
        """Stop a RUNNING job on trainq's own account, with the job's grace; TransitionError
        if it is no longer running, DiskFull if the stop cannot be recorded."""
        self._store.transition(job_id, JobState.STOPPING, now, event, stop_reason=reason)
        job = self._store.get(job_id)
        grace = plan_inputs.grace(job, self._default_grace)
        self._watcher().request_stop(job_id, grace, "user", None)


def _queued_stop_reason(who: str, *, ran: bool) -> str:
    """Why a job stopped while it was PENDING: before it ever ran, or waiting to run again
    (a retry's backoff, a preemption)."""
    return f"stopped by {who} {'while it waited to run again' if ran else 'before it started'}"
