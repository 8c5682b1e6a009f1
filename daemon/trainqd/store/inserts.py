"""New jobs: a submission's rows, with their event rows and its client token, committed
before it is acknowledged; several submissions in one transaction (group commit)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from trainq.core.errors import DiskFull
from trainq.core.spec import JobSpec
from trainq.core.states import JobState
from trainqd.store.base import StoreBase
from trainqd.store.rows import JobOwner, JobRow
from trainqd.store.transactions import DISK_FULL_MESSAGE, is_disk_full

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


_INSERT_JOB = (
    "INSERT INTO jobs(name, state, priority, owner_uid, owner_gid, owner_user, spec,"
    " created_at, group_id) VALUES (?,?,?,?,?,?,?,?,?)"
)


class Inserts(StoreBase):
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

    def insert_jobs(self, submission: NewJobs, now: float) -> tuple[list[JobRow], list[int]]:
        """A submission's rows, and their specs' stored sizes, inside the caller's
        `transaction()`; kept in memory once the caller has committed, by `remember`."""
        return self._insert(submission, now)

    def remember(self, jobs: Sequence[JobRow], sizes: Sequence[int]) -> None:
        for job, size in zip(jobs, sizes, strict=True):
            self._memory.keep(job, size)

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
            self.remember(rows, sizes)
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
        pending = str(JobState.PENDING)
        head = (owner.uid, owner.gid, owner.user)

        texts = submission.spec_json or [spec.model_dump_json() for spec in specs]

        def values(n: int, group: int | None) -> tuple[Any, ...]:
            spec = specs[n]
            return (spec.name, pending, spec.priority, *head, texts[n], now, group)

        first = self._db.execute(_INSERT_JOB, values(0, submission.group)).lastrowid
        assert first is not None
        group = first if submission.grouped else submission.group
        if submission.grouped:
            self._db.execute("UPDATE jobs SET group_id=? WHERE id=?", (group, first))
        self._db.executemany(_INSERT_JOB, (values(n, group) for n in range(1, len(specs))))
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
