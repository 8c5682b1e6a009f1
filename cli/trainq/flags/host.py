"""The workstation: its GPUs, trainqd's health, usage, and drains: `gpus`, `health`, `top`,
`report`, `users`, `drain`, `resume`."""

# No `from __future__ import annotations`: typer reads every command's annotations on each
# run (see trainq.cli).
import argparse
from typing import Annotated

import typer

from trainq.flags.common import Json, Socket, UsageError, parsed
from trainq.flags.values import GPU_INDICES, GROUP_BY, indices

commands = typer.Typer()  # its commands; trainq.cli adds them to the app in order

GpuIndices = Annotated[
    str | None,
    typer.Option(
        "--gpus", metavar="2,3", parser=GPU_INDICES, help="these GPUs (default: the whole host)"
    ),
]


@commands.command(short_help="the GPUs and who holds them")
def gpus(ctx: typer.Context, json: Json = False, socket: Socket = None) -> argparse.Namespace:
    """The GPUs, the job holding each, and processes trainq did not start."""
    return parsed(ctx, "gpus", socket=socket, json=json)


@commands.command(short_help="is trainqd up, and how busy")
def health(ctx: typer.Context, json: Json = False, socket: Socket = None) -> argparse.Namespace:
    """Is trainqd up, and how busy: one line."""
    return parsed(ctx, "health", socket=socket, json=json)


@commands.command(short_help="live view of GPUs, jobs and the queue")
def top(ctx: typer.Context, socket: Socket = None) -> argparse.Namespace:
    """A live view of the GPUs, the running jobs and the queue (q quits)."""
    return parsed(ctx, "top", socket=socket)


@commands.command(short_help="GPU-hours and jobs per user or class")
def report(
    ctx: typer.Context,
    *,
    since: Annotated[str, typer.Option(metavar="PERIOD", help="30d, 12h, 90m, 2w")] = "30d",
    by: Annotated[
        str,
        typer.Option(metavar="user|class", parser=GROUP_BY, help="one row per user or class"),
    ] = "user",
    json: Json = False,
    csv: Annotated[bool, typer.Option("--csv", help="comma-separated values")] = False,
    socket: Socket = None,
) -> argparse.Namespace:
    """GPU-hours, jobs, failures and idle GPU-hours per user (or class) over a period."""
    if json and csv:
        raise UsageError("argument --csv: not allowed with argument --json", ctx)
    return parsed(ctx, "report", socket=socket, since=since, by=by, json=json, csv=csv)


@commands.command(short_help="each user's recent usage, share, running and waiting jobs")
def users(ctx: typer.Context, json: Json = False, socket: Socket = None) -> argparse.Namespace:
    """Each user's GPU-hours of late (halved every fair share half-life), their share, and
    their running and waiting jobs and GPUs: fair share starts the lowest usage's jobs first."""
    return parsed(ctx, "users", socket=socket, json=json)


@commands.command(short_help="start nothing new on GPUs or the host (admins)")
def drain(
    ctx: typer.Context,
    *,
    reason: Annotated[str, typer.Option(metavar="TEXT", help="why, as others will read it")],
    gpus: GpuIndices = None,
    socket: Socket = None,
) -> argparse.Namespace:
    """Start nothing new on these GPUs (or the whole host); running jobs finish."""
    return parsed(ctx, "drain", socket=socket, gpus=indices(gpus), reason=reason)


@commands.command(short_help="lift drains (admins)")
def resume(
    ctx: typer.Context, gpus: GpuIndices = None, socket: Socket = None
) -> argparse.Namespace:
    """Lift the drains of these GPUs (default: every drain, the host's included)."""
    return parsed(ctx, "resume", socket=socket, gpus=indices(gpus))
