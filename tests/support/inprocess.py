"""trainqd's parts in one process, on the test's event loop: every part as app.py builds it
(the store in a temporary SQLite file) with fake GPUs and fake monitors
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
from trainqd.app import Daemon, build
from trainqd.attempts.fake_watcher import FakeWatcher, FakeWatchers
from trainqd.attempts.jobdir import JobDirs
from trainqd.config import load_config
from trainqd.gpus.fake import FakeGpuBackend
from trainqd.scheduling.scheduler import Scheduler
from trainqd.store import JobOwner, Store

# The in-process jobs' owner: whoever runs the tests.
ME = account(os.geteuid())
OWNER = JobOwner(ME.uid, ME.gid, ME.user)


@dataclass
class World:
    """A running trainqd's parts (`app.Daemon`), its store, and the fake monitors' watchers
    (one per start)."""

    tmp: Path
    store: Store
    daemon: Daemon
    watchers: list[FakeWatcher]

    @property
    def scheduler(self) -> Scheduler:
        return self.daemon.scheduler

    @property
    def api(self) -> Api:
        return self.daemon.api

    @property
    def watcher(self) -> FakeWatcher:
        return self.watchers[-1]

    def submit(self, *, owner: JobOwner = OWNER, **spec: Any) -> int:
        job = self.store.submit(JobSpec(command=["true"], **spec), owner, time.time())
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
    """trainqd's configuration from `text`, its state under `tmp`; one CPU slot unless
    `text` sets cpu_slots."""
    (tmp / "trainqd.toml").write_text(text)
    slots = None if "cpu_slots" in text else 1
    return load_config(tmp / "trainqd.toml", {"state_dir": tmp / "state", "cpu_slots": slots})


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


def build_for(tmp: Path, store: Store, watchers: FakeWatchers, config_text: str = "") -> Daemon:
    """Every part (not started) on `store`, with two fake GPUs and fake monitors."""
    dirs = JobDirs(tmp / "jobs")
    dirs.ensure_root()
    return build(
        config=config_for(tmp, config_text),
        store=store,
        gpus=FakeGpuBackend.with_count(2),
        dirs=dirs,
        authorizer=Authorizer(None),
        started_at=time.time(),
        watcher=watchers,
    )


def trainqd_api(tmp: Path) -> Api:
    """trainqd's API as app.py builds it, its parts not started: its route table, for the
    tests of the router and of the OpenAPI document."""
    return build_for(tmp, Store.open(tmp / "jobs.db"), FakeWatchers()).api


async def start(
    tmp: Path, tg: TaskGroup, store: Store, alive: set[int], config_text: str = ""
) -> World:
    """Every part started in `tg` on `store`, with two fake GPUs; `alive`: the monitors it
    may find again."""
    watchers = FakeWatchers(alive)
    daemon = build_for(tmp, store, watchers, config_text)
    await tg.start(daemon.run)
    return World(tmp, store, daemon, watchers.made)


# Sharing settings of the preemption tests: every job may be preempted at once.
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
