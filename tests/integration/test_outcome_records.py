"""An outcome is an `Outcome` in trainq's code and its text value on disk and in the
database: exit records written by older monitors and rows written by older trainqds read
back as members of the enum, and what is written now is the same text."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from tests.support.schema_history import downgrade
from trainq.core.outcomes import ExitRecord, Outcome
from trainq.core.spec import JobSpec
from trainqd.api.views import attempt_record
from trainqd.attempts.watcher import read_exit_record
from trainqd.monitor.records import EXIT_RECORD, write_exit_record
from trainqd.store import JobOwner, Store

OWNER = JobOwner(uid=1000, gid=1000, user="alice")


def test_an_older_monitors_exit_record_reads_as_an_outcome(tmp_path: Path) -> None:
    # As monitors wrote it before outcomes were an enum: plain JSON text.
    old = {
        "job_id": 3,
        "attempt": 2,
        "outcome": "oom_killed",
        "started_at": 100.0,
        "ended_at": 110.0,
        "exit_code": 137,
        "signal": None,
        "reason": "out of memory",
    }
    (tmp_path / EXIT_RECORD).write_text(json.dumps(old))
    record = read_exit_record(tmp_path, 3, 2)
    assert record is not None
    assert record.outcome is Outcome.OOM_KILLED
    assert record.ending.outcome is Outcome.OOM_KILLED


def test_an_exit_record_is_written_with_the_outcomes_text(tmp_path: Path) -> None:
    path = tmp_path / EXIT_RECORD
    write_exit_record(str(path), ExitRecord(3, 2, Outcome.TIMED_OUT, 100.0, 110.0))
    assert json.loads(path.read_bytes())["outcome"] == "timed_out"
    again = read_exit_record(tmp_path, 3, 2)
    assert again is not None
    assert again.outcome is Outcome.TIMED_OUT


def test_an_older_databases_outcomes_read_as_outcomes(tmp_path: Path) -> None:
    """Rows an older trainqd wrote (schema 1, outcomes as text) read back as members, and
    the counters that select on an outcome's text still find them."""
    db = tmp_path / "trainq.db"
    store = Store.open(db)
    job = store.submit(JobSpec(command=["true"]), OWNER, 1.0)
    store.close()
    raw = sqlite3.connect(db)
    downgrade(raw, 1)
    raw.executemany(
        "INSERT INTO attempts(job_id, number, gpus, started_at, ended_at, outcome, retried)"
        " VALUES (?, ?, '[0]', ?, ?, ?, 1)",
        [(job.id, 1, 2.0, 3.0, "preempted"), (job.id, 2, 4.0, 5.0, "lost")],
    )
    raw.commit()
    raw.close()

    store = Store.open(db)
    try:
        attempts = store.attempts([job.id])[job.id]
        assert [a.outcome for a in attempts] == [Outcome.PREEMPTED, Outcome.LOST]
        assert all(isinstance(a.outcome, Outcome) for a in attempts)
        assert attempt_record(attempts[1]).outcome is Outcome.LOST
        totals = store.counter_totals()
    finally:
        store.close()
    assert (totals.preemptions, totals.retries) == (1, 1)
