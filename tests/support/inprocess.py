"""The scheduler, the API's handlers and the store in one process, on the test's event loop:
the real `Scheduler`, `Api` and `Store` with fake GPUs and fake monitors
(`trainqd.attempts.fake_watcher`)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskGroup

from trainq.core.spec import JobSpec
from trainq.core.states import JobState
from trainqd.access.authorization import Authorizer
from trainqd.access.identity import account
from trainqd.api.handlers.jobs import Api
from trainqd.api.routing import Caller, Request, Response, Router
from trainqd.attempts.fake_watcher import FakeWatcher, FakeWatchers
from trainqd.attempts.jobdir import JobDirs
from trainqd.config import load_config
from trainqd.gpus.fake import FakeGpuBackend
from trainqd.main import api_for
from trainqd.scheduling.events import ChangeNotifier
from trainqd.scheduling.scheduler import Scheduler
from trainqd.store.store import JobOwner, Store

# The in-process jobs' owner: whoever runs the tests.
ME = account(os.geteuid())
OWNER = JobOwner(ME.uid, ME.gid, ME.user)


@dataclass
class World:
    """A running scheduler, its store and API, and the fake monitors' watchers (one per
    start of the scheduler)."""

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

    async def call(self, method: str, pattern: str, body: Any = None, **params: str) -> Any:
        """The handler's answer to `method` on `pattern` with `params` filled in, found by
        trainqd's router as a request on the socket would be."""
        path = pattern.format(**params)
        route, matched = Router(self.api.routes()).match(method, path)
        request = Request(
            method,
            path,
            {},
            [("content-type", "application/json")],
            b"" if body is None else json.dumps(body).encode(),
            Caller(ME.uid, ME.gid, os.getpid()),
            matched,
        )
        response = await route.handler(request)
        assert isinstance(response, Response)
        return response.body


def config_for(tmp: Path, text: str = "") -> Any:
    """trainqd's configuration from `text`, its state under `tmp`."""
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


def scheduler_for(
    tmp: Path, store: Store, watchers: FakeWatchers, config_text: str = ""
) -> Scheduler:
    """A scheduler (not started) on `store`, with two fake GPUs and fake monitors."""
    dirs = JobDirs(tmp / "jobs")
    dirs.ensure_root()
    return Scheduler(
        config=config_for(tmp, config_text),
        store=store,
        gpus=FakeGpuBackend.with_count(2),
        dirs=dirs,
        notifier=ChangeNotifier(),
        authorizer=Authorizer(None),
        watcher=watchers,
    )


def trainqd_api(tmp: Path) -> Api:
    """trainqd's API as `trainqd` builds it, over a scheduler that is not started: its
    route table, for the tests of the router and of the OpenAPI document."""
    scheduler = scheduler_for(tmp, Store.open(tmp / "jobs.db"), FakeWatchers())
    return api_for(scheduler, time.time())


async def start(
    tmp: Path, tg: TaskGroup, store: Store, alive: set[int], config_text: str = ""
) -> World:
    """A scheduler started in `tg` on `store`, with two fake GPUs; `alive`: the monitors
    it may find again."""
    watchers = FakeWatchers(alive)
    scheduler = scheduler_for(tmp, store, watchers, config_text)
    await tg.start(scheduler.run)
    return World(tmp, store, scheduler, api_for(scheduler, time.time()), watchers.made)
