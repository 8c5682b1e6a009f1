"""`trainq submit`."""

# No `from __future__ import annotations`: typer reads every command's annotations on each
# run (see trainq.cli).
import argparse
from typing import Annotated, Any

import typer

from trainq.flags.common import Socket, UsageError, parsed, repeated
from trainq.flags.spec import with_spec_flags
from trainq.flags.values import JOB_ID, SWEEP

commands = typer.Typer()  # its commands; trainq.cli adds them to the app in order

SUBMIT_HELP = """\
Submit a job and print its id. The spec comes from -f FILE (TOML or JSON) with the flags
over it. A subprocess job (a COMMAND after `--`, or `command` in the file) runs in the
current directory unless --workdir says otherwise, and, unless its environment sets PATH,
with your PATH, so `python3` means the same program it means to you. Relative paths
(channels, -f, --workdir) are taken from the current directory; `~` is expanded."""


@commands.command(help=SUBMIT_HELP, short_help="submit a job")
@with_spec_flags(after="file")
def submit(
    ctx: typer.Context,
    *,
    command_argv: Annotated[
        list[str] | None,
        typer.Argument(metavar="-- COMMAND", help="the trainer's command line (subprocess jobs)"),
    ] = None,
    file: Annotated[
        str | None, typer.Option("-f", "--file", metavar="SPEC", help="spec file (.toml or .json)")
    ] = None,
    sweep: Annotated[
        list[str] | None,
        repeated(
            "--sweep",
            "K=V1,V2",
            SWEEP,
            "submit one job per point of the grid of these values (repeatable; one group)",
        ),
    ] = None,
    like: Annotated[
        int | None,
        typer.Option(
            metavar="JOB", parser=JOB_ID, help="start from job JOB's spec; flags override it"
        ),
    ] = None,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait",
            help="wait for the job to end; exit 0 COMPLETED, 1 FAILED, 3 STOPPED, 9 TIMEOUT",
        ),
    ] = False,
    follow: Annotated[
        bool,
        typer.Option("--follow", help="with --wait: print the job's output as it is written"),
    ] = False,
    json: Annotated[bool, typer.Option("--json", help="print the job record as JSON")] = False,
    token: Annotated[
        str | None,
        typer.Option(
            metavar="TOKEN",
            help="client token: the same TOKEN again returns the jobs it queued, not new ones",
        ),
    ] = None,
    socket: Socket = None,
    spec_flags: dict[str, Any],
) -> argparse.Namespace:
    if follow and sweep:
        raise UsageError("argument --follow: follows one job, not a --sweep", ctx)
    return parsed(
        ctx, "submit", socket=socket, file=file, **spec_flags, wait=wait or follow,
        follow=follow, json=json, token=token, command_argv=list(command_argv or []),
        sweep=list(sweep or []), like=like,
    )  # fmt: skip
