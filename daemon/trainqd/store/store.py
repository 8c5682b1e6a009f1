"""The SQLite store of jobs, attempts and events (docs/architecture.md).

One connection, used only from the event loop's thread: statements are short, and a commit
is one fsync of the WAL (~0.25 ms here), which is what "on disk before it is acknowledged"
costs. This daemon is the database's only writer (the state dir's lock), so the jobs that
have not ended are also kept in memory, refreshed after every write: planning on every
event reads the whole queue, and re-reading and re-parsing a queue of thousands from SQLite
each time would cost tens of milliseconds. A spec never changes once submitted, so each is
parsed once. Every state change is a guarded update (`... WHERE state IN (sources)`) written in
the same transaction as its event row, so the table in trainq.core.states is enforced by the
database as well as by the code, and the event stream can never miss or invent a change.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from trainq.core.errors import Conflict, DiskFull, NotFound
from trainq.core.outcomes import Outcome
from trainq.core.spec import JobSpec
from trainq.core.states import (
    TERMINAL,
    UNFINISHED,
    JobState,
    TransitionError,
    check_transition,
    sources_of,
)
from trainqd.store.rows import (
    ATTEMPT_COLUMNS,
    JOB_COLUMNS,
    AttemptRow,
    DrainRow,
    EventRow,
    JobOwner,
    JobRow,
    attempt_from,
    event_from,
    job_from,
)
from trainqd.store.schema import MIGRATIONS, SCHEMA, SCHEMA_VERSION

__all__ = [
    "AttemptRow",
    "EventRow",
    "JobChanges",
    "JobOwner",
    "JobRow",
    "NewJobs",
    "Store",
    "StoreError",
    "is_disk_full",
]


def _counter_parts(job_id: int | None) -> tuple[str, list[Any]]:
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


class StoreError(Exception):
    """The database cannot be used (corrupt, newer schema, unwritable)."""


DISK_FULL_MESSAGE = "trainqd's disk is full, so nothing was changed; try again once there is room"


def is_disk_full(exc: sqlite3.Error) -> bool:
    """SQLITE_FULL: a write found no room (the disk, or the filesystem's quota)."""
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and code & 0xFF == sqlite3.SQLITE_FULL


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


# How long a submission's client token is remembered (docs: "Idempotent submits").
SUBMIT_TOKEN_SECONDS = 7 * 86400


@dataclass(frozen=True)
class SubmitToken:
    """A client's token for one submission (the Idempotency-Key header), and the digest of
    the request it came with: the same token with another request is a mistake."""

    uid: int  # who sent it (whom the jobs run as may differ: root's `run_as_root`)
    token: str
    body_hash: str


@dataclass(frozen=True)
class Submitted:
    """What a token's first submission queued: `job_count` jobs from `first_id` on."""

    body_hash: str
    first_id: int
    job_count: int
    grouped: bool


class TokenUsed(Exception):
    """The submission's token had been used by its owner: nothing new was queued."""

    def __init__(self, submitted: Submitted) -> None:
        super().__init__(f"jobs {submitted.first_id}.. were queued with this token")
        self.submitted = submitted


@dataclass(frozen=True)
class CounterTotals:
    """The metrics' counters as the store knows them: every job ever submitted, ended,
    retried, preempted or flagged idle, removed jobs included (`removed_totals`)."""

    submitted: dict[str, int]  # by owner
    ended: dict[str, int]  # by final state
    retries: int
    preemptions: int
    idle_flags: int


@dataclass(frozen=True)
class NewJobs:
    """One submission: its specs, in order, queued together as its owner's. `grouped` (the
    list form of a submission, a sweep) gives each job the group id of the first."""

    specs: Sequence[JobSpec]
    owner: JobOwner
    grouped: bool = False
    group: int | None = None  # an existing group the jobs join (a tune's later trials)
    # The specs as stored (`model_dump_json`), when the caller made them off the event loop.
    spec_json: Sequence[str] | None = None
    # Stored with the jobs, in their transaction: the same token from the same owner later
    # gets these jobs back (TokenUsed) instead of new ones.
    token: SubmitToken | None = None


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


class Store:
    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        conn.row_factory = sqlite3.Row  # rows.py reads columns by name
        self._db = conn
        self._path = path
        self._unfinished: dict[int, JobRow] = {}
        # The stored size of each unfinished job's spec, and their sum per owner's uid: the
        # byte budget of budgets.py, exact from start-up on since it is read from the store.
        self._spec_sizes: dict[int, int] = {}
        self._spec_bytes: Counter[int] = Counter()
        # Ended jobs by state, kept as they end and are removed: `GET /v1/health` reports
        # them, and counting 100,000 rows at each health check would hold the loop.
        self._ended_counts: Counter[tuple[str, str]] = Counter()  # (state, user) -> jobs
        self.commits = 0  # write transactions committed: what group commit saves (metrics)
        self._drains: dict[int, DrainRow] = {}  # the drains table, read on every plan

    @classmethod
    def open(cls, path: Path) -> Store:
        try:
            # SQLite gives its -wal and -shm files the database file's mode.
            os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600))
            os.chmod(path, 0o600)
            conn = sqlite3.connect(path, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute("PRAGMA busy_timeout=5000")
            store = cls(conn, path)
            store._migrate()
            store._load_unfinished()
            store._load_drains()
        except DiskFull as exc:
            raise StoreError(f"{path}: {exc}") from None
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{path}: {exc}") from None
        except OSError as exc:
            raise StoreError(f"{path}: {exc.strerror}") from None
        return store

    def close(self) -> None:
        self._db.close()

    def _migrate(self) -> None:
        with self._tx():
            have = self._db.execute("SELECT name FROM sqlite_master WHERE name='meta'").fetchone()
            if have is None:
                for statement in SCHEMA:
                    self._db.execute(statement)
                self._db.execute(
                    "INSERT INTO meta(key, value) VALUES ('schema_version', ?)",
                    (str(SCHEMA_VERSION),),
                )
                return
            row = self._db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            version = int(row[0]) if row else 0
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"the state database has schema {version}, newer than this trainqd "
                    f"({SCHEMA_VERSION}); run the newer trainqd"
                )
            for step in range(max(version, 1) + 1, SCHEMA_VERSION + 1):
                for statement in MIGRATIONS[step]:
                    self._db.execute(statement)
            if version < SCHEMA_VERSION:
                self._db.execute(
                    "INSERT OR REPLACE INTO meta(key, value) VALUES ('schema_version', ?)",
                    (str(SCHEMA_VERSION),),
                )

    @property
    def instance(self) -> str:
        """This state's own name, made once: what tells its containers from another trainqd's
        on the same engine (two daemons both have a job 1)."""
        row = self._db.execute("SELECT value FROM meta WHERE key='instance'").fetchone()
        if row is not None:
            return str(row[0])
        made = os.urandom(4).hex()
        with self._tx():
            self._db.execute("INSERT INTO meta(key, value) VALUES ('instance', ?)", (made,))
        return made

    def transaction(self) -> AbstractContextManager[None]:
        """One write transaction, for the modules whose tables are their own (tune_store.py)."""
        return self._tx()

    @property
    def connection(self) -> sqlite3.Connection:
        return self._db

    def insert_jobs(self, submission: NewJobs, now: float) -> tuple[list[JobRow], list[int]]:
        """A submission's rows, and their specs' stored sizes, inside the caller's
        `transaction()`; kept in memory once the caller has committed, by `remember`."""
        return self._insert(submission, now)

    def remember(self, jobs: Sequence[JobRow], sizes: Sequence[int]) -> None:
        for job, size in zip(jobs, sizes, strict=True):
            self._keep(job, size)

    @contextmanager
    def _tx(self) -> Iterator[None]:
        """One write transaction. A full disk fails it as DiskFull (the caller's 507), with
        nothing changed: the database and the jobs in memory stay as they were."""
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield
                self._db.execute("COMMIT")
                self.commits += 1
            except BaseException:
                self._rollback()
                raise
        except sqlite3.OperationalError as exc:
            if is_disk_full(exc):
                raise DiskFull(DISK_FULL_MESSAGE) from None
            raise

    def _rollback(self) -> None:
        # A failed COMMIT may have rolled back already; a ROLLBACK that fails as well (the
        # disk again) leaves nothing more to undo.
        if self._db.in_transaction:
            with suppress(sqlite3.Error):
                self._db.execute("ROLLBACK")

    # -- the jobs not yet ended, in memory ------------------------------------------------

    def _load_unfinished(self) -> None:
        marks = ",".join("?" * len(UNFINISHED))
        for row in self._db.execute(
            f"SELECT {JOB_COLUMNS} FROM jobs WHERE state IN ({marks})",
            [str(s) for s in UNFINISHED],
        ):
            job = job_from(row)
            self._keep(job, len(row["spec"].encode()))
        marks = ",".join("?" * len(TERMINAL))
        for state, user, count in self._db.execute(
            f"SELECT state, owner_user, count(*) FROM jobs WHERE state IN ({marks})"
            " GROUP BY state, owner_user",
            [str(s) for s in TERMINAL],
        ):
            self._ended_counts[str(state), str(user)] = int(count)

    def _keep(self, job: JobRow, spec_size: int | None = None) -> None:
        """Keep an unfinished job's row in memory; `spec_size`: its spec's stored size when
        the spec is new (None: as it was)."""
        self._unfinished[job.id] = job
        if spec_size is not None:
            self._spec_bytes[job.owner.uid] += spec_size - self._spec_sizes.get(job.id, 0)
            self._spec_sizes[job.id] = spec_size

    def _forget(self, job_id: int) -> JobRow | None:
        """No longer keep a job in memory (it ended, or was removed); its row if it was."""
        job = self._unfinished.pop(job_id, None)
        size = self._spec_sizes.pop(job_id, None)
        if job is not None and size is not None:
            left = self._spec_bytes[job.owner.uid] - size
            if left:
                self._spec_bytes[job.owner.uid] = left
            else:
                del self._spec_bytes[job.owner.uid]
        return job

    def unfinished_spec_bytes(self, uid: int) -> int:
        """What the specs of the user's unfinished jobs take as stored (from memory)."""
        return self._spec_bytes.get(uid, 0)

    def _has_ended(self, job_id: int, state: JobState) -> None:
        """A job the store kept in memory has ended: counted, and no longer kept."""
        job = self._forget(job_id)
        if job is not None:
            self._ended_counts[str(state), job.owner.user] += 1

    def _refresh(self, job_id: int, spec: JobSpec | None = None) -> JobRow:
        """The job's row after a write, kept in memory while it has not ended."""
        row = self._db.execute(f"SELECT {JOB_COLUMNS} FROM jobs WHERE id=?", (job_id,)).fetchone()
        known = self._unfinished.get(job_id)
        job = job_from(row, spec if known is None else known.spec)
        if job.state in UNFINISHED:
            self._keep(job)
        else:
            self._has_ended(job_id, job.state)
        return job

    def unfinished_of_group(self, group: int) -> list[JobRow]:
        """The group's jobs that have not ended, in id order (from memory)."""
        return sorted(
            (job for job in self._unfinished.values() if job.group_id == group),
            key=lambda job: job.id,
        )

    def group_exists(self, group: int) -> bool:
        row = self._db.execute("SELECT 1 FROM jobs WHERE group_id=? LIMIT 1", (group,))
        return row.fetchone() is not None

    def states_named(self, job_id: int, group: bool) -> list[str]:
        """The states of job `job_id`, or of every job of group `job_id` (dependencies.py):
        from memory while they have not ended; [] if there is none."""
        if not group:
            known = self._unfinished.get(job_id)
            if known is not None:
                return [str(known.state)]
            row = self._db.execute("SELECT state FROM jobs WHERE id=?", (job_id,)).fetchone()
            return [] if row is None else [row[0]]
        rows = self._db.execute("SELECT state FROM jobs WHERE group_id=?", (job_id,))
        return [row[0] for row in rows]

    def unfinished_count(self, uid: int | None = None) -> int:
        """How many jobs have not ended: everyone's, or one user's (from memory)."""
        if uid is None:
            return len(self._unfinished)
        return sum(1 for job in self._unfinished.values() if job.owner.uid == uid)

    def unfinished(self, job_id: int) -> JobRow | None:
        """The job's row if it has not ended (from memory; rows are replaced, never changed,
        so the same object means an unchanged job), else None."""
        return self._unfinished.get(job_id)

    def has(self, state: JobState) -> bool:
        return any(job.state == state for job in self._unfinished.values())

    # -- reads ---------------------------------------------------------------------------

    def get(self, job_id: int) -> JobRow:
        known = self._unfinished.get(job_id)
        if known is not None:
            return known
        row = self._db.execute(f"SELECT {JOB_COLUMNS} FROM jobs WHERE id=?", (job_id,)).fetchone()
        if row is None:
            raise NotFound(f"no job {job_id}")
        return job_from(row)

    def submitted_with(self, uid: int, token: str) -> Submitted | None:
        """What the user's submission with this client token queued, if it is remembered."""
        row = self._db.execute(
            "SELECT body_hash, first_id, job_count, grouped FROM submit_tokens"
            " WHERE owner_uid=? AND token=?",
            (uid, token),
        ).fetchone()
        if row is None:
            return None
        return Submitted(str(row[0]), int(row[1]), int(row[2]), bool(row[3]))

    def jobs(
        self,
        states: Sequence[JobState] | None = None,
        owner_uid: int | None = None,
        limit: int | None = None,
    ) -> list[JobRow]:
        if states is not None and set(states) <= UNFINISHED and limit is None:
            return [
                job
                for job_id, job in sorted(self._unfinished.items())
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
    ) -> tuple[list[tuple[JobRow, list[AttemptRow]]], int, bool]:
        """One page of jobs (with their attempts) in id order after the id `after`, filtered
        in SQL (the indexes of schema.LIST_INDEXES), with the number of jobs the filters match
        and whether more follow the page.

        Safe to call from a worker thread: it reads through a connection of its own (WAL lets
        it read beside the writer), so a long page never holds the event loop."""
        db = self._reader()
        db.row_factory = sqlite3.Row
        try:
            return self._page(db, states, owner_user, after, limit, group=group)
        finally:
            db.close()

    def _reader(self, *, any_thread: bool = False) -> sqlite3.Connection:
        """A read-only connection of its own, for a worker thread (WAL: beside the writer);
        `any_thread`: for one that several worker threads use in turn."""
        return sqlite3.connect(
            f"{self._path.as_uri()}?mode=ro", uri=True, check_same_thread=not any_thread
        )

    @staticmethod
    def _page(
        db: sqlite3.Connection,
        states: Sequence[JobState] | None,
        owner_user: str | None,
        after: int,
        limit: int,
        *,
        group: int | None = None,
    ) -> tuple[list[tuple[JobRow, list[AttemptRow]]], int, bool]:
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

    def attempts(self, job_ids: Sequence[int]) -> dict[int, list[AttemptRow]]:
        out: dict[int, list[AttemptRow]] = {j: [] for j in job_ids}
        if not job_ids:
            return out
        marks = ",".join("?" * len(job_ids))
        for row in self._db.execute(
            f"SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE job_id IN ({marks})"
            " ORDER BY job_id, number",
            list(job_ids),
        ):
            out[row[0]].append(attempt_from(row))
        return out

    def attempt(self, job_id: int, number: int) -> AttemptRow | None:
        row = self._db.execute(
            f"SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE job_id=? AND number=?",
            (job_id, number),
        ).fetchone()
        return None if row is None else attempt_from(row)

    def events_since(
        self, since: int, job_id: int | None = None, limit: int = 1000
    ) -> list[EventRow]:
        if job_id is None:
            cur = self._db.execute(
                "SELECT id, time, job_id, from_state, to_state, reason FROM events"
                " WHERE id>? ORDER BY id LIMIT ?",
                (since, limit),
            )
        else:
            cur = self._db.execute(
                "SELECT id, time, job_id, from_state, to_state, reason FROM events"
                " WHERE job_id=? AND id>? ORDER BY id LIMIT ?",
                (job_id, since, limit),
            )
        return [event_from(r) for r in cur]

    # -- the event history: paged replays and pruning (streams.py, event_pruning.py) -------

    def event_reader(self) -> sqlite3.Connection:
        """A read-only connection for `event_page` and `prunable_events` on worker threads,
        used by one stream or one pruning pass at a time; the caller closes it."""
        db = self._reader(any_thread=True)
        db.row_factory = sqlite3.Row
        return db

    @staticmethod
    def event_page(
        db: sqlite3.Connection, since: int, job_id: int | None, limit: int
    ) -> tuple[list[EventRow], int]:
        """Up to `limit` events after `since` (of one job, or all), and the id the next page
        starts after: the last event's, or when the page is not full, the last event stored
        then (a job's replay skips what it has already passed over)."""
        where, args = ("id>?", [since])
        if job_id is not None:
            where, args = "job_id=? AND id>?", [job_id, since]
        db.execute("BEGIN")  # the page and the last id from one snapshot
        try:
            rows = [
                event_from(r)
                for r in db.execute(
                    "SELECT id, time, job_id, from_state, to_state, reason FROM events"
                    f" WHERE {where} ORDER BY id LIMIT ?",
                    [*args, limit],
                )
            ]
            if len(rows) == limit:
                return rows, rows[-1].id
            (top,) = db.execute("SELECT max(id) FROM events").fetchone()
            return rows, max(since, int(top or 0))
        finally:
            db.execute("COMMIT")

    def events_pruned_before(self) -> int:
        """The id before which the history keeps only each job's latest event (0: nothing
        was pruned)."""
        row = self._db.execute("SELECT value FROM meta WHERE key='events_pruned_before'")
        found = row.fetchone()
        return int(found[0]) if found else 0

    @staticmethod
    def event_cut(db: sqlite3.Connection, max_events: int, before: float | None) -> int:
        """The last id a pruning pass may remove: past the newest `max_events` (0: no such
        bound), or older than the time `before` (None: no such bound)."""
        (top,) = db.execute("SELECT max(id) FROM events").fetchone()
        cut = max(0, int(top or 0) - max_events) if max_events else 0
        if before is not None:
            (old,) = db.execute("SELECT max(id) FROM events WHERE time<?", (before,)).fetchone()
            cut = max(cut, int(old or 0))
        return cut

    @staticmethod
    def prunable_events(db: sqlite3.Connection, after: int, cut: int, limit: int) -> list[int]:
        """Ids after `after`, up to `cut`, of events that are not their job's latest (which
        is kept: `trainq wait` on an ended job reads its end there), oldest first."""
        rows = db.execute(
            "SELECT e.id FROM events e WHERE e.id>? AND e.id<=? AND EXISTS"
            " (SELECT 1 FROM events n WHERE n.job_id=e.job_id AND n.id>e.id)"
            " ORDER BY e.id LIMIT ?",
            (after, cut, limit),
        )
        return [int(r[0]) for r in rows]

    def prune_events(self, ids: Sequence[int], pruned_before: int) -> None:
        """Delete the events `ids` (prunable_events') and record that the history before
        `pruned_before` keeps only each job's latest event, in one short transaction."""
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

    def counts(self) -> dict[str, int]:
        """Jobs by state, from memory (no query: health checks ask often)."""
        counts = {str(s): 0 for s in JobState}
        for (state, _), count in self._ended_counts.items():
            counts[state] += count
        for job in self._unfinished.values():
            counts[str(job.state)] += 1
        return counts

    def counter_totals(self) -> CounterTotals:
        """The counters' totals, from every row and what removed jobs left (a start-up read:
        it counts the tables whole)."""
        totals: Counter[tuple[str, str]] = Counter()
        parts, args = _counter_parts(None)
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

    def counts_by_user(self) -> list[tuple[str, str, int]]:
        """(state, user, jobs) for every pair that has a job, from memory (a scrape asks)."""
        counts: Counter[tuple[str, str]] = Counter(
            {key: n for key, n in self._ended_counts.items() if n > 0}
        )
        for job in self._unfinished.values():
            counts[str(job.state), job.owner.user] += 1
        return sorted((state, user, n) for (state, user), n in counts.items())

    def usage_since(
        self, since: float, *, by_class: str | None = None
    ) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        """For usage reports: (key, state, created_at, ended_at) of every job that was
        submitted or ended since `since`, and (key, gpus, started_at, ended_at, idle seconds)
        of every attempt that ran since then. The key is the owner's name, or with `by_class`
        (the default class's name) the job's class. Safe from a worker thread, as `page`."""
        # The class lives in the spec: read with SQLite's JSON functions, not by parsing
        # every spec here.
        key = "owner_user" if by_class is None else "coalesce(json_extract(spec, '$.class'), ?)"
        first = () if by_class is None else (by_class,)
        db = self._reader()
        try:
            return self._usage_rows(db, key, first, since)
        finally:
            db.close()

    @staticmethod
    def _usage_rows(
        db: sqlite3.Connection, key: str, first: tuple[str, ...], since: float
    ) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        jobs = db.execute(
            f"SELECT {key}, state, created_at, ended_at FROM jobs"
            " WHERE created_at>=? OR ended_at>=?",
            (*first, since, since),
        ).fetchall()
        attempts = db.execute(
            f"SELECT {key}, a.gpus, a.started_at, a.ended_at, a.gpu_idle_seconds"
            " FROM attempts a JOIN jobs j ON j.id=a.job_id"
            " WHERE a.ended_at IS NULL OR a.ended_at>=?",
            (*first, since),
        ).fetchall()
        return [tuple(r) for r in jobs], [tuple(r) for r in attempts]

    def attempts_ended_since(self, since: float) -> list[tuple[int, str, str, float, float]]:
        """(owner uid, owner user, GPUs as JSON, started_at, ended_at) of every attempt that
        ended since `since`: what fair share is seeded with at start-up (fairshare.py)."""
        cur = self._db.execute(
            "SELECT j.owner_uid, j.owner_user, a.gpus, a.started_at, a.ended_at"
            " FROM attempts a JOIN jobs j ON j.id=a.job_id WHERE a.ended_at>=?",
            (since,),
        )
        return [(int(u), str(n), str(g), float(s), float(e)) for u, n, g, s, e in cur]

    # -- writes --------------------------------------------------------------------------

    def submit(self, spec: JobSpec, owner: JobOwner, now: float) -> JobRow:
        """Insert a PENDING job; durable when this returns."""
        return self._one(NewJobs([spec], owner), now)[0]

    def submit_many(self, specs: Sequence[JobSpec], owner: JobOwner, now: float) -> list[JobRow]:
        """Insert PENDING jobs in one transaction, as one group (the first job's id);
        durable when this returns."""
        return self._one(NewJobs(specs, owner, grouped=True), now)

    def _one(self, submission: NewJobs, now: float) -> list[JobRow]:
        (result,) = self.submit_batches([submission], now)
        if isinstance(result, BaseException):
            raise result
        return result

    def submit_batches(
        self, submissions: Sequence[NewJobs], now: float
    ) -> list[list[JobRow] | Exception]:
        """Several submissions in one transaction, so that one fsync makes them all durable
        (group commit: group_commit.py), each answered in its place: its jobs, or the error
        that kept it out. Each is written under a SAVEPOINT of its own, so one whose inserts
        fail is rolled back alone and the others still commit. A COMMIT that fails (a full
        disk) raises DiskFull for all of them, with nothing changed, in the database or in
        memory: the jobs join those kept in memory only once they are durable."""
        results: list[list[JobRow] | Exception] = []
        stored: list[tuple[list[JobRow], list[int]]] = []
        with self._tx():
            if any(submission.token for submission in submissions):
                self._db.execute(
                    "DELETE FROM submit_tokens WHERE created_at < ?", (now - SUBMIT_TOKEN_SECONDS,)
                )
            for submission in submissions:
                self._db.execute("SAVEPOINT submission")
                try:
                    rows, sizes = self._insert(submission, now)
                except (sqlite3.Error, TokenUsed) as exc:
                    self._db.execute("ROLLBACK TO submission")
                    self._db.execute("RELEASE submission")
                    disk_full = isinstance(exc, sqlite3.Error) and is_disk_full(exc)
                    results.append(DiskFull(DISK_FULL_MESSAGE) if disk_full else exc)
                    continue
                self._db.execute("RELEASE submission")
                results.append(rows)
                stored.append((rows, sizes))
        for rows, sizes in stored:
            for job, size in zip(rows, sizes, strict=True):
                self._keep(job, size)
        return results

    def _insert(self, submission: NewJobs, now: float) -> tuple[list[JobRow], list[int]]:
        """The rows of one submission, inside the caller's transaction: the jobs with
        executemany, one event row each, and the rows built from what was written rather
        than read back one by one (a sweep of 10,000 is one request)."""
        specs, owner = submission.specs, submission.owner
        if submission.token is not None:
            # Checked under the write lock: two requests with one token queue once.
            earlier = self.submitted_with(submission.token.uid, submission.token.token)
            if earlier is not None:
                raise TokenUsed(earlier)
        sql = (
            "INSERT INTO jobs(name, state, priority, owner_uid, owner_gid, owner_user, spec,"
            " created_at, group_id) VALUES (?,?,?,?,?,?,?,?,?)"
        )
        pending = str(JobState.PENDING)
        head = (owner.uid, owner.gid, owner.user)

        texts = submission.spec_json or [spec.model_dump_json() for spec in specs]

        def values(n: int, group: int | None) -> tuple[Any, ...]:
            spec = specs[n]
            return (spec.name, pending, spec.priority, *head, texts[n], now, group)

        first = self._db.execute(sql, values(0, submission.group)).lastrowid
        assert first is not None
        group = first if submission.grouped else submission.group
        if submission.grouped:
            self._db.execute("UPDATE jobs SET group_id=? WHERE id=?", (group, first))
        self._db.executemany(sql, (values(n, group) for n in range(1, len(specs))))
        # AUTOINCREMENT under the write lock: the ids are consecutive from the first.
        ids = range(first, first + len(specs))
        (last,) = self._db.execute("SELECT max(id) FROM jobs").fetchone()
        if last != ids[-1]:
            raise sqlite3.IntegrityError(f"job ids {first}..{last} for {len(specs)} jobs")
        self._db.executemany(
            "INSERT INTO events(time, job_id, from_state, to_state, reason)"
            " VALUES (?,?,NULL,?,'submitted')",
            ((now, job_id, pending) for job_id in ids),
        )
        if (token := submission.token) is not None:
            self._db.execute(
                "INSERT INTO submit_tokens(owner_uid, token, body_hash, first_id, job_count,"
                " grouped, created_at) VALUES (?,?,?,?,?,?,?)",
                (
                    token.uid,
                    token.token,
                    token.body_hash,
                    first,
                    len(specs),
                    submission.grouped,
                    now,
                ),
            )
        rows = [
            JobRow(
                id=job_id,
                name=spec.name,
                state=JobState.PENDING,
                priority=spec.priority,
                owner=owner,
                spec=spec,
                gpus=(),
                gpu_uuids=(),
                created_at=now,
                started_at=None,
                ended_at=None,
                failure_reason=None,
                stop_reason=None,
                not_before=None,
                runtime_used=0.0,
                attempt_count=0,
                lost_count=0,
                group_id=group,
            )
            for job_id, spec in zip(ids, specs, strict=True)
        ]
        return rows, [len(text.encode()) for text in texts]

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
            self._has_ended(job_id, JobState.STOPPED)
        return stopped

    def begin_attempt(
        self, job_id: int, gpus: Sequence[int], uuids: Sequence[str], now: float
    ) -> tuple[JobRow, int]:
        """PENDING -> RUNNING with a new attempt row holding the assignment."""
        with self._tx():
            number = self._db.execute(
                "SELECT attempt_count + 1 FROM jobs WHERE id=?", (job_id,)
            ).fetchone()[0]
            self._guarded(
                job_id,
                JobState.RUNNING,
                now,
                f"attempt {number}",
                [
                    ("gpus=?", json.dumps(list(gpus))),
                    ("gpu_uuids=?", json.dumps(list(uuids))),
                    ("attempt_count=?", number),
                    ("not_before=?", None),
                    # A preemption's stop reason is over once the job runs again.
                    ("stop_reason=?", None),
                    ("started_at=COALESCE(started_at, ?)", now),
                ],
            )
            self._db.execute(
                "INSERT INTO attempts(job_id, number, gpus, started_at) VALUES (?,?,?,?)",
                (job_id, number, json.dumps(list(gpus)), now),
            )
        return self._refresh(job_id), number

    def record_monitor(
        self, job_id: int, number: int, pid: int, start: int | None, boot_id: str
    ) -> None:
        with self._tx():
            self._db.execute(
                "UPDATE attempts SET monitor_pid=?, monitor_start=?, boot_id=?"
                " WHERE job_id=? AND number=?",
                (pid, start, boot_id, job_id, number),
            )

    def record_gpu_use(
        self,
        job_id: int,
        number: int,
        *,
        utilization_peak: float | None,
        utilization_mean: float | None,
        memory_peak_mib: int | None,
        idle_seconds: float,
    ) -> None:
        """Keep what the sampler saw of an ended attempt's GPUs."""
        with self._tx():
            self._db.execute(
                "UPDATE attempts SET gpu_util_peak=?, gpu_util_mean=?, gpu_memory_peak_mib=?,"
                " gpu_idle_seconds=? WHERE job_id=? AND number=?",
                (utilization_peak, utilization_mean, memory_peak_mib, idle_seconds, job_id, number),
            )

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

    def end_attempt(
        self,
        job_id: int,
        number: int,
        target: JobState,
        now: float,
        *,
        attempt_started: float | None,
        attempt_ended: float,
        exit_code: int | None,
        signal: int | None,
        outcome: str,
        reason: str | None,
        retried: bool,
        event_reason: str | None,
        changes: JobChanges | None = None,
        opt_ml: bool | None = None,
    ) -> JobRow:
        """Close an attempt and move its job on, in one transaction (one fsync); `opt_ml`,
        where the monitor said, whether its trainer found /opt/ml."""
        with self._tx():
            attempt = self.attempt(job_id, number)
            if attempt is None or attempt.ended_at is not None:
                raise TransitionError(self.get(job_id).state, target)
            begun = attempt_started if attempt_started is not None else attempt.started_at
            self._db.execute(
                "UPDATE attempts SET ended_at=?, exit_code=?, signal=?, outcome=?, reason=?,"
                " retried=?, started_at=? WHERE job_id=? AND number=?",
                (
                    attempt_ended,
                    exit_code,
                    signal,
                    outcome,
                    reason,
                    int(retried),
                    begun,
                    job_id,
                    number,
                ),
            )
            if opt_ml is not None:
                self._db.execute(
                    "UPDATE attempts SET opt_ml=? WHERE job_id=? AND number=?",
                    (int(opt_ml), job_id, number),
                )
            used = max(0.0, attempt_ended - begun)
            assignments = [
                *(changes or JobChanges()).assignments(),
                ("runtime_used=runtime_used + ?", used),
            ]
            self._guarded(job_id, target, now, event_reason, assignments)
        return self._refresh(job_id)

    def _guarded(
        self,
        job_id: int,
        target: JobState,
        now: float,
        reason: str | None,
        assignments: Sequence[tuple[str, object]],
    ) -> None:
        """`assignments`: ("column=<expression with one ?>", its parameter), written by this
        module only."""
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

    def last_event_id(self) -> int:
        row = self._db.execute("SELECT max(id) FROM events").fetchone()
        return int(row[0] or 0)

    # -- sharing the workstation: holds, changes while pending, drains, removal ----------

    def _pending_only(self, job_id: int, action: str) -> None:
        """Conflict (one line) unless the job is PENDING, read inside the write transaction."""
        row = self._db.execute("SELECT state FROM jobs WHERE id=?", (job_id,)).fetchone()
        if row is None:
            raise NotFound(f"no job {job_id}")
        if row[0] != JobState.PENDING:
            raise Conflict(f"job {job_id} is {row[0]}; only a pending job can be {action}")

    def set_hold(self, job_id: int, held_by: str | None, now: float, reason: str) -> JobRow:
        """Hold a PENDING job back (`held_by`: who holds it) or release it (None), with an
        event row; Conflict if it is no longer pending."""
        with self._tx():
            self._pending_only(job_id, "held" if held_by else "released")
            self._db.execute(
                "UPDATE jobs SET held_by=? WHERE id=? AND state=?",
                (held_by, job_id, str(JobState.PENDING)),
            )
            self._event(job_id, now, JobState.PENDING, JobState.PENDING, reason)
        return self._refresh(job_id)

    def change_pending(
        self, job_id: int, spec: JobSpec, boost: int, now: float, reason: str
    ) -> JobRow:
        """Replace a PENDING job's spec (and its priority column) and boost, with an event
        row, in one transaction; Conflict if it started meanwhile."""
        with self._tx():
            self._pending_only(job_id, "changed")
            text = spec.model_dump_json()
            self._db.execute(
                "UPDATE jobs SET spec=?, priority=?, boost=? WHERE id=? AND state=?",
                (text, spec.priority, boost, job_id, str(JobState.PENDING)),
            )
            self._event(job_id, now, JobState.PENDING, JobState.PENDING, reason)
        self._unfinished.pop(job_id, None)  # so that the new spec is the one kept
        job = self._refresh(job_id, spec)
        self._keep(job, len(text.encode()))
        return job

    def change_running_limit(self, job_id: int, spec: JobSpec, now: float, reason: str) -> JobRow:
        """Replace a RUNNING job's spec (its time limit alone differs), with an event row, in
        one transaction; Conflict if it is no longer running."""
        with self._tx():
            row = self._db.execute("SELECT state FROM jobs WHERE id=?", (job_id,)).fetchone()
            if row is None:
                raise NotFound(f"no job {job_id}")
            if row[0] != JobState.RUNNING:
                raise Conflict(f"job {job_id} is {row[0]}; its time limit can no longer change")
            self._db.execute(
                "UPDATE jobs SET spec=? WHERE id=? AND state=?",
                (spec.model_dump_json(), job_id, str(JobState.RUNNING)),
            )
            self._event(job_id, now, JobState.RUNNING, JobState.RUNNING, reason)
        self._unfinished.pop(job_id, None)  # so that the new spec is the one kept
        return self._refresh(job_id, spec)

    def _load_drains(self) -> None:
        self._drains = {
            row["gpu"]: DrainRow(row["gpu"], row["reason"], row["by_user"], row["since"])
            for row in self._db.execute("SELECT gpu, reason, by_user, since FROM drains")
        }

    def drains(self) -> dict[int, DrainRow]:
        """Drained GPUs by index (rows.HOST: the whole host)."""
        return dict(self._drains)

    def drain(self, gpus: Sequence[int], reason: str, by_user: str, now: float) -> None:
        """Drain `gpus` (rows.HOST for the host); draining again replaces the reason."""
        with self._tx():
            self._db.executemany(
                "INSERT OR REPLACE INTO drains(gpu, reason, by_user, since) VALUES (?,?,?,?)",
                [(gpu, reason, by_user, now) for gpu in gpus],
            )
        self._load_drains()

    def resume(self, gpus: Sequence[int] | None) -> None:
        """Lift the drains of `gpus` (None: every drain, the host's included)."""
        with self._tx():
            if gpus is None:
                self._db.execute("DELETE FROM drains")
            else:
                self._db.executemany("DELETE FROM drains WHERE gpu=?", [(g,) for g in gpus])
        self._load_drains()

    def ended_before(self, cutoff: float, limit: int) -> tuple[list[int], float | None]:
        """Ids of up to `limit` jobs that ended before `cutoff`, oldest first, and when the
        first of the others ended (None: no other). Safe to call from a worker thread (a
        connection of its own, as `page`): no index serves these scans, and a store of
        many thousands of ended jobs must not hold the event loop."""
        db = sqlite3.connect(f"{self._path.as_uri()}?mode=ro", uri=True)
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
            parts, args = _counter_parts(job_id)
            self._db.execute(
                f"INSERT INTO removed_totals(metric, label, value) SELECT * FROM ({parts})"
                " WHERE true"  # an upsert from a SELECT needs its WHERE (SQLite's parser)
                " ON CONFLICT(metric, label) DO UPDATE SET value = value + excluded.value",
                args,
            )
            self._db.execute("DELETE FROM events WHERE job_id=?", (job_id,))
            self._db.execute("DELETE FROM attempts WHERE job_id=?", (job_id,))
            self._db.execute("DELETE FROM jobs WHERE id=?", (job_id,))
        self._forget(job_id)
        self._ended_counts[str(row[0]), str(row[1])] -= 1
