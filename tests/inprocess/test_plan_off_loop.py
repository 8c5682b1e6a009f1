"""A long queue is planned on a worker thread while the event loop goes on serving; what
changed meanwhile is not started on the strength of that plan (scheduler.PlanRound)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.support.inprocess import ME, OWNER, World, running
from trainq.core.reasons import Wait
from trainq.core.spec import JobSpec
from trainq.core.states import JobState
from trainqd.planning import planner
from trainqd.scheduling import scheduler
from trainqd.store import NewJobs

pytestmark = pytest.mark.asyncio


class HeldPlans:
    """planner.plan, held on its worker thread until the test lets it go; plans of an empty
    queue (the scheduler's first) pass at once."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.go = threading.Event()
        self.threads: list[str] = []
        self._plan = planner.plan

    def __call__(self, queue: Any, *args: Any, **kwargs: Any) -> planner.Plan:
        if queue:
            self.threads.append(threading.current_thread().name)
            self.entered.set()
            assert self.go.wait(10), "the test never let the plan go"
        return self._plan(queue, *args, **kwargs)

    async def wait_entered(self) -> None:
        assert await anyio.to_thread.run_sync(self.entered.wait, 10), "no plan was made"


@pytest.fixture
def held_plans(monkeypatch: pytest.MonkeyPatch) -> Iterator[HeldPlans]:
    plans = HeldPlans()
    monkeypatch.setattr(scheduler, "PLAN_OFF_LOOP_AT", 1)  # any queue counts as long
    monkeypatch.setattr(planner, "plan", plans)
    try:
        yield plans
    finally:
        plans.go.set()


async def until(condition: Any, what: str) -> None:
    """Bounded polling: the scheduler's tasks change what is polled and signal nothing."""
    deadline = anyio.current_time() + 10
    while not condition():
        assert anyio.current_time() < deadline, f"timed out waiting for {what}"
        await anyio.sleep(0.005)


async def left_waiting(world: World, job_id: int, kind: Wait) -> None:
    """The job was not started, and the next plan says it waits for `kind`."""

    def said() -> bool:
        why = world.scheduler.waiting.get(job_id)
        return why is not None and why.kind == kind

    await until(said, f"job {job_id} to wait: {kind}")
    assert world.state(job_id) == JobState.PENDING
    assert job_id not in world.watcher.launches


async def test_a_job_held_while_the_plan_was_made_is_not_started(
    tmp_path: Path, held_plans: HeldPlans
) -> None:
    async with running(tmp_path) as world:
        first = world.submit(gpus=1)
        second = world.submit(gpus=1)
        await held_plans.wait_entered()
        # The plan (both jobs start) is being made on a worker thread; the loop serves.
        assert threading.main_thread().name not in held_plans.threads
        await world.call("POST", "/v1/jobs/{id}/hold", id=str(second))
        held_plans.go.set()
        await until(lambda: world.state(first) == JobState.RUNNING, "the first job to start")
        # The held job was left out, and planned again at once: held, and said so.
        await left_waiting(world, second, Wait.HELD)


async def test_a_drain_while_the_plan_was_made_starts_nothing(
    tmp_path: Path, held_plans: HeldPlans
) -> None:
    async with running(tmp_path) as world:
        job = world.submit(gpus=1)
        await held_plans.wait_entered()
        await world.call("POST", "/v1/drain", {"gpus": [0, 1], "reason": "maintenance"})
        held_plans.go.set()
        await left_waiting(world, job, Wait.DRAINED)


async def test_a_job_queued_while_the_plan_was_made_keeps_its_reason(
    tmp_path: Path, held_plans: HeldPlans
) -> None:
    held_plans.go.set()  # the first plans pass
    async with running(tmp_path) as world:
        first = world.submit(gpus=2)
        head = world.submit(gpus=2)
        await until(lambda: world.state(first) == JobState.RUNNING, "the first job to start")
        await until(lambda: head in world.scheduler.waiting, "the head's reason")
        held_plans.go.clear()
        held_plans.entered.clear()
        world.scheduler.changed()
        await held_plans.wait_entered()
        before = world.scheduler.waiting
        # Behind the head, with no GPU free: given its reason at once, no plan needed.
        later = world.submit(gpus=2)
        assert world.scheduler.waiting[later].kind == Wait.GPUS
        held_plans.go.set()
        await until(lambda: world.scheduler.waiting is not before, "the plan to be carried out")
        assert world.scheduler.waiting[later].kind == Wait.GPUS
        assert world.scheduler.waiting[head].kind == Wait.GPUS


async def test_a_group_stopped_a_batch_at_a_time_starts_none_of_its_jobs_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A group's stop yields the loop between batches, where the scheduler plans (on the
    loop, small queues): the group's jobs still queued are not for it to start."""
    monkeypatch.setattr(scheduler, "STOP_BATCH", 10)
    async with running(tmp_path) as world:
        specs = [JobSpec(command=["true"], gpus=1) for _ in range(60)]
        # Queued behind the scheduler's back: no plan has seen them when the stop begins.
        (jobs,) = world.store.submit_batches([NewJobs(specs, OWNER, grouped=True)], time.time())
        assert isinstance(jobs, list)
        stopped, not_allowed = await world.scheduler.stop_many(jobs, ME.uid, 0.0)
        assert (len(stopped), not_allowed) == (60, 0)
        assert world.watcher.launches == {}
        assert {world.state(job.id) for job in jobs} == {JobState.STOPPED}
        # The GPUs are anyone else's at once.
        other = world.submit(gpus=2)
        await until(lambda: world.state(other) == JobState.RUNNING, "another job to start")
