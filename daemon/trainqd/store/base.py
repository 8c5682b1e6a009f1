"""What every part of the store works with: the connection and its transactions, the jobs
kept in memory, a job's row read and kept after a write, and the event row that every
change of a job writes in its transaction."""

from __future__ import annotations

import sqlite3
from contextlib import AbstractContextManager
from pathlib import Path

from trainq.core.errors import NotFound
from trainq.core.spec import JobSpec
from trainq.core.states import UNFINISHED, JobState
from trainqd.store.database import instance_name, open_reader
from trainqd.store.memory import JobsInMemory
from trainqd.store.rows import JOB_COLUMNS, JobRow, job_from
from trainqd.store.transactions import Transactions


class StoreBase:
    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        conn.row_factory = sqlite3.Row  # rows.py reads columns by name
        self._db = conn
        self._path = path
        self._writes = Transactions(conn)
        self._memory = JobsInMemory()

    def close(self) -> None:
        self._db.close()

    @property
    def commits(self) -> int:
        """Write transactions committed: what group commit saves (metrics)."""
        return self._writes.commits

    @property
    def instance(self) -> str:
        """This state's own name (database.instance_name)."""
        return instance_name(self._db, self._writes)

    def transaction(self) -> AbstractContextManager[None]:
        """One write transaction, for the modules whose tables are their own (tunes.py)."""
        return self._writes.write()

    @property
    def connection(self) -> sqlite3.Connection:
        return self._db

    def _tx(self) -> AbstractContextManager[None]:
        return self._writes.write()

    def _reader(self, *, any_thread: bool = False) -> sqlite3.Connection:
        return open_reader(self._path, any_thread=any_thread)

    def get(self, job_id: int) -> JobRow:
        known = self._memory.rows.get(job_id)
        if known is not None:
            return known
        row = self._db.execute(f"SELECT {JOB_COLUMNS} FROM jobs WHERE id=?", (job_id,)).fetchone()
        if row is None:
            raise NotFound(f"no job {job_id}")
        return job_from(row)

    def _refresh(self, job_id: int, spec: JobSpec | None = None) -> JobRow:
        """The job's row after a write, kept in memory while it has not ended."""
        row = self._db.execute(f"SELECT {JOB_COLUMNS} FROM jobs WHERE id=?", (job_id,)).fetchone()
        known = self._memory.rows.get(job_id)
        job = job_from(row, spec if known is None else known.spec)
        if job.state in UNFINISHED:
            self._memory.keep(job)
        else:
            self._memory.ended(job_id, job.state)
        return job

    def _event(
        self,
        job_id: int,
        now: float,
        from_state: JobState | None,
        to_state: JobState,
        reason: str | None,
    ) -> None:
        self._db.execute(
            "INSERT INTO events(time, job_id, from_state, to_state, reason) VALUES (?,?,?,?,?)",
            (now, job_id, None if from_state is None else str(from_state), str(to_state), reason),
        )
