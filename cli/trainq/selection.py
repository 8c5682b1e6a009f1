"""Which jobs `stop`, `hold`, `release` and `rm` act on: the ids given, or the jobs filters
pick (`--user`, `--state`, `--name GLOB`, `--group`; `rm --ended [--older-than 7d]`).

Filters pick the caller's own jobs unless `--user` names someone else. trainqd decides
each action on its own: a job the caller may not touch is refused, with its one line, never
skipped in silence (the exit status then says so, as for several ids).
"""

from __future__ import annotations

import fnmatch
import os
import pwd
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, NamedTuple

from trainq.core.errors import InvalidRequest, TrainqError
from trainq.core.states import TERMINAL

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from trainq.client.api import Api
    from trainq.context import Context


class Filters(NamedTuple):
    user: str | None = None
    state: str | None = None
    name: str | None = None
    group: int | None = None
    ended: bool = False
    older_than: float | None = None  # seconds since the job ended

    def given(self) -> bool:
        return any(value not in (None, False) for value in self)


def filters_of(args: Any) -> Filters:
    return Filters(
        user=getattr(args, "user", None),
        state=getattr(args, "state", None),
        name=getattr(args, "name", None),
        group=getattr(args, "group", None),
        ended=getattr(args, "ended", False),
        older_than=getattr(args, "older_than", None),
    )


def check(jobs: list[int], filters: Filters) -> None:
    """One line for a command line that names neither jobs nor filters, or both."""
    if jobs and filters.given():
        raise InvalidRequest("give job ids or filters, not both")
    if not jobs and not filters.given():
        raise InvalidRequest(
            "the following arguments are required: JOB... "
            "(or filters: --group, --state, --name, ...)"
        )
    if filters.older_than is not None and not filters.ended:
        raise InvalidRequest("argument --older-than: goes with --ended")


def select(client: Api, filters: Filters, *, default_state: str | None, now: datetime) -> list[int]:
    """The ids of the jobs the filters pick, oldest first. `default_state` narrows them when
    no --state is given (hold picks pending jobs, say)."""
    state = filters.state or default_state
    ended = filters.ended or (state is not None and state in TERMINAL)
    user = filters.user or pwd.getpwuid(os.getuid()).pw_name
    picked = []
    for job in client.all_jobs(include_ended=ended, state=state, user=user, group=filters.group):
        if filters.ended and job.get("state") not in TERMINAL:
            continue
        if filters.name is not None and not fnmatch.fnmatchcase(
            str(job.get("name") or ""), filters.name
        ):
            continue
        if filters.older_than is not None and not _ended_before(
            job, now - timedelta(seconds=filters.older_than)
        ):
            continue
        picked.append(int(job["id"]))
    return picked


def _ended_before(job: dict[str, Any], moment: datetime) -> bool:
    text = job.get("ended_at")
    if not isinstance(text, str):
        return False
    ended = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return ended < moment


def each(ctx: Context, jobs: Sequence[int], act: Callable[[int], str]) -> int:
    """`act` on each job in turn: a refusal is its one line on stderr, the others still
    happen, and the exit status is that of the last refusal (0 when none was refused)."""
    status = 0
    for job_id in jobs:
        try:
            ctx.print(act(job_id))
        except TrainqError as exc:
            ctx.say(" ".join(exc.message.split()))
            status = int(exc.exit_code)
    return status


def jobs_to_act_on(ctx: Context, args: Any, *, default_state: str | None = None) -> list[int]:
    """The ids given, or those the filters pick (said on stderr when none is)."""
    jobs = list(getattr(args, "jobs", None) or [])
    filters = filters_of(args)
    check(jobs, filters)
    if jobs:
        return jobs
    picked = select(ctx.client(), filters, default_state=default_state, now=ctx.now())
    if not picked:
        ctx.say("no job matches")
    return picked
