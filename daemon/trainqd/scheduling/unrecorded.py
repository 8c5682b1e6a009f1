"""Attempt ends that trainqd knows of but could not record yet, because its disk is full.

The attempt has ended (its monitor said so, or is gone), but until its end is in the
database the job stays RUNNING there, and so holds its GPUs and is never launched again:
an end that cannot be written is kept here and written again, with a growing pause, until
the disk has room. A restart of trainqd meanwhile loses nothing: the exit record is still
on disk, and the next trainqd's reconciliation finds it.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainq.core.outcomes import ExitRecord

FIRST_PAUSE = 1.0
LONGEST_PAUSE = 30.0


@dataclass(frozen=True)
class Unrecorded:
    job_id: int
    number: int
    record: ExitRecord | None
    due: float
    pause: float


class Backlog:
    def __init__(self) -> None:
        self._ends: dict[int, Unrecorded] = {}

    def keep(self, job_id: int, number: int, record: ExitRecord | None, now: float) -> None:
        """Write it again later: after FIRST_PAUSE, then twice as long each time."""
        before = self._ends.get(job_id)
        pause = FIRST_PAUSE if before is None else min(before.pause * 2, LONGEST_PAUSE)
        self._ends[job_id] = Unrecorded(job_id, number, record, now + pause, pause)

    def recorded(self, job_id: int) -> None:
        self._ends.pop(job_id, None)

    def due(self, now: float) -> list[Unrecorded]:
        return [end for end in self._ends.values() if end.due <= now]

    def next_due(self) -> float | None:
        return min((end.due for end in self._ends.values()), default=None)

    def __contains__(self, job_id: int) -> bool:
        return job_id in self._ends
