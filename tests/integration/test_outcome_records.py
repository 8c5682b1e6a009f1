"""An outcome is an `Outcome` in trainq's code and its text value on disk and in the
database: exit records written by older monitors and rows written by older trainqds read
back as members of the enum, and what is written now is the same text."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from tests.support.schema_history import downgrade
from trainq.core.outcomes import ExitRecord, NodeEnd, Outcome
from trainq.core.spec import JobSpec
from trainq.core.states import JobState
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


GANG_RECORD = ExitRecord(
    4,
    1,
    Outcome.EXITED,
    100.0,
    110.0,
    exit_code=3,
    reason="algo-2: failing",
    nodes=(
        NodeEnd("algo-1", Outcome.STOPPED),
        NodeEnd("algo-2", Outcome.EXITED, exit_code=3, restarts=2),
        NodeEnd("algo-3", Outcome.SIGNALED, signal=9),
    ),
)


def test_a_gangs_record_keeps_each_nodes_end_beside_the_fields_older_trainqds_read(
    tmp_path: Path,
) -> None:
    write_exit_record(str(tmp_path / EXIT_RECORD), GANG_RECORD)
    raw = json.loads((tmp_path / EXIT_RECORD).read_bytes())
    # An older trainqd reads the fields it knows, each as it always was, and no other.
    assert {k: raw[k] for k in ("outcome", "exit_code", "signal", "reason")} == {
        "outcome": "exited",
        "exit_code": 3,
        "signal": None,
        "reason": "algo-2: failing",
    }
    assert raw["nodes"][1] == {
        "name": "algo-2",
        "outcome": "exited",
        "exit_code": 3,
        "signal": None,
        "restarts": 2,
    }
    again = read_exit_record(tmp_path, 4, 1)
    assert again == GANG_RECORD
    # And a record without nodes (a job of one node, an older monitor's) has none.
    del raw["nodes"]
    (tmp_path / EXIT_RECORD).write_text(json.dumps(raw))
    older = read_exit_record(tmp_path, 4, 1)
    assert older is not None
    assert older.nodes == ()


def test_the_store_keeps_each_nodes_end_and_reads_older_rows_without(tmp_path: Path) -> None:
    db = tmp_path / "trainq.db"
    store = Store.open(db)
    spec = JobSpec(command=["true"], instance_count=3)
    job = store.submit(spec, OWNER, 1.0)
    store.begin_attempt(job.id, [], [], 2.0)
    store.end_attempt(
        job.id,
        1,
        JobState.FAILED,
        3.0,
        GANG_RECORD.ending,
        attempt_started=2.0,
        attempt_ended=3.0,
        retried=False,
        event_reason=None,
        nodes=GANG_RECORD.nodes,
    )
    store.close()
    store = Store.open(db)
    try:
        (attempt,) = store.attempts([job.id])[job.id]
        assert attempt.nodes == GANG_RECORD.nodes
    finally:
        store.close()
    # A database of schema 7, from before nodes were kept: its attempts have none.
    raw = sqlite3.connect(db)
    downgrade(raw, 7)
    raw.close()
    store = Store.open(db)
    try:
        (attempt,) = store.attempts([job.id])[job.id]
        assert attempt.nodes == ()
    finally:
        store.close()
