"""A job of several nodes is one job of all its nodes' GPUs to the planner: it gets a
reservation as any head job, is never started in part, and is preempted whole."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.inprocess import PREEMPTING, running
from trainq.core.outcomes import Outcome
from trainq.core.reasons import Wait
from trainq.core.states import JobState

pytestmark = pytest.mark.asyncio


async def test_a_gang_is_reserved_for_and_started_whole(tmp_path: Path) -> None:
    async with running(tmp_path) as world:
        first = world.submit(gpus=1, max_runtime_seconds=100)
        world.plan()
        gang = world.submit(instance_count=2, gpus=1, max_runtime_seconds=100)
        world.plan()
        assert world.state(gang) == JobState.PENDING  # one GPU free: never half started
        assert world.scheduler.waiting[gang].kind == Wait.GPUS
        # A job that would hold the free GPU past the gang's reservation waits behind it;
        # one that ends before it backfills.
        long = world.submit(gpus=1, max_runtime_seconds=1000)
        short = world.submit(gpus=1, max_runtime_seconds=10)
        world.plan()
        assert world.state(long) == JobState.PENDING
        assert world.state(short) == JobState.RUNNING

        await world.watcher.end(first, Outcome.EXITED, 0)
        await world.watcher.end(short, Outcome.EXITED, 0)
        world.plan()
        assert world.state(gang) == JobState.RUNNING
        assert world.state(long) == JobState.PENDING
        launch = world.watcher.launches[gang]
        assert [node.node for node in launch.nodes] == ["algo-1", "algo-2"]
        devices = [node.env["CUDA_VISIBLE_DEVICES"] for node in launch.nodes]
        assert sorted(devices) == ["0", "1"]  # each node one of the gang's two GPUs
        assert [node.env["RANK"] for node in launch.nodes] == ["0", "1"]


async def test_a_gang_is_preempted_whole(tmp_path: Path) -> None:
    async with running(tmp_path, config=PREEMPTING) as world:
        gang = world.submit(instance_count=2, gpus=1)
        world.plan()
        assert world.state(gang) == JobState.RUNNING
        urgent = world.submit(gpus=1, job_class="high")
        world.plan()
        world.plan()
        assert world.watcher.stops == [(gang, 7.0, "preempt")]  # one stop, every node
        await world.watcher.end(gang, Outcome.PREEMPTED, 0)
        world.plan()
        assert world.state(urgent) == JobState.RUNNING
        assert world.state(gang) == JobState.PENDING  # waits for both GPUs again
