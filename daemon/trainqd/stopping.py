"""Stopping jobs, the one home of it: a user's (or an admin's) stop, where a queued job ends
at once and a running one is moved to STOPPING and its monitor asked to stop the trainer
within the grace; and trainq's own stop of a running job (its GPUs idle too long).

Time limits are not stopped from here: the monitor enforces its attempt's deadline itself
and reports `timed_out`, which the daemon only records (endings.py, outcomes.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from trainq.core.errors import Conflict
from trainq.core.states import TERMINAL, JobState
from trainqd import plan_inputs
from trainqd.authorization import Authorizer
from trainqd.identity import account
from trainqd.store import JobRow, Store
from trainqd.watcher import Watcher


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
                stop_reason=f"stopped by {who} before it started",
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
            # A second stop may shorten the grace; the monitor never lengthens it.
            own_grace = plan_inputs.grace(job, self._default_grace)
            self._watcher().request_stop(job_id, own_grace if grace is None else grace, "user", uid)
        self._changed()
        return self._store.get(job_id)

    def stop_by_trainq(self, job_id: int, now: float, event: str, reason: str) -> None:
        """Stop a RUNNING job on trainq's own account, with the job's grace; TransitionError
        if it is no longer running, DiskFull if the stop cannot be recorded."""
        self._store.transition(job_id, JobState.STOPPING, now, event, stop_reason=reason)
        job = self._store.get(job_id)
        grace = plan_inputs.grace(job, self._default_grace)
        self._watcher().request_stop(job_id, grace, "user", None)
