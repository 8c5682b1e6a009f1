"""`trainq logs`."""

# No `from __future__ import annotations`: typer reads every command's annotations on each
# run (see trainq.cli).
import argparse
from typing import Annotated

import typer

from trainq.flags.common import JOB_COMMAND, AnyJob, AttemptOption, Socket, UsageError, parsed
from trainq.flags.values import COUNT, NODE, SINCE

commands = typer.Typer()  # its commands; trainq.cli adds them to the app in order


@commands.command(short_help="print a job's output", context_settings=JOB_COMMAND)
def logs(
    ctx: typer.Context,
    *,
    job: AnyJob,
    follow: Annotated[
        bool, typer.Option("-f", "--follow", help="keep printing until it ends")
    ] = False,
    stdout: Annotated[bool, typer.Option("--stdout", help="only its standard output")] = False,
    stderr: Annotated[bool, typer.Option("--stderr", help="only its standard error")] = False,
    attempt: AttemptOption = None,
    node: Annotated[
        int | None,
        typer.Option(metavar="N", parser=NODE, help="a job of several nodes: node N's (algo-N)"),
    ] = None,
    tail: Annotated[
        int | None,
        typer.Option(
            "-n",
            "--tail",
            metavar="N",
            parser=COUNT,
            help="only the last N lines (with -f: 10 unless given)",
        ),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            metavar="WHEN",
            parser=SINCE,
            help="only what was written since: 10m, 2h, 1d ago, or a time (2026-05-01T12:00)",
        ),
    ] = None,
    timestamps: Annotated[
        bool,
        typer.Option("-t", "--timestamps", help="each line with its time and its stream"),
    ] = False,
    socket: Socket = None,
) -> argparse.Namespace:
    """Print a job's output: both streams in the order they were written (unless --stdout
    or --stderr), byte for byte."""
    if stdout and stderr:
        raise UsageError("argument --stderr: not allowed with argument --stdout", ctx)
    stream = "stdout" if stdout else "stderr" if stderr else "both"
    return parsed(
        ctx, "logs", socket=socket, job=job, follow=follow, stream=stream, attempt=attempt,
        tail=tail, since=since, timestamps=timestamps, node=node,
    )  # fmt: skip
