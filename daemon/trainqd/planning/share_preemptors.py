"""Fair-share preemption must be paid for by running: a user whose job preempted another
user's job for fair share, and then ran less than `min_runtime_before_preemption_seconds`
(ended at once, was stopped, never started), may not preempt for fair share again until a
job of theirs has run that long.

Without it, a class that may both preempt and be preempted lets one user's zero-second jobs
take another user's GPUs every `min_runtime_before_preemption_seconds`, each time costing
the victim its work since its last checkpoint and its owner nothing. With it, a user's
jobs that end at once preempt once; the right comes back with real use of the GPUs.

The record is kept in memory: a restart of trainqd forgets it, which allows one more such
preemption at most.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from trainq.core.states import ACTIVE
from trainqd.store import AttemptRow, JobRow


class SharePreemptors:
    def __init__(self, min_runtime: float) -> None:
        self._min_runtime = min_runtime
        self._watched: dict[int, tuple[int, float]] = {}  # job -> (its owner, since when)
        self._barred: set[int] = set()

    @property
    def barred(self) -> frozenset[int]:
        """The users who may not preempt for fair share now."""
        return frozenset(self._barred)

    def preempted_for(self, job: JobRow, now: float) -> None:
        """`job` had running jobs of its own rank preempted for it, by fair share."""
        self._watched.setdefault(job.id, (job.owner.uid, now))

    def review(
        self,
        active: Sequence[JobRow],
        starts: Mapping[int, float],
        unfinished: Callable[[int], JobRow | None],
        attempts: Callable[[list[int]], Mapping[int, list[AttemptRow]]],
        now: float,
    ) -> None:
        """Judge the watched jobs that ran long enough or ended, and give the right back to
        each barred user with a job that has run long enough (`starts`: running attempts)."""
        enough = self._min_runtime
        if enough <= 0:  # any attempt may be preempted at once: nothing to buy
            return
        for job in active:
            start = starts.get(job.id)
            if start is not None and now - start >= enough:
                self._barred.discard(job.owner.uid)
                self._watched.pop(job.id, None)
        if not self._watched:
            return
        settled = [
            job_id
            for job_id in self._watched
            if (row := unfinished(job_id)) is None or row.state not in ACTIVE
        ]
        if not settled:
            return
        history = attempts(settled)
        for job_id in settled:
            owner, since = self._watched[job_id]
            ran = [a for a in history.get(job_id, []) if a.started_at >= since]
            ended = [a for a in ran if a.ended_at is not None]
            if any(a.ended_at - a.started_at >= enough for a in ended if a.ended_at):
                del self._watched[job_id]
            elif ended or unfinished(job_id) is None:
                # It ran too briefly, or ended without running: no right bought with it.
                self._barred.add(owner)
                del self._watched[job_id]
            # Still waiting to start after its victims: judged once it has run.
