"""The scheduler, the API's handlers and the store in one process, on one event loop.

The real parts as app.py builds them (a temporary SQLite file for the store) with the fake
GPU backend; only the monitors are stood in for: `trainqd.attempts.fake_watcher.FakeWatcher`
implements the scheduler's `Watcher` protocol, records what it is asked, and ends attempts
when the test says so (tests/support/inprocess.py puts them together). Each test is a
sequence of submits, ends, stops, restarts and time limits, and takes milliseconds.
"""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest

from tests.support.inprocess import ME, PREEMPTING, World, running
from trainq.core.errors import Conflict
from trainq.core.outcomes import Outcome
from trainq.core.reasons import Wait
from trainq.core.states import JobState
from trainq.core.wire import JobRecord
from trainqd.planning.policy import CLAIM_SLACK
from trainqd.store import JobOwner, Store

pytestmark = pytest.mark.asyncio


async def test_a_job_starts_ends_and_frees_its_gpus(tmp_path: Path) -> None:
    async with running(tmp_path) as world:
        await _test_a_job_starts_ends_and_frees_its_gpus(world)


async def _test_a_job_starts_ends_and_frees_its_gpus(world: World) -> None:
    first = world.submit(gpus=2)
    second = world.submit(gpus=1)
    world.plan()
    assert world.state(first) == JobState.RUNNING
    assert world.state(second) == JobState.PENDING
    assert world.scheduler.waiting[second].kind == Wait.GPUS
    assert world.watcher.launches[first].job_id == first

    await world.watcher.end(first, Outcome.EXITED, 0)
    world.plan()
    assert world.state(first) == JobState.COMPLETED
    assert world.state(second) == JobState.RUNNING


async def test_the_api_shows_why_a_job_waits_as_data_and_words(tmp_path: Path) -> None:
    async with running(tmp_path) as world:
        await _test_the_api_shows_why_a_job_waits_as_data_and_words(world)


async def _test_the_api_shows_why_a_job_waits_as_data_and_words(world: World) -> None:
    world.submit(gpus=2)
    waiting = world.submit(gpus=1)
    world.plan()
    record = await world.call("GET", "/v1/jobs/{id}", id=str(waiting))
    assert isinstance(record, JobRecord)
    assert record.waiting is not None
    assert (record.waiting.kind, record.waiting.gpus, record.waiting.free) == (Wait.GPUS, 1, 0)
    assert record.pending_reason == "waiting for 1 GPU (0 free)"


async def test_a_stop_before_the_start_and_a_stop_while_running(tmp_path: Path) -> None:
    async with running(tmp_path) as world:
        await _test_a_stop_before_the_start_and_a_stop_while_running(world)


async def _test_a_stop_before_the_start_and_a_stop_while_running(world: World) -> None:
    running = world.submit(gpus=2)
    queued = world.submit(gpus=2)
    world.plan()
    await world.call("POST", "/v1/jobs/{id}/stop", {}, id=str(queued))
    assert world.state(queued) == JobState.STOPPED

    await world.call("POST", "/v1/jobs/{id}/stop", {"grace_seconds": 3.0}, id=str(running))
    assert world.state(running) == JobState.STOPPING
    assert world.watcher.stops == [(running, 3.0, "user")]
    with pytest.raises(Conflict):
        world.scheduler.stop(queued, ME.uid, None)

    await world.watcher.end(running, Outcome.STOPPED, 0)
    assert world.state(running) == JobState.STOPPED


async def test_a_transient_failure_is_retried_and_a_lost_monitor_runs_again(tmp_path: Path) -> None:
    async with running(tmp_path) as world:
        await _test_a_transient_failure_is_retried_and_a_lost_monitor_runs_again(world)


async def _test_a_transient_failure_is_retried_and_a_lost_monitor_runs_again(world: World) -> None:
    job = world.submit(retry_backoff_seconds=0.0)
    world.plan()
    await world.watcher.end(job, Outcome.LOST)
    assert world.state(job) == JobState.PENDING
    world.plan()
    assert world.state(job) == JobState.RUNNING
    assert world.store.get(job).attempt_count == 2


async def test_a_time_limit_is_the_monitors_and_trainqd_records_it(tmp_path: Path) -> None:
    async with running(tmp_path) as world:
        await _test_a_time_limit_is_the_monitors_and_trainqd_records_it(world)


async def _test_a_time_limit_is_the_monitors_and_trainqd_records_it(world: World) -> None:
    job = world.submit(max_runtime_seconds=1, stop_grace_seconds=0.5)
    world.plan()
    launch = world.watcher.launches[job]
    assert launch.deadline is not None
    assert launch.stop_grace_seconds == 0.5
    # The planner knows when the GPUs come free; trainqd itself stops nothing at the deadline.
    assert world.scheduler.deadlines[job] == launch.deadline
    world.scheduler.tick(launch.deadline + 0.01)
    assert world.state(job) == JobState.RUNNING
    assert world.watcher.stops == []
    with anyio.fail_after(10):
        await world.watcher.timed_out.wait()
    assert world.state(job) == JobState.STOPPED
    assert world.store.get(job).stop_reason == "time limit of 1 s reached"
    assert world.store.attempts([job])[job][0].outcome == Outcome.TIMED_OUT
    assert job not in world.scheduler.deadlines


async def test_after_a_restart_live_monitors_are_kept_and_vanished_ones_retried(
    tmp_path: Path,
) -> None:
    store = Store.open(tmp_path / "jobs.db")
    async with running(tmp_path, store) as before:
        kept, lost = before.submit(gpus=1), before.submit(gpus=1)
        before.plan()
        attempt = store.attempt(kept, 1)
        assert attempt is not None
        assert attempt.monitor_pid is not None
        alive = {attempt.monitor_pid}

    async with running(tmp_path, store, alive) as after:
        assert after.state(kept) == JobState.RUNNING
        assert after.state(lost) in (JobState.PENDING, JobState.RUNNING)
        assert store.attempts([lost])[lost][0].outcome == Outcome.LOST
        await after.watcher.end(kept, Outcome.EXITED, 0)
        assert after.state(kept) == JobState.COMPLETED
    store.close()


async def test_a_submission_that_cannot_start_is_told_why_in_the_same_words(
    tmp_path: Path,
) -> None:
    """A submission behind a waiting GPU job is not planned again (Scheduler.submitted):
    its reason must read as the planner's would."""
    async with running(tmp_path) as world:
        world.submit(gpus=2)
        head = world.submit(gpus=2)
        world.plan()
        assert world.scheduler.waiting[head].kind == Wait.GPUS
        behind = world.submit(gpus=1)
        record = await world.call("GET", "/v1/jobs/{id}", id=str(behind))
        assert record.pending_reason == "waiting for 1 GPU (0 free)"


async def test_trainqs_own_stop_of_an_idle_job_uses_the_jobs_grace(tmp_path: Path) -> None:
    async with running(tmp_path) as world:
        job = world.submit(gpus=1, stop_grace_seconds=4.0)
        world.plan()
        reason = "stopped by trainq: its GPUs were idle for 1s"
        world.daemon.stopping.stop_by_trainq(job, time.time(), "GPUs idle", reason)
        assert world.state(job) == JobState.STOPPING
        assert world.watcher.stops == [(job, 4.0, "user")]
        await world.watcher.end(job, Outcome.STOPPED, 0)
        assert world.state(job) == JobState.STOPPED
        assert world.store.get(job).stop_reason == reason


async def test_a_victim_is_preempted_once_and_queued_again_keeping_its_place(
    tmp_path: Path,
) -> None:
    async with running(tmp_path, config=PREEMPTING) as world:
        victim = world.submit(gpus=2)
        world.plan()
        assert world.state(victim) == JobState.RUNNING
        later = world.submit(gpus=2)  # low too: waits, never preempts
        urgent = world.submit(gpus=1, job_class="high")
        for _ in range(3):  # planned again and again while the victim stops: asked once
            world.plan()
        assert world.watcher.stops == [(victim, 7.0, "preempt")]
        assert world.state(victim) == JobState.STOPPING
        reason = f"preempted by job {urgent} ({ME.user})"
        assert world.store.get(victim).stop_reason == reason
        assert world.scheduler.waiting[urgent].kind == Wait.PREEMPTING

        await world.watcher.end(victim, Outcome.PREEMPTED, 0)
        world.plan()
        assert world.state(urgent) == JobState.RUNNING
        job = world.store.get(victim)
        assert (job.state, job.preempted_count, job.lost_count) == (JobState.PENDING, 1, 0)
        (attempt,) = world.store.attempts([victim])[victim]
        assert (attempt.outcome, attempt.reason) == (Outcome.PREEMPTED, reason)
        # It keeps its place: its submit time still puts it before the later low job.
        assert world.scheduler.place(victim) == 1
        assert world.scheduler.place(later) == 2

        await world.watcher.end(urgent, Outcome.EXITED, 0)
        world.plan()
        assert world.state(victim) == JobState.RUNNING
        assert world.store.get(victim).stop_reason is None
        assert world.state(later) == JobState.PENDING


async def test_a_users_stop_of_a_job_being_preempted_ends_it(tmp_path: Path) -> None:
    async with running(tmp_path, config=PREEMPTING) as world:
        victim = world.submit(gpus=2)
        world.plan()
        world.submit(gpus=1, job_class="high")
        world.plan()
        assert world.state(victim) == JobState.STOPPING
        world.scheduler.stop(victim, ME.uid, None)
        assert world.store.get(victim).stop_reason == f"stopped by {ME.user}"
        # The monitor keeps the first cause, the preemption; the user's stop wins.
        await world.watcher.end(victim, Outcome.PREEMPTED, 0)
        job = world.store.get(victim)
        assert (job.state, job.preempted_count) == (JobState.STOPPED, 0)


async def test_the_job_preempted_for_goes_first_until_it_changes(tmp_path: Path) -> None:
    """Its claim on the victims' GPUs lasts while they stop and CLAIM_SLACK after, and ends
    with any change to the job: a hold (or an update) cannot keep it to jump the queue."""
    async with running(tmp_path, config=PREEMPTING) as world:
        policy = world.daemon.policy
        victim = world.submit(gpus=2)
        world.plan()
        urgent = world.submit(gpus=1, job_class="high")
        before = time.time()
        world.plan()
        claim = policy.claims[urgent]
        assert claim.row is world.store.get(urgent)
        assert claim.victims == {victim}
        # The victim's grace is 7 s: its stop is due then, the claim CLAIM_SLACK later.
        assert before + 7 <= policy.stop_due[victim] <= time.time() + 7
        assert claim.until == policy.stop_due[victim] + CLAIM_SLACK

        def claiming(now: float) -> bool:
            snapshot = policy.prepare([world.store.get(victim)], {}, now)
            (queued,), _ = snapshot.jobs([world.store.get(urgent)], [])
            return queued.claiming

        assert claiming(time.time())
        # A victim slower to stop than its grace keeps the claim alive.
        assert claiming(claim.until + 1)
        world.store.set_hold(urgent, ME.user, time.time(), "held")
        world.store.set_hold(urgent, None, time.time(), "released")
        assert not claiming(time.time())
        assert urgent not in policy.claims


async def test_a_claim_lapses_once_the_victims_are_gone(tmp_path: Path) -> None:
    async with running(tmp_path, config=PREEMPTING) as world:
        world.submit(gpus=2)
        world.plan()
        urgent = world.submit(gpus=1, job_class="high")
        world.plan()
        until = world.daemon.policy.claims[urgent].until
        world.daemon.policy.prepare([], {}, until - 1)  # the victim has ended
        assert urgent in world.daemon.policy.claims
        world.daemon.policy.prepare([], {}, until)
        assert urgent not in world.daemon.policy.claims


SHARING = """
preempt_after_seconds = 0
min_runtime_before_preemption_seconds = 0
default_stop_grace_seconds = 7
preempt_for_fair_share = true
[classes.default]
preemptible = true
may_preempt = true
"""

# Three users who share the GPUs under SHARING, none of them the jobs' usual OWNER.
USERS = [JobOwner(ME.uid + n, ME.gid, f"{ME.user}{n}") for n in (1, 2, 3)]


async def test_a_job_behind_the_head_that_preempted_claims_its_victims_gpus_only(
    tmp_path: Path,
) -> None:
    """It preempted as a backfill for fair share: sorting first, it would take the head's
    place, and with it the head's reservation; it claims the GPUs its victim frees."""
    async with running(tmp_path, config=SHARING) as world:
        holding = [world.submit(owner=USERS[0], gpus=1, max_runtime_seconds=900) for _ in range(2)]
        world.plan()
        assert [world.state(j) for j in holding] == [JobState.RUNNING] * 2
        head = world.submit(owner=USERS[2], gpus=2)  # no time limit: it waits for both
        short = world.submit(owner=USERS[1], gpus=1, max_runtime_seconds=60)
        world.plan()
        assert world.scheduler.waiting[short].kind == Wait.PREEMPTING_SHARE
        assert world.scheduler.waiting[head].kind == Wait.GPUS
        assert len(world.watcher.stops) == 1
        policy = world.daemon.policy
        assert policy.claims == {}
        ((victim, _, _),) = world.watcher.stops
        assert policy.backfill_claims[short].victims == {victim}
        for _ in range(3):  # planned again while the victim stops: nothing more preempted
            world.plan()
        assert len(world.watcher.stops) == 1
        await world.watcher.end(victim, Outcome.PREEMPTED, 0)
        world.plan()
        assert world.state(short) == JobState.RUNNING
        assert world.state(victim) == JobState.PENDING


async def test_a_backfill_claim_cannot_be_kept_to_jump_the_queue_later(tmp_path: Path) -> None:
    """Its owner holds and releases the job that preempted behind the head: any change to
    the job ends its claim, so it cannot be kept to start first later."""
    async with running(tmp_path, config=SHARING) as world:
        for _ in range(2):
            world.submit(owner=USERS[0], gpus=1, max_runtime_seconds=900)
        world.plan()
        head = world.submit(owner=USERS[2], gpus=2)
        short = world.submit(owner=USERS[1], gpus=1, max_runtime_seconds=60)
        world.plan()
        policy = world.daemon.policy
        assert short in policy.backfill_claims

        def claimed(now: float) -> frozenset[int]:
            active = world.store.jobs([JobState.RUNNING, JobState.STOPPING])
            snapshot = policy.prepare(active, {}, now)
            queue, _ = snapshot.jobs([world.store.get(short), world.store.get(head)], active)
            return queue[0].backfill_claim

        assert claimed(time.time())
        world.store.set_hold(short, USERS[1].user, time.time(), "held")
        world.store.set_hold(short, None, time.time(), "released")
        assert not claimed(time.time())
        assert short not in policy.backfill_claims
        # The scheduler goes on: the head and the job plan as any others.
        world.plan()
        assert world.scheduler.waiting[head].kind == Wait.GPUS


async def test_a_running_jobs_new_time_limit_reaches_its_monitor_and_the_planner(
    tmp_path: Path,
) -> None:
    async with running(tmp_path) as world:
        job = world.submit(max_runtime_seconds=3600)
        world.plan()
        launch = world.watcher.launches[job]
        assert launch.deadline is not None
        await world.call("PATCH", "/v1/jobs/{id}", {"max_runtime_seconds": 7200}, id=str(job))
        started = world.store.attempt(job, 1)
        assert started is not None
        assert world.watcher.deadlines[job] == started.started_at + 7200
        assert world.scheduler.deadlines[job] == started.started_at + 7200
        assert world.store.get(job).spec.max_runtime_seconds == 7200
        # Lifted (an admin's null): no deadline for either.
        await world.call("PATCH", "/v1/jobs/{id}", {"max_runtime_seconds": None}, id=str(job))
        assert world.watcher.deadlines[job] is None
        assert job not in world.scheduler.deadlines


async def test_a_job_waiting_for_another_is_planned_once_it_succeeded(tmp_path: Path) -> None:
    async with running(tmp_path) as world:
        first = world.submit(gpus=1)
        second = world.submit(gpus=1, after=[str(first)])
        world.plan()
        assert world.state(second) == JobState.PENDING
        assert str(world.scheduler.waiting[second].kind) == "dependency"
        assert second not in world.watcher.launches
        await world.watcher.end(first, Outcome.EXITED, exit_code=0)
        world.plan()
        assert world.state(second) == JobState.RUNNING
