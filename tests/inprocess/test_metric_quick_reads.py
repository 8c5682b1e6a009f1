"""A tune's trials' reports reach trainqd as they are written, not at the next poll:
metric_watch.py reads a closely followed attempt's output when inotify says it grew
(output_events.py), within a bounded budget a pass, and never through a link its owner
put in place of `output`."""

from __future__ import annotations

import math
import os
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest

from trainq.core.spec import JobSpec
from trainq.core.spec_parts import MetricDefinition
from trainqd.access.identity import account
from trainqd.attempts.jobdir import JobDirs
from trainqd.experiments.metric_watch import QUICK_BUDGET, MetricWatch
from trainqd.monitor.records import STDOUT
from trainqd.store import JobOwner, Store

ME = account(os.geteuid())
OWNER = JobOwner(ME.uid, ME.gid, ME.user)
LOSS = MetricDefinition(name="val_loss", regex=r"val_loss=([-+0-9.eE]+)")
pytestmark = pytest.mark.asyncio


@dataclass
class Attempt:
    watch: MetricWatch
    key: tuple[int, int]
    attempt_dir: Path
    output: Path
    heard: list[Any] = field(default_factory=list)
    news: anyio.Event = field(default_factory=anyio.Event)

    def write(self, path: Path, text: str) -> None:
        with open(path, "a") as file:
            file.write(text)

    async def next_report(self) -> Any:
        with anyio.fail_after(30):  # a bound on a failure, not a measure
            await self.news.wait()
        self.news = anyio.Event()
        return self.heard[-1]


@asynccontextmanager
async def followed(
    tmp_path: Path, *, closely: bool = True, output_to: Path | None = None
) -> AsyncIterator[Attempt]:
    """A running attempt of a job with a metric definition, taken up by a full pass, and
    then only quick passes (no poll) while the test writes its output. `output_to`: its
    owner made `output` a link to that directory."""
    store = Store.open(tmp_path / "jobs.db")
    dirs = JobDirs(tmp_path / "jobs")
    dirs.ensure_root()
    spec = JobSpec(command=["true"], metric_definitions=[LOSS])
    job = store.submit(spec, OWNER, time.time())
    job, number = store.begin_attempt(job.id, (), [], time.time())
    attempt_dir = dirs.attempt_dir(job.id, number)
    attempt_dir.mkdir(parents=True)
    output = dirs.ml_root(job.id) / "output"
    if output_to is None:
        output.mkdir(parents=True)
    else:
        output.parent.mkdir(parents=True)
        output.symlink_to(output_to)
    watch = MetricWatch(store, dirs)
    if closely:
        watch.closely.add(job.id)
    attempt = Attempt(watch, (job.id, number), attempt_dir, output)

    def heard(job_id: int, number: int, snapshot: Any) -> None:
        attempt.heard.append(snapshot)
        attempt.news.set()

    watch.listeners.append(heard)
    await watch.read_once()
    attempt.heard.clear()
    attempt.news = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(watch.quick_passes, math.inf)
        yield attempt
        tg.cancel_scope.cancel()
    if watch.output_events is not None:
        watch.output_events.close()


async def until(condition: Callable[[], bool]) -> None:
    """Bounded polling: the condition is trainqd's bookkeeping, which signals nothing."""
    with anyio.fail_after(30):  # a bound on a failure, not a measure
        while not condition():  # noqa: ASYNC110
            await anyio.sleep(0.01)


def latest(snapshot: Any) -> float:
    value: float = snapshot["series"]["val_loss"]["last"][1]
    return value


async def test_a_report_in_stdout_or_metrics_jsonl_is_read_as_it_is_written(
    tmp_path: Path,
) -> None:
    async with followed(tmp_path) as attempt:
        attempt.write(attempt.attempt_dir / STDOUT, "epoch 1 val_loss=0.5\n")
        assert latest(await attempt.next_report()) == 0.5
        attempt.write(attempt.output / "metrics.jsonl", '{"step": 2, "val_loss": 0.25}\n')
        assert latest(await attempt.next_report()) == 0.25


async def test_a_flood_of_output_is_read_a_bounded_budget_at_a_time(tmp_path: Path) -> None:
    line = "step nothing to see here, just noise for the regex to skip\n"
    flood = line * (4 * QUICK_BUDGET // len(line)) + "val_loss=0.125\n"
    async with followed(tmp_path) as attempt:
        attempt.write(attempt.attempt_dir / STDOUT, flood)
        first = await attempt.next_report()
        assert 0 < first["offsets"][STDOUT] <= QUICK_BUDGET
        while latest_or_none(attempt.heard[-1]) is None:
            # Each write is a new event; the rest is read a budget a pass.
            attempt.write(attempt.attempt_dir / STDOUT, line)
            last = await attempt.next_report()
            assert last["offsets"][STDOUT] - first["offsets"][STDOUT] <= QUICK_BUDGET
            first = last
        assert latest(attempt.heard[-1]) == 0.125


def latest_or_none(snapshot: Any) -> float | None:
    series = snapshot["series"].get("val_loss")
    return None if series is None else latest(snapshot)


async def test_a_link_in_place_of_output_is_not_followed(tmp_path: Path) -> None:
    """The owner makes `output` a link to a directory of someone else's: trainqd watches
    nothing through it (and reads nothing through it, as every pass)."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    async with followed(tmp_path, output_to=elsewhere) as attempt:
        events = attempt.watch.output_events
        assert events is not None
        assert events.watched(attempt.key) == [attempt.attempt_dir]
        # trainqd goes on following the attempt's own output.
        attempt.write(attempt.attempt_dir / STDOUT, "val_loss=0.75\n")
        assert latest(await attempt.next_report()) == 0.75


async def test_an_output_directory_made_again_is_watched_again(tmp_path: Path) -> None:
    async with followed(tmp_path) as attempt:
        events = attempt.watch.output_events
        assert events is not None
        attempt.output.rmdir()
        await until(lambda: events.watched(attempt.key) == [attempt.attempt_dir])
        attempt.output.mkdir()
        await attempt.watch.read_once()
        attempt.heard.clear()
        attempt.write(attempt.output / "metrics.jsonl", '{"val_loss": 0.5}\n')
        assert latest(await attempt.next_report()) == 0.5


async def test_only_closely_followed_attempts_are_watched(tmp_path: Path) -> None:
    async with followed(tmp_path, closely=False) as attempt:
        assert attempt.watch.output_events is None
