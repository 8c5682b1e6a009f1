"""Two copies of one submission with one client token, arriving together (a client that
resent while its first request was still being committed), share one group commit: the
token is checked again under the write lock, so the jobs are queued once and both copies
are answered with them."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio
import pytest

from trainqd.api.handlers.jobs import Api
from trainqd.api.routing import Caller, Request, Response

from .test_scheduler import ME, running

pytestmark = pytest.mark.asyncio


def request(body: Any, token: str) -> Request:
    return Request(
        "POST",
        "/v1/jobs",
        {},
        [("content-type", "application/json"), ("idempotency-key", token)],
        json.dumps(body).encode(),
        Caller(ME.uid, ME.gid, os.getpid()),
    )


async def submit_twice_at_once(api: Api, body: Any, token: str) -> list[Any]:
    answers: list[Any] = []

    async def one() -> None:
        response = await api.submission.submit(request(body, token))
        assert isinstance(response, Response)
        assert response.status == 201
        answers.append(response.body)

    async with anyio.create_task_group() as tg:
        tg.start_soon(one)
        tg.start_soon(one)
    return answers


async def test_one_token_sent_twice_at_once_queues_once(tmp_path: Path) -> None:
    async with running(tmp_path) as world:
        first, second = await submit_twice_at_once(world.api, {"command": ["true"]}, "t-1")
        assert first.id == second.id
        assert world.api.submission.commits.batches == 1  # they did arrive together
        sweep = [{"command": ["true"], "name": f"p-{n}"} for n in range(3)]
        first, second = await submit_twice_at_once(world.api, sweep, "t-2")
        # The same group and jobs; each as it is when answered (a plan may run in between).
        one, two = json.loads(first.payload), json.loads(second.payload)
        assert one["group_id"] == two["group_id"]
        assert [job["id"] for job in one["jobs"]] == [job["id"] for job in two["jobs"]]
        assert len(world.store.jobs()) == 4
