"""The queue's views and waits: `ls`, `requeue`, `show`, `wait`."""

# No `from __future__ import annotations`: typer reads every command's annotations on each
# run (see trainq.cli).
import argparse
from typing import Annotated

import typer

from trainq.flags.common import (
    JOB_COMMAND,
    AnyJob,
    GroupOption,
    Json,
    OptionalAnyJob,
    Socket,
    job_or_group,
    parsed,
)
from trainq.flags.values import JOB_ID, STATE

commands = typer.Typer()  # its commands; trainq.cli adds them to the app in order


@commands.command(short_help="list jobs (unfinished ones by default)")
def ls(
    ctx: typer.Context,
    *,
    all_jobs: Annotated[bool, typer.Option("--all", help="include ended jobs")] = False,
    user: Annotated[str | None, typer.Option(metavar="NAME", help="only this user's jobs")] = None,
    state: Annotated[
        str | None, typer.Option(metavar="S", parser=STATE, help="only jobs in this state")
    ] = None,
    wide: Annotated[bool, typer.Option("--wide", help="absolute times, full reasons")] = False,
    group: Annotated[
        int | None,
        typer.Option(
            metavar="G", parser=JOB_ID, help="only this sweep's jobs, ended ones included"
        ),
    ] = None,
    json: Json = False,
    socket: Socket = None,
) -> argparse.Namespace:
    """List jobs: unfinished ones, or all with --all."""
    return parsed(
        ctx, "ls", socket=socket, all=all_jobs, user=user, state=state, wide=wide, json=json,
        group=group,
    )  # fmt: skip


@commands.command(short_help="run an ended job again, as a new job", context_settings=JOB_COMMAND)
def requeue(
    ctx: typer.Context,
    job: AnyJob,
    json: Annotated[bool, typer.Option("--json", help="print the new job's record")] = False,
    socket: Socket = None,
) -> argparse.Namespace:
    """Run an ended job of yours again with the same spec, as a new job (the old one's
    record, logs and checkpoints stay as they are); prints the new job's id."""
    return parsed(ctx, "requeue", socket=socket, job=job, json=json)


@commands.command(short_help="everything about one job", context_settings=JOB_COMMAND)
def show(
    ctx: typer.Context,
    job: AnyJob,
    json: Annotated[bool, typer.Option("--json", help="print the job record as JSON")] = False,
    all_fields: Annotated[
        bool, typer.Option("--all-fields", help="every field, those not set too")
    ] = False,
    socket: Socket = None,
) -> argparse.Namespace:
    """One job: its state, spec and attempts (the fields that hold something unless
    --all-fields)."""
    return parsed(ctx, "show", socket=socket, job=job, json=json, all_fields=all_fields)


@commands.command(short_help="wait for a job to end", context_settings=JOB_COMMAND)
def wait(
    ctx: typer.Context,
    job: OptionalAnyJob = None,
    group: GroupOption = None,
    socket: Socket = None,
) -> argparse.Namespace:
    """Wait for a job to end. Exit 0 if it COMPLETED, 1 if it FAILED, 3 if STOPPED, 9 if its
    time limit stopped it (TIMEOUT). With
    --group, for every job of the group: exit 0 only if all of them COMPLETED."""
    job_or_group(ctx, job, group)
    return parsed(ctx, "wait", socket=socket, job=job, group=group)
