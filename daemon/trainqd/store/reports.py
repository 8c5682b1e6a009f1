"""Reports and totals: jobs by state (from memory), the metrics' counters (from every row,
and what removed rows left in `removed_totals`), and the rows of usage reports."""

from __future__ import annotations

import sqlite3
from collections import Counter
from dataclasses import dataclass
from typing import Any

from trainq.core.outcomes import Outcome
from trainq.core.states import TERMINAL
from trainqd.store.base import StoreBase


def counter_parts(job_id: int | None) -> tuple[str, list[Any]]:
    """A query of (metric, label, value) rows: what one job's rows add to the metrics'
    counters, or (None) what all rows do. A retried attempt with outcome `preempted` went
    back to the queue by a preemption (outcomes.judge_end); any other retried one, a retry."""
    jobs = "id=? AND " if job_id is not None else ""
    rows = "job_id=? AND " if job_id is not None else ""
    ids = [job_id] if job_id is not None else []
    terminal = sorted(str(state) for state in TERMINAL)
    sql = (
        f"SELECT 'submitted', owner_user, count(*) FROM jobs WHERE {jobs}1 GROUP BY owner_user"
        " UNION ALL SELECT 'ended', state, count(*) FROM jobs"
        f" WHERE {jobs}state IN ({','.join('?' * len(terminal))}) GROUP BY state"
        " UNION ALL SELECT 'preemptions', '', count(*) FROM attempts"
        f" WHERE {rows}retried=1 AND outcome='{Outcome.PREEMPTED}'"
        " UNION ALL SELECT 'retries', '', count(*) FROM attempts"
        f" WHERE {rows}retried=1 AND outcome IS NOT '{Outcome.PREEMPTED}'"
        " UNION ALL SELECT 'idle_flags', '', count(*) FROM events"
        f" WHERE {rows}from_state = to_state AND reason LIKE 'GPUs idle%'"
    )
    return sql, [*ids, *ids, *terminal, *ids, *ids, *ids]


@dataclass(frozen=True)
class CounterTotals:
    """The metrics' counters as the store knows them: every job ever submitted, ended,
    retried, preempted or flagged idle, removed jobs included (`removed_totals`)."""

    submitted: dict[str, int]  # by owner
    ended: dict[str, int]  # by final state
    retries: int
    preemptions: int
    idle_flags: int


class Reports(StoreBase):
    def counts(self) -> dict[str, int]:
        """Jobs by state, from memory (no query: health checks ask often)."""
        return self._memory.counts()

    def counts_by_user(self) -> list[tuple[str, str, int]]:
        """(state, user, jobs) for every pair that has a job, from memory (a scrape asks)."""
        return self._memory.counts_by_user()

    def counter_totals(self) -> CounterTotals:
        """The counters' totals, from every row and what removed jobs left (a start-up read:
        it counts the tables whole)."""
        totals: Counter[tuple[str, str]] = Counter()
        parts, args = counter_parts(None)
        sql = f"{parts} UNION ALL SELECT metric, label, value FROM removed_totals"
        for metric, label, value in self._db.execute(sql, args):
            totals[str(metric), str(label)] += int(value)

        def by_label(metric: str) -> dict[str, int]:
            return {label: n for (name, label), n in totals.items() if name == metric and n}

        return CounterTotals(
            submitted=by_label("submitted"),
            ended=by_label("ended"),
            retries=totals["retries", ""],
            preemptions=totals["preemptions", ""],
            idle_flags=totals["idle_flags", ""],
        )

    def usage_since(
        self, since: float, *, by_class: str | None = None
    ) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        """For usage reports: (key, state, created_at, ended_at) of every job that was
        submitted or ended since `since`, and (key, gpus, started_at, ended_at, idle seconds)
        of every attempt that ran since then. The key is the owner's name, or with `by_class`
        (the default class's name) the job's class. Safe from a worker thread: it reads
        through a connection of its own."""
        # The class lives in the spec: read with SQLite's JSON functions, not by parsing
        # every spec here.
        key = "owner_user" if by_class is None else "coalesce(json_extract(spec, '$.class'), ?)"
        first = () if by_class is None else (by_class,)
        db = self._reader()
        try:
            return _usage_rows(db, key, first, since)
        finally:
            db.close()


def _usage_rows(
    db: sqlite3.Connection, key: str, first: tuple[str, ...], since: float
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    jobs = db.execute(
        f"SELECT {key}, state, created_at, ended_at FROM jobs WHERE created_at>=? OR ended_at>=?",
        (*first, since, since),
    ).fetchall()
    attempts = db.execute(
        f"SELECT {key}, a.gpus, a.started_at, a.ended_at, a.gpu_idle_seconds"
        " FROM attempts a JOIN jobs j ON j.id=a.job_id"
        " WHERE a.ended_at IS NULL OR a.ended_at>=?",
        (*first, since),
    ).fetchall()
    return [tuple(r) for r in jobs], [tuple(r) for r in attempts]
