"""What acts on jobs: `stop`, `hold`, `release`, `update`, `rm` (trainq.selection picks
the jobs, trainq.sharing_commands runs most)."""

# No `from __future__ import annotations`: typer reads every command's annotations on each
# run (see trainq.cli).
import argparse
from typing import Annotated

import typer

from trainq.flags.common import (
    JOB_COMMAND,
    GroupOption,
    NameFilter,
    Socket,
    SomeJobs,
    SomeUnfinishedJobs,
    StateFilter,
    UnfinishedJob,
    UserFilter,
    parsed,
    picked,
)
from trainq.flags.values import COUNT, DURATION, INTEGER, WHOLE_DURATION

commands = typer.Typer()  # its commands; trainq.cli adds them to the app in order


@commands.command(short_help="stop a job (SIGTERM, grace, SIGKILL)", context_settings=JOB_COMMAND)
def stop(
    ctx: typer.Context,
    jobs: SomeUnfinishedJobs = None,
    *,
    group: GroupOption = None,
    user: UserFilter = None,
    state: StateFilter = None,
    name: NameFilter = None,
    grace: Annotated[
        float | None,
        typer.Option(
            metavar="S",
            parser=DURATION,
            help="seconds between SIGTERM and SIGKILL (default: the job's own)",
        ),
    ] = None,
    socket: Socket = None,
) -> argparse.Namespace:
    """Stop jobs: SIGTERM, their grace, then SIGKILL. Prints the state each is in now. With
    --group alone, every unfinished job of the group that you may stop; with filters
    (--user, --state, --name, --group), the unfinished jobs they pick, yours unless --user."""
    line = picked(ctx, "stop", jobs, socket, group=group, user=user, state=state, name=name)
    line.grace = grace
    return line


@commands.command(
    short_help="keep jobs from starting; pause running ones", context_settings=JOB_COMMAND
)
def hold(
    ctx: typer.Context,
    jobs: SomeUnfinishedJobs = None,
    *,
    user: UserFilter = None,
    state: StateFilter = None,
    name: NameFilter = None,
    group: GroupOption = None,
    socket: Socket = None,
) -> argparse.Namespace:
    """Keep pending jobs from starting until `trainq release` (your own jobs; an admin's
    hold is an admin's to release). A running job is paused: stopped with its grace, its
    GPUs freed and its checkpoints kept, and queued again held; `trainq release` resumes
    it as its next attempt, no retry spent. Filters pick pending jobs, yours unless --user."""
    return picked(ctx, "hold", jobs, socket, user=user, state=state, name=name, group=group)


@commands.command(short_help="let held jobs start", context_settings=JOB_COMMAND)
def release(
    ctx: typer.Context,
    jobs: SomeUnfinishedJobs = None,
    *,
    user: UserFilter = None,
    state: StateFilter = None,
    name: NameFilter = None,
    group: GroupOption = None,
    socket: Socket = None,
) -> argparse.Namespace:
    """Let held jobs start again. Filters pick pending jobs, yours unless --user."""
    return picked(ctx, "release", jobs, socket, user=user, state=state, name=name, group=group)


@commands.command(
    short_help="change a pending job, or a running one's time limit", context_settings=JOB_COMMAND
)
def update(
    ctx: typer.Context,
    job: UnfinishedJob,
    *,
    priority: Annotated[
        int | None,
        typer.Option(metavar="P", parser=INTEGER, help="its order among your own jobs"),
    ] = None,
    gpus: Annotated[
        int | None, typer.Option(metavar="N", parser=COUNT, help="whole GPUs the job needs")
    ] = None,
    max_runtime: Annotated[
        int | None,
        typer.Option(metavar="S", parser=WHOLE_DURATION, help="time limit: seconds, or 30m, 12h"),
    ] = None,
    job_class: Annotated[
        str | None, typer.Option("--class", metavar="C", help="the class it runs in")
    ] = None,
    boost: Annotated[
        int | None,
        typer.Option(metavar="B", parser=INTEGER, help="raise it above others' work (admins)"),
    ] = None,
    socket: Socket = None,
) -> argparse.Namespace:
    """Change a job that has not started: the same rules as at submit. Of a running job,
    only --max-runtime: within its class's maximum (admins: beyond it)."""
    return parsed(
        ctx, "update", socket=socket, job=job, priority=priority, gpus=gpus,
        max_runtime=max_runtime, job_class=job_class, boost=boost,
    )  # fmt: skip


@commands.command(
    short_help="delete ended jobs, their logs and files", context_settings=JOB_COMMAND
)
def rm(
    ctx: typer.Context,
    jobs: SomeJobs = None,
    *,
    ended: Annotated[
        bool, typer.Option("--ended", help="every ended job of yours (or of --user)")
    ] = False,
    older_than: Annotated[
        float | None,
        typer.Option(metavar="AGE", parser=DURATION, help="with --ended: ended before 7d, 12h"),
    ] = None,
    user: UserFilter = None,
    name: NameFilter = None,
    group: GroupOption = None,
    socket: Socket = None,
) -> argparse.Namespace:
    """Delete ended jobs: their directories (logs, ml root, checkpoints) and records."""
    return picked(
        ctx, "rm", jobs, socket, ended=ended, older_than=older_than, user=user, name=name,
        group=group,
    )  # fmt: skip
