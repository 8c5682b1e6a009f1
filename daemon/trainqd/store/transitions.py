"""A job's changes of state. Each is a guarded update (`... WHERE state IN (sources)`)
written in the same transaction as its event row, so the table in trainq.core.states is
enforced by the database as well as by the code, and the event stream can never miss or
invent a change."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from trainq.core.errors import NotFound
from trainq.core.states import JobState, TransitionError, check_transition, sources_of
from trainqd.store.base import StoreBase
from trainqd.store.rows import JobRow


@dataclass(frozen=True)
class JobChanges:
    """What a change of state also records on the job. None leaves a column as it is."""

    stop_reason: str | None = None
    failure_reason: str | None = None
    ended_at: float | None = None
    not_before: float | None = None  # retry backoff: not startable before this time
    lost_count: int | None = None
    preempted_count: int | None = None
    held_by: str | None = None  # a paused job comes back to the queue held

    def assignments(self) -> list[tuple[str, object]]:
        return [(f"{name}=?", value) for name, value in asdict(self).items() if value is not None]


class Transitions(StoreBase):
    def transition(
        self,
        job_id: int,
        target: JobState,
        now: float,
        reason: str | None = None,
        *,
        stop_reason: str | None = None,
        ended_at: float | None = None,
    ) -> JobRow:
        """Move a job to `target` if the lifecycle allows it from its current state."""
        changes = JobChanges(stop_reason=stop_reason, ended_at=ended_at)
        with self._tx():
            self._guarded(job_id, target, now, reason, changes.assignments())
        return self._refresh(job_id)

    def stop_pending(
        self, job_ids: Sequence[int], now: float, reason: str, *, stop_reason: str
    ) -> list[int]:
        """PENDING -> STOPPED for each of `job_ids` still pending, with its event row, all in
        one transaction (a group's stop); the ids it stopped."""
        check_transition(JobState.PENDING, JobState.STOPPED)
        stopped: list[int] = []
        with self._tx():
            for job_id in job_ids:
                cur = self._db.execute(
                    "UPDATE jobs SET state=?, stop_reason=?, ended_at=? WHERE id=? AND state=?",
                    (str(JobState.STOPPED), stop_reason, now, job_id, str(JobState.PENDING)),
                )
                if cur.rowcount == 1:
                    self._event(job_id, now, JobState.PENDING, JobState.STOPPED, reason)
                    stopped.append(job_id)
        for job_id in stopped:
            self._memory.ended(job_id, JobState.STOPPED)
        return stopped

    def restate_stop(self, job_id: int, now: float, stop_reason: str) -> JobRow:
        """A STOPPING job's stop changes hands (a user's stop of a job being preempted): its
        stop reason becomes `stop_reason`, with an event row that changes no state."""
        with self._tx():
            cur = self._db.execute(
                "UPDATE jobs SET stop_reason=? WHERE id=? AND state=?",
                (stop_reason, job_id, str(JobState.STOPPING)),
            )
            if cur.rowcount:
                self._event(job_id, now, JobState.STOPPING, JobState.STOPPING, stop_reason)
        return self._refresh(job_id)

    def note(self, job_id: int, now: float, reason: str) -> None:
        """An event that changes no state (a job's GPUs went idle): the event stream's
        readers hear of it as of any change, with from_state equal to to_state."""
        with self._tx():
            row = self._db.execute("SELECT state FROM jobs WHERE id=?", (job_id,)).fetchone()
            if row is None:
                raise NotFound(f"no job {job_id}")
            state = JobState(row[0])
            self._event(job_id, now, state, state, reason)

    def _guarded(
        self,
        job_id: int,
        target: JobState,
        now: float,
        reason: str | None,
        assignments: Sequence[tuple[str, object]],
    ) -> None:
        """`assignments`: ("column=<expression with one ?>", its parameter), written by this
        package only."""
        sets = ["state=?", *(sql for sql, _ in assignments)]
        args: list[Any] = [str(target), *(value for _, value in assignments)]
        sources = sorted(str(s) for s in sources_of(target))
        before = self._db.execute("SELECT state FROM jobs WHERE id=?", (job_id,)).fetchone()
        if before is None:
            raise NotFound(f"no job {job_id}")
        cur = self._db.execute(
            f"UPDATE jobs SET {', '.join(sets)} WHERE id=? AND state IN"
            f" ({','.join('?' * len(sources))})",
            [*args, job_id, *sources],
        )
        if cur.rowcount != 1:
            current = JobState(before[0])
            check_transition(current, target)  # raises with the real reason
            raise TransitionError(current, target)
        self._event(job_id, now, JobState(before[0]), target, reason)
