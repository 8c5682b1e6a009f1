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
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from trainq.core.errors import DiskFull, NotFound
from trainq.core.spec import JobSpec
from trainq.core.states import UNFINISHED, JobState, TransitionError, check_transition, sources_of
from trainqd.rows import (
    ATTEMPT_COLUMNS,
    JOB_COLUMNS,
    AttemptRow,
    EventRow,
    JobOwner,
    JobRow,
    attempt_from,
    event_from,
    job_from,
)
from trainqd.schema import MIGRATIONS, SCHEMA, SCHEMA_VERSION

__all__ = [
    "AttemptRow",
    "EventRow",
    "JobChanges",
    "JobOwner",
    "JobRow",
    "Store",
    "StoreError",
    "is_disk_full",
]


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

    def assignments(self) -> list[tuple[str, object]]:
        return [(f"{name}=?", value) for name, value in asdict(self).items() if value is not None]


class Store:
    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        conn.row_factory = sqlite3.Row  # rows.py reads columns by name
        self._db = conn
        self._path = path
        self._unfinished: dict[int, JobRow] = {}

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

    @contextmanager
    def _tx(self) -> Iterator[None]:
        """One write transaction. A full disk fails it as DiskFull (the caller's 507), with
        nothing changed: the database and the jobs in memory stay as they were."""
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield
                self._db.execute("COMMIT")
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
            self._unfinished[job.id] = job

    def _refresh(self, job_id: int, spec: JobSpec | None = None) -> JobRow:
        """The job's row after a write, kept in memory while it has not ended."""
        row = self._db.execute(f"SELECT {JOB_COLUMNS} FROM jobs WHERE id=?", (job_id,)).fetchone()
        known = self._unfinished.get(job_id)
        job = job_from(row, spec if known is None else known.spec)
        if job.state in UNFINISHED:
            self._unfinished[job_id] = job
        else:
            self._unfinished.pop(job_id, None)
        return job

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
        where: list[str] = []
        args: list[Any] = []
        if states is not None:
            where.append(f"state IN ({','.join('?' * len(states))})")
            args.extend(str(s) for s in states)
        if owner_uid is not None:
            where.append("owner_uid=?")
            args.append(owner_uid)
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
    ) -> tuple[list[tuple[JobRow, list[AttemptRow]]], int, bool]:
        """One page of jobs (with their attempts) in id order after the id `after`, filtered
        in SQL (the indexes of schema.LIST_INDEXES), with the number of jobs the filters match
        and whether more follow the page.

        Safe to call from a worker thread: it reads through a connection of its own (WAL lets
        it read beside the writer), so a long page never holds the event loop."""
        db = sqlite3.connect(f"{self._path.as_uri()}?mode=ro", uri=True)
        db.row_factory = sqlite3.Row
        try:
            return self._page(db, states, owner_user, after, limit)
        finally:
            db.close()

    @staticmethod
    def _page(
        db: sqlite3.Connection,
        states: Sequence[JobState] | None,
        owner_user: str | None,
        after: int,
        limit: int,
    ) -> tuple[list[tuple[JobRow, list[AttemptRow]]], int, bool]:
        where: list[str] = []
        args: list[Any] = []
        if states is not None:
            where.append(f"state IN ({','.join('?' * len(states))})")
            args.extend(str(s) for s in states)
        if owner_user is not None:
            where.append("owner_user=?")
            args.append(owner_user)
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

    def counts(self) -> dict[str, int]:
        counts = {str(s): 0 for s in JobState}
        counts.update(self._db.execute("SELECT state, count(*) FROM jobs GROUP BY state"))
        return counts

    def counts_by_user(self) -> list[tuple[str, str, int]]:
        """(state, user, jobs) for every pair that has a job."""
        cur = self._db.execute(
            "SELECT state, owner_user, count(*) FROM jobs GROUP BY state, owner_user"
        )
        return [(str(state), str(user), int(n)) for state, user, n in cur]

    def usage_since(self, since: float) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        """For usage reports: (user, state, created_at, ended_at) of every job that was
        submitted or ended since `since`, and (user, gpus, started_at, ended_at, idle seconds)
        of every attempt that ran since then."""
        jobs = self._db.execute(
            "SELECT owner_user, state, created_at, ended_at FROM jobs"
            " WHERE created_at>=? OR ended_at>=?",
            (since, since),
        ).fetchall()
        attempts = self._db.execute(
            "SELECT j.owner_user, a.gpus, a.started_at, a.ended_at, a.gpu_idle_seconds"
            " FROM attempts a JOIN jobs j ON j.id=a.job_id"
            " WHERE a.ended_at IS NULL OR a.ended_at>=?",
            (since,),
        ).fetchall()
        return [tuple(r) for r in jobs], [tuple(r) for r in attempts]

    # -- writes --------------------------------------------------------------------------

    def submit(self, spec: JobSpec, owner: JobOwner, now: float) -> JobRow:
        """Insert a PENDING job; durable when this returns."""
        with self._tx():
            cur = self._db.execute(
                "INSERT INTO jobs(name, state, priority, owner_uid, owner_gid, owner_user, spec,"
                " created_at) VALUES (?,?,?,?,?,?,?,?)",
                (
                    spec.name,
                    JobState.PENDING,
                    spec.priority,
                    owner.uid,
                    owner.gid,
                    owner.user,
                    spec.model_dump_json(),
                    now,
                ),
            )
            job_id = cur.lastrowid
            assert job_id is not None
            self._event(job_id, now, None, JobState.PENDING, "submitted")
        return self._refresh(job_id, spec)

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

    def record_opt_ml(self, job_id: int, number: int, present: bool) -> None:
        """Keep whether an ended subprocess attempt's trainer found /opt/ml."""
        with self._tx():
            self._db.execute(
                "UPDATE attempts SET opt_ml=? WHERE job_id=? AND number=?",
                (int(present), job_id, number),
            )

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
    ) -> JobRow:
        """Close an attempt and move its job on, in one transaction."""
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
