"""The store's writes for sharing the workstation, on a real SQLite file: holds and changes
guarded on PENDING with their event rows, the jobs kept in memory refreshed, drains kept
across a reopen, an ended job's rows deleted whole."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.factories import OWNER
from trainq.core.errors import Conflict, NotFound
from trainq.core.outcomes import Ending
from trainq.core.spec import JobSpec
from trainq.core.states import JobState
from trainqd.store import JobChanges, Store
from trainqd.store.rows import HOST


def reasons(store: Store, job_id: int) -> list[str | None]:
    return [event.reason for event in store.events_since(0, job_id)]


def test_hold_and_release_are_events_of_a_pending_job(store: Store) -> None:
    job = store.submit(JobSpec(command=["true"]), OWNER, 1.0)
    assert store.set_hold(job.id, "alice", 2.0, "held by alice").held_by == "alice"
    assert store.jobs([JobState.PENDING])[0].held_by == "alice"  # the copy in memory
    assert store.set_hold(job.id, None, 3.0, "released by alice").held_by is None
    assert reasons(store, job.id) == ["submitted", "held by alice", "released by alice"]
    store.begin_attempt(job.id, (), (), 4.0)
    with pytest.raises(Conflict, match=r"^job 1 is RUNNING; only a pending job can be held$"):
        store.set_hold(job.id, "alice", 5.0, "held by alice")
    with pytest.raises(NotFound):
        store.set_hold(99, "alice", 5.0, "held by alice")


def test_a_change_rewrites_spec_priority_and_boost_in_memory_and_on_disk(
    tmp_path: Path, store: Store
) -> None:
    job = store.submit(JobSpec(command=["true"], priority=3, gpus=1), OWNER, 1.0)
    changed = JobSpec(command=["true"], priority=5, gpus=2)
    store.change_pending(job.id, changed, 7, 2.0, "updated by alice: priority 3 -> 5")
    (pending,) = store.jobs([JobState.PENDING])
    assert (pending.spec.gpus, pending.priority, pending.boost) == (2, 5, 7)
    reopened = Store.open(tmp_path / "trainq.db")
    again = reopened.get(job.id)
    assert (again.spec.gpus, again.priority, again.boost) == (2, 5, 7)
    assert reasons(store, job.id)[-1] == "updated by alice: priority 3 -> 5"
    store.begin_attempt(job.id, (0, 1), ("u0", "u1"), 3.0)
    with pytest.raises(Conflict, match="is RUNNING; only a pending job can be changed"):
        store.change_pending(job.id, JobSpec(command=["true"]), 0, 4.0, "updated")
    assert store.get(job.id).spec.gpus == 2


def test_drains_replace_lift_and_survive_a_reopen(tmp_path: Path, store: Store) -> None:
    store.drain([1, 2], "fan", "root", 1.0)
    store.drain([HOST, 2], "upgrade", "carol", 2.0)
    assert {g: (d.reason, d.by_user) for g, d in store.drains().items()} == {
        HOST: ("upgrade", "carol"),
        1: ("fan", "root"),
        2: ("upgrade", "carol"),
    }
    store.resume([2])
    assert sorted(Store.open(tmp_path / "trainq.db").drains()) == [HOST, 1]
    store.resume(None)
    assert store.drains() == {}


def test_only_an_ended_jobs_rows_are_deleted(store: Store) -> None:
    job = store.submit(JobSpec(command=["true"]), OWNER, 1.0)
    with pytest.raises(Conflict, match="only an ended job can be removed"):
        store.delete_ended(job.id)
    store.begin_attempt(job.id, (), (), 2.0)
    store.end_attempt(
        job.id,
        1,
        JobState.COMPLETED,
        3.0,
        Ending("exited", 0, None, None),
        attempt_started=2.0,
        attempt_ended=3.0,
        retried=False,
        event_reason="exited 0",
        changes=JobChanges(ended_at=3.0),
    )
    other = store.submit(JobSpec(command=["true"]), OWNER, 4.0)
    assert store.ended_before(3.5, 10) == ([job.id], None)
    assert store.ended_before(2.5, 10) == ([], 3.0)
    store.delete_ended(job.id)
    with pytest.raises(NotFound):
        store.get(job.id)
    assert store.attempts([job.id]) == {job.id: []}
    assert reasons(store, job.id) == []
    assert store.get(other.id).state == JobState.PENDING
