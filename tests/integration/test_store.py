"""The store on a real SQLite file: durability, guarded transitions, events."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.factories import OWNER
from tests.support.schema_history import UNDO, downgrade
from trainq.core.errors import DiskFull, NotFound
from trainq.core.outcomes import Ending
from trainq.core.spec import JobSpec
from trainq.core.states import JobState, TransitionError
from trainqd.store import JobChanges, JobOwner, Store, StoreError
from trainqd.store.schema import MIGRATIONS, SCHEMA_VERSION


def test_submission_is_on_disk_when_submit_returns(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "trainq.db")
    job = store.submit(JobSpec(command=["true"], name="a"), OWNER, 100.0)
    # Another connection (another process, in effect) sees it at once.
    other = sqlite3.connect(tmp_path / "trainq.db")
    assert other.execute("SELECT state FROM jobs WHERE id=?", (job.id,)).fetchone() == ("PENDING",)
    assert store.events_since(0)[0].to_state == JobState.PENDING
    mode = other.execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_an_attempts_end_and_its_opt_ml_are_one_transaction(store: Store) -> None:
    """Whether the trainer found /opt/ml is written with the attempt's end, not in a second
    commit (and fsync) on the path between two jobs; an attempt that said nothing keeps
    NULL."""
    job = store.submit(JobSpec(command=["true"]), OWNER, 1.0)
    store.begin_attempt(job.id, (0,), ("u0",), 2.0)
    exited = Ending("exited", 0)
    ended: dict[str, Any] = {"attempt_started": 2.0, "attempt_ended": 3.0, "event_reason": "retry"}
    store.end_attempt(job.id, 1, JobState.PENDING, 3.0, exited, retried=True, opt_ml=False, **ended)
    assert store.attempts([job.id])[job.id][0].opt_ml is False
    store.begin_attempt(job.id, (0,), ("u0",), 4.0)
    store.end_attempt(job.id, 2, JobState.COMPLETED, 5.0, exited, retried=False, **ended)
    assert [a.opt_ml for a in store.attempts([job.id])[job.id]] == [False, None]


def test_guarded_transitions_and_events(store: Store) -> None:
    job = store.submit(JobSpec(command=["true"]), OWNER, 1.0)
    job, number = store.begin_attempt(job.id, (0, 1), ("u0", "u1"), 2.0)
    assert (job.state, number, job.gpus, job.started_at) == (JobState.RUNNING, 1, (0, 1), 2.0)
    with pytest.raises(TransitionError, match="a RUNNING job cannot become RUNNING"):
        store.begin_attempt(job.id, (2,), ("u2",), 3.0)
    job = store.end_attempt(
        job.id,
        1,
        JobState.PENDING,
        4.0,
        Ending("exited", 139, None, "segfault"),
        attempt_started=2.0,
        attempt_ended=4.0,
        retried=True,
        event_reason="retry",
        changes=JobChanges(not_before=10.0),
    )
    assert job.state == JobState.PENDING
    assert job.runtime_used == pytest.approx(2.0)
    assert job.not_before == 10.0
    job, number = store.begin_attempt(job.id, (3,), ("u3",), 11.0)
    assert number == 2
    assert job.started_at == 2.0  # the first attempt's start stays the job's start
    job = store.end_attempt(
        job.id,
        2,
        JobState.COMPLETED,
        12.0,
        Ending("exited", 0, None, None),
        attempt_started=11.0,
        attempt_ended=12.0,
        retried=False,
        event_reason="completed",
    )
    assert job.state == JobState.COMPLETED
    transitions = [(e.from_state, e.to_state) for e in store.events_since(0, job.id)]
    assert transitions == [
        (None, JobState.PENDING),
        (JobState.PENDING, JobState.RUNNING),
        (JobState.RUNNING, JobState.PENDING),
        (JobState.PENDING, JobState.RUNNING),
        (JobState.RUNNING, JobState.COMPLETED),
    ]
    with pytest.raises(TransitionError):
        store.transition(job.id, JobState.STOPPED, 13.0)
    # A refused transition writes no event.
    assert len(store.events_since(0, job.id)) == 5
    attempts = store.attempts([job.id])[job.id]
    assert [(a.number, a.exit_code, a.retried) for a in attempts] == [(1, 139, True), (2, 0, False)]


def test_an_attempt_ends_once(store: Store) -> None:
    job = store.submit(JobSpec(command=["true"]), OWNER, 1.0)
    store.begin_attempt(job.id, (), (), 2.0)

    def end() -> None:
        store.end_attempt(
            job.id,
            1,
            JobState.COMPLETED,
            3.0,
            Ending("exited", 0, None, None),
            attempt_started=2.0,
            attempt_ended=3.0,
            retried=False,
            event_reason="done",
        )

    end()
    with pytest.raises(TransitionError):
        end()


def test_an_attempt_is_recorded_as_its_ending_says(store: Store) -> None:
    """Each of the ending's fields lands in its own column, whatever the others hold."""
    job = store.submit(JobSpec(command=["true"]), OWNER, 1.0)
    store.begin_attempt(job.id, (), (), 2.0)
    ending = Ending("signaled", 137, 9, "killed by SIGKILL")
    store.end_attempt(
        job.id,
        1,
        JobState.FAILED,
        4.0,
        ending,
        attempt_started=None,  # as recorded when it began
        attempt_ended=4.0,
        retried=False,
        event_reason="failed",
    )
    (attempt,) = store.attempts([job.id])[job.id]
    recorded = Ending(attempt.outcome or "", attempt.exit_code, attempt.signal, attempt.reason)
    assert recorded == ending
    assert (attempt.started_at, attempt.ended_at) == (2.0, 4.0)
    assert store.get(job.id).runtime_used == pytest.approx(2.0)


def test_unknown_job(store: Store) -> None:
    with pytest.raises(NotFound, match="no job 42"):
        store.get(42)
    with pytest.raises(NotFound):
        store.transition(42, JobState.STOPPED, 1.0)


def test_reopen_keeps_everything(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "db")
    ids = [
        store.submit(JobSpec(command=["true"], priority=p), OWNER, float(p)).id for p in range(5)
    ]
    store.close()
    again = Store.open(tmp_path / "db")
    assert [j.id for j in again.jobs([JobState.PENDING])] == ids
    assert again.counts()["PENDING"] == 5


def test_refuses_a_newer_schema(tmp_path: Path) -> None:
    Store.open(tmp_path / "db").close()
    raw = sqlite3.connect(tmp_path / "db")
    raw.execute("UPDATE meta SET value='999' WHERE key='schema_version'")
    raw.commit()
    raw.close()
    with pytest.raises(StoreError, match="newer than this trainqd"):
        Store.open(tmp_path / "db")


def test_refuses_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    (tmp_path / "db").write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match="db:"):
        Store.open(tmp_path / "db")


def test_times_that_json_cannot_carry_are_never_read_back(store: Store) -> None:
    """A row written by an older trainqd from a forged exit record (1e300, inf) reads back
    as times a listing can show."""
    job = store.submit(JobSpec(command=["true"]), OWNER, 1.0)
    store.begin_attempt(job.id, (0,), ("u0",), 2.0)
    store._db.execute("UPDATE attempts SET ended_at=1e300, started_at=-5 WHERE job_id=?", (job.id,))
    store._db.execute(
        "UPDATE jobs SET ended_at=?, runtime_used=? WHERE id=?",
        (float("inf"), float("inf"), job.id),
    )
    attempt = store.attempts([job.id])[job.id][0]
    assert attempt.ended_at == 253402300799.0
    assert attempt.started_at == 0.0
    row = store.jobs()[0]
    assert (row.ended_at, row.runtime_used) == (None, 0.0)


def submit_until_refused(store: Store) -> DiskFull:
    for _ in range(1000):  # until the WAL needs a page more than the disk has
        try:
            store.submit(JobSpec(command=["true"]), OWNER, 2.0)
        except DiskFull as exc:
            return exc
    raise AssertionError("the disk never filled")


def test_a_full_disk_changes_nothing_and_is_told_as_disk_full(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], check=True)
    try:
        store = Store.open(disk / "trainq.db")
        kept = store.submit(JobSpec(command=["true"]), OWNER, 1.0)
        filler = disk / "filler"
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
        with contextlib.suppress(OSError):
            while True:
                os.write(fd, bytes(4096))
        os.close(fd)
        assert "disk is full" in submit_until_refused(store).message
        assert store.get(kept.id).state == JobState.PENDING  # reads work
        store.close()
        store = Store.open(disk / "trainq.db")  # and so does opening it again
        count = len(store.jobs())
        filler.unlink()
        store.submit(JobSpec(command=["true"]), OWNER, 3.0)  # room again: writes work
        assert len(store.jobs()) == count + 1
        store.close()
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_an_older_database_gains_the_listing_indexes(tmp_path: Path) -> None:
    Store.open(tmp_path / "db").close()
    raw = sqlite3.connect(tmp_path / "db")
    downgrade(raw, 2)  # before the listing indexes
    raw.close()
    Store.open(tmp_path / "db").close()
    raw = sqlite3.connect(tmp_path / "db")
    names = {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type='index'")}
    assert {"jobs_state_id", "jobs_user_id"} <= names
    assert raw.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() == (
        str(SCHEMA_VERSION),
    )
    plan = " ".join(
        str(r[-1])
        for r in raw.execute(
            "EXPLAIN QUERY PLAN SELECT id FROM jobs WHERE owner_user=? AND id>? ORDER BY id",
            ("a", 0),
        )
    )
    assert "jobs_user_id" in plan


def test_a_page_is_filtered_in_sql_and_says_what_follows(store: Store) -> None:
    bob = JobOwner(uid=1001, gid=1001, user="bob")
    ids = [store.submit(JobSpec(command=["true"]), (OWNER, bob)[n % 2], 1.0).id for n in range(7)]
    store.transition(ids[0], JobState.STOPPED, 2.0)
    jobs, total, more = store.page(None, "alice", 0, 2)
    assert ([j.id for j, _ in jobs], total, more) == ([ids[0], ids[2]], 4, True)
    jobs, total, more = store.page(None, "alice", ids[2], 2)
    assert ([j.id for j, _ in jobs], total, more) == ([ids[4], ids[6]], 4, False)
    jobs, total, more = store.page([JobState.PENDING], "alice", 0, 10)
    assert ([j.id for j, _ in jobs], total, more) == ([ids[2], ids[4], ids[6]], 3, False)


def test_every_migration_can_be_undone_for_the_tests_of_older_databases() -> None:
    assert set(UNDO) == set(MIGRATIONS)


def test_the_counts_kept_in_memory_match_the_database(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "db")
    ids = [store.submit(JobSpec(command=["true"]), OWNER, 1.0).id for _ in range(4)]
    store.transition(ids[0], JobState.STOPPED, 2.0, "stopped", stop_reason="user")
    store.stop_pending(ids[1:3], 2.0, "group stopped", stop_reason="user")
    store.delete_ended(ids[1])

    def counted(db: Store) -> dict[str, int]:
        raw = sqlite3.connect(tmp_path / "db")
        try:
            found = {str(s): 0 for s in JobState}
            found.update(raw.execute("SELECT state, count(*) FROM jobs GROUP BY state"))
            return found
        finally:
            raw.close()

    assert store.counts() == counted(store) == {**{str(s): 0 for s in JobState},
                                                "PENDING": 1, "STOPPED": 2}  # fmt: skip
    store.close()
    reopened = Store.open(tmp_path / "db")
    assert reopened.counts() == counted(reopened)
    other = JobOwner(uid=1001, gid=1001, user="bob")
    done = reopened.submit(JobSpec(command=["true"]), other, 3.0).id
    reopened.transition(done, JobState.STOPPED, 4.0, "stopped", stop_reason="user")
    raw = sqlite3.connect(tmp_path / "db")
    by_user = sorted(
        (str(state), str(user), int(n))
        for state, user, n in raw.execute(
            "SELECT state, owner_user, count(*) FROM jobs GROUP BY state, owner_user"
        )
    )
    raw.close()
    assert reopened.counts_by_user() == by_user
    reopened.close()
