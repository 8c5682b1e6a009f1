"""Reads of jobs: from memory while they have not ended (planning reads the whole queue on
every event), from SQLite otherwise; listings, and pages read on worker threads."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from trainq.core.states import UNFINISHED, JobState
from trainqd.store.base import StoreBase
from trainqd.store.rows import (
    ATTEMPT_COLUMNS,
    JOB_COLUMNS,
    AttemptRow,
    JobRow,
    attempt_from,
    job_from,
)

Page = tuple[list[tuple[JobRow, list[AttemptRow]]], int, bool]


def _filters(states: Sequence[JobState] | None, **equal: object) -> tuple[list[str], list[Any]]:
    """A listing's WHERE terms and their arguments: the states, and each column of `equal`
    that is not None."""
    where: list[str] = []
    args: list[Any] = []
    if states is not None:
        where.append(f"state IN ({','.join('?' * len(states))})")
        args.extend(str(s) for s in states)
    for column, value in equal.items():
        if value is not None:
            where.append(f"{column}=?")
            args.append(value)
    return where, args


class Jobs(StoreBase):
    def unfinished(self, job_id: int) -> JobRow | None:
        """The job's row if it has not ended (from memory; rows are replaced, never changed,
        so the same object means an unchanged job), else None."""
        return self._memory.rows.get(job_id)

    def unfinished_count(self, uid: int | None = None) -> int:
        """How many jobs have not ended: everyone's, or one user's (from memory)."""
        if uid is None:
            return len(self._memory.rows)
        return sum(1 for job in self._memory.rows.values() if job.owner.uid == uid)

    def unfinished_of_group(self, group: int) -> list[JobRow]:
        """The group's jobs that have not ended, in id order (from memory)."""
        return sorted(
            (job for job in self._memory.rows.values() if job.group_id == group),
            key=lambda job: job.id,
        )

    def unfinished_spec_bytes(self, uid: int) -> int:
        """What the specs of the user's unfinished jobs take as stored (from memory)."""
        return self._memory.spec_bytes(uid)

    def has(self, state: JobState) -> bool:
        return any(job.state == state for job in self._memory.rows.values())

    def group_exists(self, group: int) -> bool:
        row = self._db.execute("SELECT 1 FROM jobs WHERE group_id=? LIMIT 1", (group,))
        return row.fetchone() is not None

    def states_named(self, job_id: int, group: bool) -> list[str]:
        """The states of job `job_id`, or of every job of group `job_id` (dependencies.py):
        from memory while they have not ended; [] if there is none."""
        if not group:
            known = self._memory.rows.get(job_id)
            if known is not None:
                return [str(known.state)]
            row = self._db.execute("SELECT state FROM jobs WHERE id=?", (job_id,)).fetchone()
            return [] if row is None else [row[0]]
        rows = self._db.execute("SELECT state FROM jobs WHERE group_id=?", (job_id,))
        return [row[0] for row in rows]

    def jobs(
        self,
        states: Sequence[JobState] | None = None,
        owner_uid: int | None = None,
        limit: int | None = None,
    ) -> list[JobRow]:
        if states is not None and set(states) <= UNFINISHED and limit is None:
            return [
                job
                for job_id, job in sorted(self._memory.rows.items())
                if job.state in states and (owner_uid is None or job.owner.uid == owner_uid)
            ]
        where, args = _filters(states, owner_uid=owner_uid)
        sql = f"SELECT {JOB_COLUMNS} FROM jobs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY id DESC" if limit else " ORDER BY id"
        if limit:
            sql += f" LIMIT {int(limit)}"
        rows = [job_from(r) for r in self._db.execute(sql, args)]
        return sorted(rows, key=lambda j: j.id) if limit else rows

    def page(
        self,
        states: Sequence[JobState] | None,
        owner_user: str | None,
        after: int,
        limit: int,
        group: int | None = None,
    ) -> Page:
        """One page of jobs (with their attempts) in id order after the id `after`, filtered
        in SQL (the indexes of schema.LIST_INDEXES), with the number of jobs the filters match
        and whether more follow the page.

        Safe to call from a worker thread: it reads through a connection of its own (WAL lets
        it read beside the writer), so a long page never holds the event loop."""
        db = self._reader()
        db.row_factory = sqlite3.Row
        try:
            # A sweep's jobs by the (group_id, id) index, a user's by (owner_user, id).
            where, args = _filters(states, owner_user=owner_user, group_id=group)
            matching = (" WHERE " + " AND ".join(where)) if where else ""
            db.execute("BEGIN")  # the count and the page from one snapshot
            (total,) = db.execute(f"SELECT count(*) FROM jobs{matching}", args).fetchone()
            paged = matching + (" AND " if where else " WHERE ") + "id>?"
            rows = db.execute(
                f"SELECT {JOB_COLUMNS} FROM jobs{paged} ORDER BY id LIMIT ?",
                [*args, after, limit + 1],
            ).fetchall()
            jobs = [job_from(r) for r in rows[:limit]]
            attempts: dict[int, list[AttemptRow]] = {j.id: [] for j in jobs}
            if jobs:
                for row in db.execute(
                    f"SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE job_id BETWEEN ? AND ?"
                    " ORDER BY job_id, number",
                    (jobs[0].id, jobs[-1].id),
                ):
                    if row[0] in attempts:
                        attempts[row[0]].append(attempt_from(row))
            db.execute("COMMIT")
            return [(j, attempts[j.id]) for j in jobs], int(total), len(rows) > limit
        finally:
            db.close()
