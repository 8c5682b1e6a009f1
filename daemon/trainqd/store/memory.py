"""The jobs that have not ended, kept in memory, and how many of the others ended how.

This daemon is the database's only writer, so its copy of the unfinished jobs stays exact
when refreshed after every write: planning on every event reads the whole queue, and
re-reading and re-parsing a queue of thousands from SQLite each time would cost tens of
milliseconds. Rows are replaced, never changed, so the same object means an unchanged job.
The ended jobs are only counted (`GET /v1/health` asks often; counting 100,000 rows each
time would hold the loop).
"""

from __future__ import annotations

import sqlite3
from collections import Counter

from trainq.core.states import TERMINAL, UNFINISHED, JobState
from trainqd.store.rows import JOB_COLUMNS, JobRow, job_from


class JobsInMemory:
    def __init__(self) -> None:
        self.rows: dict[int, JobRow] = {}  # the unfinished jobs by id
        # The stored size of each unfinished job's spec, and their sum per owner's uid: the
        # byte budget of budgets.py, exact from start-up on since it is read from the store.
        self._spec_sizes: dict[int, int] = {}
        self._spec_bytes: Counter[int] = Counter()
        self._ended: Counter[tuple[str, str]] = Counter()  # (state, user) -> jobs

    def load(self, db: sqlite3.Connection) -> None:
        """Read the unfinished jobs and the ended ones' counts (at start-up)."""
        marks = ",".join("?" * len(UNFINISHED))
        for row in db.execute(
            f"SELECT {JOB_COLUMNS} FROM jobs WHERE state IN ({marks})",
            [str(s) for s in UNFINISHED],
        ):
            self.keep(job_from(row), len(row["spec"].encode()))
        marks = ",".join("?" * len(TERMINAL))
        for state, user, count in db.execute(
            f"SELECT state, owner_user, count(*) FROM jobs WHERE state IN ({marks})"
            " GROUP BY state, owner_user",
            [str(s) for s in TERMINAL],
        ):
            self._ended[str(state), str(user)] = int(count)

    def keep(self, job: JobRow, spec_size: int | None = None) -> None:
        """Keep an unfinished job's row; `spec_size`: its spec's stored size when the spec is
        new (None: as it was)."""
        self.rows[job.id] = job
        if spec_size is not None:
            self._spec_bytes[job.owner.uid] += spec_size - self._spec_sizes.get(job.id, 0)
            self._spec_sizes[job.id] = spec_size

    def forget(self, job_id: int) -> JobRow | None:
        """No longer keep a job (it ended, or was removed); its row if it was kept."""
        job = self.rows.pop(job_id, None)
        size = self._spec_sizes.pop(job_id, None)
        if job is not None and size is not None:
            left = self._spec_bytes[job.owner.uid] - size
            if left:
                self._spec_bytes[job.owner.uid] = left
            else:
                del self._spec_bytes[job.owner.uid]
        return job

    def ended(self, job_id: int, state: JobState) -> None:
        """A kept job has ended: counted, and no longer kept."""
        job = self.forget(job_id)
        if job is not None:
            self._ended[str(state), job.owner.user] += 1

    def removed(self, job_id: int, state: str, user: str) -> None:
        """An ended job's rows were deleted: no longer counted."""
        self.forget(job_id)
        self._ended[state, user] -= 1

    def spec_bytes(self, uid: int) -> int:
        """What the specs of the user's unfinished jobs take as stored."""
        return self._spec_bytes.get(uid, 0)

    def counts(self) -> dict[str, int]:
        """Jobs by state."""
        counts = {str(s): 0 for s in JobState}
        for (state, _), count in self._ended.items():
            counts[state] += count
        for job in self.rows.values():
            counts[str(job.state)] += 1
        return counts

    def counts_by_user(self) -> list[tuple[str, str, int]]:
        """(state, user, jobs) for every pair that has a job."""
        counts: Counter[tuple[str, str]] = Counter(
            {key: n for key, n in self._ended.items() if n > 0}
        )
        for job in self.rows.values():
            counts[str(job.state), job.owner.user] += 1
        return sorted((state, user, n) for (state, user), n in counts.items())
