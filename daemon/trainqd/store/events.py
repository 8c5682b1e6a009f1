"""The event history: the rows that every change of a job writes, read as they come (the
event stream on the loop), a page at a time on worker threads (replays), and pruned
(event_pruning.py)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from trainqd.store.base import StoreBase
from trainqd.store.rows import EventRow, event_from

_EVENT_COLUMNS = "id, time, job_id, from_state, to_state, reason"


class EventReader:
    """A read-only connection for `page`, `cut` and `prunable` on worker threads, used by
    one stream or one pruning pass at a time; the caller closes it."""

    def __init__(self, db: sqlite3.Connection) -> None:
        db.row_factory = sqlite3.Row
        self._db = db

    def close(self) -> None:
        self._db.close()

    def page(self, since: int, job_id: int | None, limit: int) -> tuple[list[EventRow], int]:
        """Up to `limit` events after `since` (of one job, or all), and the id the next page
        starts after: the last event's, or when the page is not full, the last event stored
        then (a job's replay skips what it has already passed over)."""
        where, args = ("id>?", [since])
        if job_id is not None:
            where, args = "job_id=? AND id>?", [job_id, since]
        db = self._db
        db.execute("BEGIN")  # the page and the last id from one snapshot
        try:
            rows = [
                event_from(r)
                for r in db.execute(
                    f"SELECT {_EVENT_COLUMNS} FROM events WHERE {where} ORDER BY id LIMIT ?",
                    [*args, limit],
                )
            ]
            if len(rows) == limit:
                return rows, rows[-1].id
            (top,) = db.execute("SELECT max(id) FROM events").fetchone()
            return rows, max(since, int(top or 0))
        finally:
            db.execute("COMMIT")

    def cut(self, max_events: int, before: float | None) -> int:
        """The last id a pruning pass may remove: past the newest `max_events` (0: no such
        bound), or older than the time `before` (None: no such bound)."""
        (top,) = self._db.execute("SELECT max(id) FROM events").fetchone()
        cut = max(0, int(top or 0) - max_events) if max_events else 0
        if before is not None:
            (old,) = self._db.execute(
                "SELECT max(id) FROM events WHERE time<?", (before,)
            ).fetchone()
            cut = max(cut, int(old or 0))
        return cut

    def prunable(self, after: int, cut: int, limit: int) -> list[int]:
        """Ids after `after`, up to `cut`, of events that are not their job's latest (which
        is kept: `trainq wait` on an ended job reads its end there), oldest first."""
        rows = self._db.execute(
            "SELECT e.id FROM events e WHERE e.id>? AND e.id<=? AND EXISTS"
            " (SELECT 1 FROM events n WHERE n.job_id=e.job_id AND n.id>e.id)"
            " ORDER BY e.id LIMIT ?",
            (after, cut, limit),
        )
        return [int(r[0]) for r in rows]


class Events(StoreBase):
    def events_since(
        self, since: int, job_id: int | None = None, limit: int = 1000
    ) -> list[EventRow]:
        if job_id is None:
            cur = self._db.execute(
                f"SELECT {_EVENT_COLUMNS} FROM events WHERE id>? ORDER BY id LIMIT ?",
                (since, limit),
            )
        else:
            cur = self._db.execute(
                f"SELECT {_EVENT_COLUMNS} FROM events WHERE job_id=? AND id>? ORDER BY id LIMIT ?",
                (job_id, since, limit),
            )
        return [event_from(r) for r in cur]

    def last_event_id(self) -> int:
        row = self._db.execute("SELECT max(id) FROM events").fetchone()
        return int(row[0] or 0)

    def event_reader(self) -> EventReader:
        return EventReader(self._reader(any_thread=True))

    def events_pruned_before(self) -> int:
        """The id before which the history keeps only each job's latest event (0: nothing
        was pruned)."""
        row = self._db.execute("SELECT value FROM meta WHERE key='events_pruned_before'")
        found = row.fetchone()
        return int(found[0]) if found else 0

    def prune_events(self, ids: Sequence[int], pruned_before: int) -> None:
        """Delete the events `ids` (EventReader.prunable's) and record that the history
        before `pruned_before` keeps only each job's latest event, in one short transaction."""
        with self._tx():
            # An idle flag counted by the metrics outlives its event, as a removed job's do.
            marks = ",".join("?" * len(ids))
            (flags,) = self._db.execute(
                f"SELECT count(*) FROM events WHERE id IN ({marks})"
                " AND from_state = to_state AND reason LIKE 'GPUs idle%'",
                list(ids),
            ).fetchone()
            if flags:
                self._db.execute(
                    "INSERT INTO removed_totals(metric, label, value) VALUES ('idle_flags', '', ?)"
                    " ON CONFLICT(metric, label) DO UPDATE SET value = value + excluded.value",
                    (flags,),
                )
            self._db.executemany("DELETE FROM events WHERE id=?", [(i,) for i in ids])
            self._db.execute(
                "INSERT OR REPLACE INTO meta(key, value) VALUES ('events_pruned_before', ?)",
                (str(max(pruned_before, self.events_pruned_before())),),
            )
