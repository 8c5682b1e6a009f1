"""Deleting ended jobs (`trainq rm`, retention): the job's rows go, what it added to the
metrics' counters stays (`removed_totals`)."""

from __future__ import annotations

from trainq.core.errors import Conflict, NotFound
from trainq.core.states import TERMINAL, JobState
from trainqd.store.base import StoreBase
from trainqd.store.reports import counter_parts


class Deletion(StoreBase):
    def ended_before(self, cutoff: float, limit: int) -> tuple[list[int], float | None]:
        """Ids of up to `limit` jobs that ended before `cutoff`, oldest first, and when the
        first of the others ended (None: no other). Safe to call from a worker thread (a
        connection of its own): no index serves these scans, and a store of many thousands
        of ended jobs must not hold the event loop."""
        db = self._reader()
        try:
            ended = [str(s) for s in TERMINAL]
            marks = ",".join("?" * len(ended))
            rows = db.execute(
                f"SELECT id FROM jobs WHERE state IN ({marks}) AND ended_at<?"
                " ORDER BY ended_at LIMIT ?",
                [*ended, cutoff, limit],
            ).fetchall()
            (after,) = db.execute(
                f"SELECT min(ended_at) FROM jobs WHERE state IN ({marks}) AND ended_at>=?",
                [*ended, cutoff],
            ).fetchone()
        finally:
            db.close()
        return [int(r[0]) for r in rows], None if after is None else float(after)

    def delete_ended(self, job_id: int) -> None:
        """Delete an ended job's rows: its events, attempts and the job itself."""
        with self._tx():
            row = self._db.execute(
                "SELECT state, owner_user FROM jobs WHERE id=?", (job_id,)
            ).fetchone()
            if row is None:
                raise NotFound(f"no job {job_id}")
            if JobState(row[0]) not in TERMINAL:
                raise Conflict(f"job {job_id} is {row[0]}; only an ended job can be removed")
            # What the job added to the metrics' counters outlives it.
            parts, args = counter_parts(job_id)
            self._db.execute(
                f"INSERT INTO removed_totals(metric, label, value) SELECT * FROM ({parts})"
                " WHERE true"  # an upsert from a SELECT needs its WHERE (SQLite's parser)
                " ON CONFLICT(metric, label) DO UPDATE SET value = value + excluded.value",
                args,
            )
            self._db.execute("DELETE FROM events WHERE job_id=?", (job_id,))
            self._db.execute("DELETE FROM attempts WHERE job_id=?", (job_id,))
            self._db.execute("DELETE FROM jobs WHERE id=?", (job_id,))
        self._memory.removed(job_id, str(row[0]), str(row[1]))
