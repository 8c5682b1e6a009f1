"""A job's metrics and tuning experiments: `metrics`, `tune`."""

# No `from __future__ import annotations`: typer reads every command's annotations on each
# run (see trainq.cli).
import argparse
from typing import Annotated

import typer

from trainq.flags.common import (
    JOB_COMMAND,
    AnyJob,
    AttemptOption,
    Json,
    Socket,
    UsageError,
    parsed,
)
from trainq.flags.values import JOB_ID

commands = typer.Typer()  # its commands; trainq.cli adds them to the app in order


@commands.command(short_help="a job's metrics: latest, best, a plot", context_settings=JOB_COMMAND)
def metrics(
    ctx: typer.Context,
    *,
    job: AnyJob,
    attempt: AttemptOption = None,
    json: Json = False,
    socket: Socket = None,
) -> argparse.Namespace:
    """A job's metrics, read from its output (metric_definitions, --metric) and from
    /opt/ml/output/metrics.jsonl: each one's latest and best value and a plot of its series."""
    return parsed(ctx, "metrics", socket=socket, job=job, attempt=attempt, json=json)


@commands.command(short_help="tuning experiments: start (-f SPEC), ls, show, stop")
def tune(
    ctx: typer.Context,
    *,
    action: Annotated[
        str | None, typer.Argument(metavar="[ls|show ID|stop ID]", show_default=False)
    ] = None,
    tune_id: Annotated[
        int | None, typer.Argument(metavar="ID", parser=JOB_ID, show_default=False)
    ] = None,
    file: Annotated[
        str | None,
        typer.Option("-f", "--file", metavar="SPEC", help="spec file with a `tune` table"),
    ] = None,
    plot: Annotated[
        str | None,
        typer.Option("--plot", metavar="FILE.png", help="show: write the curves as an image"),
    ] = None,
    json: Json = False,
    socket: Socket = None,
) -> argparse.Namespace:
    """Tuning experiments. `trainq tune -f SPEC` starts one (a job spec with a `tune` table)
    and prints its id; `ls` lists them; `show ID` its trials sorted by the objective, the best
    one's model directory and the objective's curves (`--plot FILE.png`: as an image); `stop
    ID` stops it and its trials."""
    if action not in (None, "ls", "show", "stop"):
        raise UsageError(f"argument ACTION: invalid choice: {action!r} (ls, show, stop)", ctx)
    if action in ("show", "stop") and tune_id is None:
        raise UsageError(f"`trainq tune {action}` needs a tune id", ctx)
    if action is None and file is None:
        raise UsageError("`trainq tune` needs -f SPEC (or ls, show ID, stop ID)", ctx)
    return parsed(
        ctx, "tune", socket=socket, action=action, tune=tune_id, file=file, json=json, plot=plot
    )
