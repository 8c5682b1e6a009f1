"""The scheduler, the API's handlers and the store in one process, on one event loop.

The real `Scheduler`, `Api` and `Store` (a temporary SQLite file) with the fake GPU backend;
only the monitors are stood in for: `FakeWatcher` implements the scheduler's `Watcher`
protocol, records what it is asked, and ends attempts when the test says so. Each test is a
sequence of submits, ends, stops, restarts and time limits, and takes milliseconds.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import TaskGroup

from trainq.core.errors import Conflict
from trainq.core.outcomes import ExitRecord, Outcome
from trainq.core.reasons import Wait
from trainq.core.spec import JobSpec
from trainq.core.states import JobState
from trainq.core.wire import JobRecord
from trainqd.access.authorization import Authorizer
from trainqd.access.identity import account
from trainqd.api.handlers.jobs import Api
from trainqd.api.routing import Caller, Request, Response
from trainqd.attempts.jobdir import JobDirs
from trainqd.attempts.watcher import OnEnd, StopCause, WatchedMonitor
from trainqd.config import load_config
from trainqd.gpus.fake import FakeGpuBackend
from trainqd.main import api_for
from trainqd.monitor.records import Launch
from trainqd.planning.policy import CLAIM_SLACK
from trainqd.scheduling.events import ChangeNotifier
from trainqd.scheduling.scheduler import Scheduler
from trainqd.store.store import JobOwner, Store

ME = account(os.geteuid())
OWNER = JobOwner(ME.uid, ME.gid, ME.user)
pytestmark = pytest.mark.asyncio


@dataclass
class FakeWatcher:
    """Monitors that never run: an attempt ends when the test calls `end`, or, as a real
    monitor's would, with `timed_out` when its launch's deadline passes."""

    on_end: OnEnd
    task_group: TaskGroup
    boot_id: str = "boot-1"
    launches: dict[int, Launch] = field(default_factory=dict)
    watched: dict[int, int] = field(default_factory=dict)  # job id -> attempt number
    stops: list[tuple[int, float, StopCause]] = field(default_factory=list)
    deadlines: dict[int, float | None] = field(default_factory=dict)  # set_deadline's
    alive: set[int] = field(default_factory=set)  # pids `attach` finds again
    next_pid: int = 1000
    timed_out: anyio.Event = field(default_factory=anyio.Event)  # set once one timed out

    def close(self) -> None:
        pass

    def start(self, launch: Launch, attempt_dir: Path, stop_file: Path) -> WatchedMonitor:
        self.launches[launch.job_id] = launch
        self.watched[launch.job_id] = launch.attempt
        self.next_pid += 1
        self.alive.add(self.next_pid)
        if launch.deadline is not None:
            self.task_group.start_soon(self._time_out, launch)
        return WatchedMonitor(
            launch.job_id, launch.attempt, self.next_pid, 1, attempt_dir, stop_file
        )

    def attach(
        self,
        job_id: int,
        *,
        attempt: int,
        pid: int,
        start_ticks: int | None,
        boot_id: str | None,
        attempt_dir: Path,
        stop_file: Path,
        deadline: float | None,
        grace: float,
    ) -> WatchedMonitor | None:
        if boot_id != self.boot_id or pid not in self.alive:
            return None
        self.watched[job_id] = attempt
        return WatchedMonitor(job_id, attempt, pid, start_ticks, attempt_dir, stop_file)

    def request_stop(
        self, job_id: int, grace: float, reason: StopCause, requested_by: int | None
    ) -> bool:
        self.stops.append((job_id, grace, reason))
        return True

    def set_deadline(self, job_id: int, deadline: float | None) -> bool:
        self.deadlines[job_id] = deadline
        return job_id in self.watched

    async def _time_out(self, launch: Launch) -> None:
        assert launch.deadline is not None
        await anyio.sleep(max(0.0, launch.deadline - time.time()))
        if self.watched.get(launch.job_id) == launch.attempt:
            await self.end(launch.job_id, Outcome.TIMED_OUT)
            self.timed_out.set()

    async def end(self, job_id: int, outcome: Outcome, exit_code: int | None = None) -> None:
        attempt = self.watched.pop(job_id)
        now = time.time()
        record = ExitRecord(job_id, attempt, outcome, now, now, exit_code=exit_code)
        await self.on_end(job_id, attempt, record)


@dataclass
class World:
    tmp: Path
    store: Store
    scheduler: Scheduler
    api: Api
    watchers: list[FakeWatcher]

    @property
    def watcher(self) -> FakeWatcher:
        return self.watchers[-1]

    def submit(self, **spec: Any) -> int:
        job = self.store.submit(JobSpec(command=["true"], **spec), OWNER, time.time())
        self.scheduler.submitted(job)
        return job.id

    def plan(self) -> None:
        self.scheduler.tick(time.time())

    def state(self, job_id: int) -> JobState:
        return self.store.get(job_id).state

    async def call(self, method: str, path: str, body: Any = None, **params: str) -> Any:
        request = Request(
            method,
            path,
            {},
            [("content-type", "application/json")],
            b"" if body is None else json.dumps(body).encode(),
            Caller(ME.uid, ME.gid, os.getpid()),
            params,
        )
        for route in self.api.routes():
            if route.method == method and route.pattern == path:
                response = await route.handler(request)
                assert isinstance(response, Response)
                return response.body
        raise AssertionError(f"no route {method} {path}")


def config_for(tmp: Path, text: str = "") -> Any:
    (tmp / "trainqd.toml").write_text(text)
    return load_config(tmp / "trainqd.toml", {"state_dir": tmp / "state", "cpu_slots": 1})


@asynccontextmanager
async def running(
    tmp: Path, store: Store | None = None, alive: set[int] | None = None, config: str = ""
) -> AsyncIterator[World]:
    """A scheduler running on this test's loop; stopped (as at a shutdown) on the way out.
    A context manager, not a fixture: anyio's task group must close in the task that
    opened it."""
    store = store or Store.open(tmp / "jobs.db")
    async with anyio.create_task_group() as tg:
        yield await start(tmp, tg, store, alive or set(), config)
        tg.cancel_scope.cancel()


async def start(
    tmp: Path, tg: TaskGroup, store: Store, alive: set[int], config_text: str = ""
) -> World:
    config = config_for(tmp, config_text)
    watchers: list[FakeWatcher] = []

    def new_watcher(task_group: TaskGroup, on_end: OnEnd) -> FakeWatcher:
        watchers.append(FakeWatcher(on_end, task_group, alive=set(alive)))
        return watchers[-1]

    dirs = JobDirs(tmp / "jobs")
    dirs.ensure_root()
    scheduler = Scheduler(
        config=config,
        store=store,
        gpus=FakeGpuBackend.with_count(2),
        dirs=dirs,
        notifier=ChangeNotifier(),
        authorizer=Authorizer(None),
        watcher=new_watcher,
    )
    await tg.start(scheduler.run)
    return World(tmp, store, scheduler, api_for(scheduler, time.time()), watchers)


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
        world.scheduler.stopping.stop_by_trainq(job, time.time(), "GPUs idle", reason)
        assert world.state(job) == JobState.STOPPING
        assert world.watcher.stops == [(job, 4.0, "user")]
        await world.watcher.end(job, Outcome.STOPPED, 0)
        assert world.state(job) == JobState.STOPPED
        assert world.store.get(job).stop_reason == reason


PREEMPTING = """
preempt_after_seconds = 0
min_runtime_before_preemption_seconds = 0
default_stop_grace_seconds = 7
default_class = "low"
[classes.low]
preemptible = true
[classes.high]
weight = 10
may_preempt = true
"""


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
        policy = world.scheduler.policy
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
        until = world.scheduler.policy.claims[urgent].until
        world.scheduler.policy.prepare([], {}, until - 1)  # the victim has ended
        assert urgent in world.scheduler.policy.claims
        world.scheduler.policy.prepare([], {}, until)
        assert urgent not in world.scheduler.policy.claims


SHARING = """
preempt_after_seconds = 0
min_runtime_before_preemption_seconds = 0
default_stop_grace_seconds = 7
preempt_for_fair_share = true
[classes.default]
preemptible = true
may_preempt = true
"""


async def test_a_job_behind_the_head_that_preempted_claims_nothing(tmp_path: Path) -> None:
    """It preempted as a backfill for fair share: sorting first, it would take the head's
    place, and with it the head's reservation."""
    async with running(tmp_path, config=SHARING) as world:
        users = [JobOwner(ME.uid + n, ME.gid, f"{ME.user}{n}") for n in (1, 2, 3)]

        def submit(owner: JobOwner, **spec: Any) -> int:
            job = world.store.submit(JobSpec(command=["true"], **spec), owner, time.time())
            world.scheduler.submitted(job)
            return job.id

        holding = [submit(users[0], gpus=1, max_runtime_seconds=900) for _ in range(2)]
        world.plan()
        assert [world.state(j) for j in holding] == [JobState.RUNNING] * 2
        head = submit(users[2], gpus=2)  # no time limit: it waits for both
        short = submit(users[1], gpus=1, max_runtime_seconds=60)
        world.plan()
        assert world.scheduler.waiting[short].kind == Wait.PREEMPTING_SHARE
        assert world.scheduler.waiting[head].kind == Wait.GPUS
        assert len(world.watcher.stops) == 1
        assert world.scheduler.policy.claims == {}


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
