"""The event history's bounds on a real store: the age bound and the count bound each prune
all but each job's latest event, in batches, and record from where history is pruned."""

from __future__ import annotations

import pytest

from trainq.core.spec import JobSpec
from trainq.core.states import JobState
from trainqd.scheduling import event_pruning
from trainqd.store import JobOwner, Store

pytestmark = pytest.mark.asyncio

OWNER = JobOwner(uid=1000, gid=1000, user="someone")
DAY = 86400.0


def event_ids(store: Store) -> list[int]:
    return [event.id for event in store.events_since(0, limit=1_000_000)]


def history(store: Store, now: float) -> None:
    """Job 1: submitted 40 days ago (event 1), held and released since (events 2-21, 20 of
    them, 39 days ago); job 2: submitted now (event 22)."""
    spec = JobSpec(command=["true"])
    (first,) = store.submit_many([spec], OWNER, now - 40 * DAY)
    for n in range(10):
        store.set_hold(first.id, "someone", now - 39 * DAY, f"held {n}")
        store.set_hold(first.id, None, now - 39 * DAY, f"released {n}")
    store.submit(spec, OWNER, now)
    assert event_ids(store) == list(range(1, 23))


async def test_the_age_bound_prunes_all_but_each_jobs_latest(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(event_pruning, "BATCH", 3)  # several batches, the last one short
    history(store, event_pruning.time.time())
    assert store.events_pruned_before() == 0
    assert await event_pruning.prune_once(store, 0, 30) == 20
    assert event_ids(store) == [21, 22]  # job 1's latest and job 2's
    assert store.events_pruned_before() == 22
    assert await event_pruning.prune_once(store, 0, 30) == 0
    assert store.get(1).state == JobState.PENDING


async def test_the_count_bound_keeps_the_newest(store: Store) -> None:
    history(store, event_pruning.time.time())
    assert await event_pruning.prune_once(store, 5, 0) == 17
    assert event_ids(store) == [18, 19, 20, 21, 22]
    assert store.events_pruned_before() == 18
    # Within both bounds, nothing goes; past either, all but each job's latest.
    assert await event_pruning.prune_once(store, 5, 50) == 0
    assert await event_pruning.prune_once(store, 5, 30) == 3
    assert event_ids(store) == [21, 22]
    assert store.events_pruned_before() == 22


async def test_an_idle_flag_pruned_still_counts_in_the_metrics_totals(store: Store) -> None:
    now = event_pruning.time.time()
    (job,) = store.submit_many([JobSpec(command=["true"])], OWNER, now - 40 * DAY)
    store.note(job.id, now - 39 * DAY, "GPUs idle: under 5% for 30m")
    store.note(job.id, now - 39 * DAY, "a later note, the job's latest event")
    assert store.counter_totals().idle_flags == 1
    assert await event_pruning.prune_once(store, 0, 30) == 2
    assert store.counter_totals().idle_flags == 1
