"""The tunes' tables (schema.py's TUNES): each tuning experiment and each of its trials.

A trial's row is written in the same transaction as its job, so a crash of trainqd at any
moment leaves either both or neither: no trial lost, none run twice. Its SQL lives here, on
the store's one connection and transactions.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any, Literal

from trainq.core.errors import NotFound
from trainq.core.spec import JobSpec
from trainq.core.tuning import TuneRequest
from trainqd.store.inserts import NewJobs
from trainqd.store.rows import JobOwner, JobRow, owner_from
from trainqd.store.store import Store

TuneState = Literal["RUNNING", "COMPLETED", "FAILED", "STOPPED"]
TrialState = Literal["running", "completed", "pruned", "failed", "stopped"]


@dataclass(frozen=True)
class TuneRow:
    id: int
    owner: JobOwner
    request: TuneRequest
    state: TuneState
    group_id: int | None
    created_at: float
    ended_at: float | None
    reason: str | None


@dataclass(frozen=True)
class TrialRow:
    tune_id: int
    number: int
    job_id: int
    params: dict[str, Any]
    state: TrialState
    value: float | None
    best: float | None
    step: float | None
    reason: str | None
    # pbt: the copy under way ({"from": n, "params": {...}}), and each resume's new values.
    exploit: dict[str, Any] | None = None
    history: tuple[dict[str, Any], ...] = ()


def _tune(row: sqlite3.Row) -> TuneRow:
    return TuneRow(
        id=row["id"],
        owner=owner_from(row),
        request=TuneRequest.model_validate_json(row["request"]),
        state=row["state"],
        group_id=row["group_id"],
        created_at=row["created_at"],
        ended_at=row["ended_at"],
        reason=row["reason"],
    )


def _trial(row: sqlite3.Row) -> TrialRow:
    return TrialRow(
        tune_id=row["tune_id"],
        number=row["number"],
        job_id=row["job_id"],
        params=json.loads(row["params"]),
        state=row["state"],
        value=row["value"],
        best=row["best"],
        step=row["step"],
        reason=row["reason"],
        exploit=None if row["exploit"] is None else json.loads(row["exploit"]),
        history=tuple(json.loads(row["history"])),
    )


class TuneStore:
    def __init__(self, store: Store) -> None:
        self._store = store
        self._db = store.connection

    def create(self, request: TuneRequest, owner: JobOwner, now: float) -> TuneRow:
        with self._store.transaction():
            cursor = self._db.execute(
                "INSERT INTO tunes(owner_uid, owner_gid, owner_user, request, state, created_at)"
                " VALUES (?,?,?,?,?,?)",
                (owner.uid, owner.gid, owner.user, request.model_dump_json(), "RUNNING", now),
            )
        assert cursor.lastrowid is not None
        return self.get(cursor.lastrowid)

    def get(self, tune_id: int) -> TuneRow:
        row = self._db.execute("SELECT * FROM tunes WHERE id=?", (tune_id,)).fetchone()
        if row is None:
            raise NotFound(f"no tune {tune_id}")
        return _tune(row)

    def tunes(self, *, unfinished: bool = False) -> list[TuneRow]:
        sql = "SELECT * FROM tunes WHERE state='RUNNING' OR ? ORDER BY id"
        rows = self._db.execute(sql, (0 if unfinished else 1,)).fetchall()
        return [_tune(row) for row in rows]

    def trials(self, tune_id: int) -> list[TrialRow]:
        rows = self._db.execute(
            "SELECT * FROM tune_trials WHERE tune_id=? ORDER BY number", (tune_id,)
        ).fetchall()
        return [_trial(row) for row in rows]

    def add_trial(
        self, tune: TuneRow, number: int, params: dict[str, Any], spec: JobSpec, now: float
    ) -> JobRow:
        """Queue the trial's job and record the trial, in one transaction; the first trial's
        job id becomes the tune's group."""
        first = tune.group_id is None
        submission = NewJobs([spec], tune.owner, grouped=first, group=tune.group_id)
        with self._store.transaction():
            (job,), sizes = self._store.insert_jobs(submission, now)
            if first:
                self._db.execute("UPDATE tunes SET group_id=? WHERE id=?", (job.id, tune.id))
            self._db.execute(
                "INSERT INTO tune_trials(tune_id, number, job_id, params, state)"
                " VALUES (?,?,?,?,'running')",
                (tune.id, number, job.id, json.dumps(params)),
            )
        self._store.remember([job], sizes)
        return job

    def update_trial(
        self,
        tune_id: int,
        number: int,
        state: TrialState,
        *,
        value: float | None,
        best: float | None,
        step: float | None,
        reason: str | None = None,
    ) -> None:
        with self._store.transaction():
            self._db.execute(
                "UPDATE tune_trials SET state=?, value=?, best=?, step=?, reason=?"
                " WHERE tune_id=? AND number=?",
                (state, value, best, step, reason, tune_id, number),
            )

    def set_exploit(self, tune_id: int, number: int, exploit: dict[str, Any]) -> None:
        with self._store.transaction():
            self._db.execute(
                "UPDATE tune_trials SET exploit=? WHERE tune_id=? AND number=?",
                (json.dumps(exploit), tune_id, number),
            )

    def exploited(
        self, tune_id: int, number: int, params: dict[str, Any], history: list[dict[str, Any]]
    ) -> None:
        """The copy is done: the trial goes on with `params`."""
        with self._store.transaction():
            self._db.execute(
                "UPDATE tune_trials SET exploit=NULL, params=?, history=?"
                " WHERE tune_id=? AND number=?",
                (json.dumps(params), json.dumps(history), tune_id, number),
            )

    def end(self, tune_id: int, state: TuneState, now: float, reason: str) -> None:
        with self._store.transaction():
            self._db.execute(
                "UPDATE tunes SET state=?, ended_at=?, reason=? WHERE id=? AND state='RUNNING'",
                (state, now, reason, tune_id),
            )
