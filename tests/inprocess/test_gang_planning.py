"""A job of several nodes is one job of all its nodes' GPUs to the planner: it gets a
reservation as any head job, is never started in part, and is preempted whole."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.inprocess import PREEMPTING, running
from trainq.core.errors import InvalidSpec
from trainq.core.outcomes import Outcome
from trainq.core.reasons import Wait, render
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


PSERVERS = [
    {"name": "pservers", "instance_count": 2},
    {"name": "trainers", "instance_count": 1, "gpus": 1},
]


async def test_each_node_without_gpus_takes_a_cpu_slot(tmp_path: Path) -> None:
    """A gang of four CPU nodes cannot crowd a host of four slots past them: each node takes
    one, and a group of CPU servers beside GPU trainers takes theirs too; a gang that waits
    for slots keeps them from later jobs of one slot."""
    async with running(tmp_path, config="cpu_slots = 4") as world:
        cpu_gang = world.submit(instance_count=3)
        one = world.submit()
        world.plan()
        assert world.state(cpu_gang) == JobState.RUNNING
        assert world.state(one) == JobState.RUNNING
        mixed = world.submit(instance_groups=PSERVERS)
        another = world.submit()
        world.plan()
        # All 4 slots taken: the mixed gang's two servers do not fit.
        assert world.state(mixed) == JobState.PENDING
        assert render(world.scheduler.waiting[mixed]) == "waiting for 2 CPU slots (0 of 4 free)"
        assert world.state(another) == JobState.PENDING
        assert render(world.scheduler.waiting[another]) == f"CPU slots reserved for job {mixed}"

        # One slot free: the gang keeps it, the job of one behind it does not take it.
        await world.watcher.end(one, Outcome.EXITED, 0)
        world.plan()
        assert world.state(mixed) == JobState.PENDING
        assert world.state(another) == JobState.PENDING
        await world.watcher.end(cpu_gang, Outcome.EXITED, 0)
        world.plan()
        assert world.state(mixed) == JobState.RUNNING  # its 2 slots and its GPU
        assert world.state(another) == JobState.RUNNING  # 2 + 1 of 4
        two = world.submit(instance_count=2)
        world.plan()
        assert world.state(two) == JobState.PENDING
        assert world.scheduler.waiting[two].kind == Wait.CPU_SLOT


async def test_a_gang_of_more_cpu_nodes_than_slots_is_refused_in_one_line(
    tmp_path: Path,
) -> None:
    async with running(tmp_path, config="cpu_slots = 2") as world:
        with pytest.raises(InvalidSpec) as caught:
            await world.call("POST", "/v1/jobs", {"command": ["true"], "instance_count": 3})
        message = str(caught.value)
        assert "3 nodes without GPUs" in message
        assert "cpu_slots" in message
        assert "\n" not in message
        # A gang that fits is taken, and starts.
        fits = await world.call("POST", "/v1/jobs", {"command": ["true"], "instance_count": 2})
        world.plan()
        assert world.state(fits.id) == JobState.RUNNING
