"""What the commands' flags share: the socket, job arguments, filters, the usage error
and the parsed line."""

# No `from __future__ import annotations`: typer reads every command's annotations on each
# run (see trainq.cli).
import argparse
from collections.abc import Callable, Iterable
from typing import Annotated, Any

import click
import typer

from trainq.completion import any_job, unfinished_job
from trainq.core.errors import TrainqError
from trainq.core.paths import SOCKET_ENV
from trainq.flags.values import ATTEMPT, JOB_ID, STATE

PROG = "trainq"


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """`; did you mean 'submit'?` for a near miss (`sumbit`, `--gpu`), else nothing."""
    import difflib  # noqa: PLC0415 (only a mistake pays for it)

    # Flags share their `--`, which makes any two look alike: they must be closer.
    cutoff = 0.8 if word.startswith("-") else 0.7
    close = difflib.get_close_matches(word, list(known), n=1, cutoff=cutoff)
    return f"; did you mean {close[0]!r}?" if close else ""


class UsageError(click.UsageError):
    """A usage error already worded as trainq words it (`argument --x: ...`)."""


SOCKET_HELP = (
    f"trainqd's socket (default: ${SOCKET_ENV}, your own daemon's socket if it exists, "
    "else /run/trainq/trainq.sock)"
)
Socket = Annotated[
    str | None, typer.Option("--socket", metavar="PATH", help=SOCKET_HELP, show_default=False)
]
Json = Annotated[bool, typer.Option("--json", help="print the daemon's JSON")]


def _job_argument(complete: Callable[[Any, str], list[tuple[str, str]]]) -> Any:
    return typer.Argument(metavar="JOB", parser=JOB_ID, autocompletion=complete, show_default=False)


# `show -3` is a bad job id (as argparse had it), not an unknown flag named -3.
JOB_COMMAND = {"ignore_unknown_options": True}
AnyJob = Annotated[int, _job_argument(any_job)]
UnfinishedJob = Annotated[int, _job_argument(unfinished_job)]
# `stop` and `wait` take a JOB or a sweep's --group.
OptionalAnyJob = Annotated[int | None, _job_argument(any_job)]
GroupOption = Annotated[
    int | None,
    typer.Option(metavar="G", parser=JOB_ID, help="a sweep's group (its first job's id)"),
]
# `logs`, `metrics`: one attempt of the job.
AttemptOption = Annotated[
    int | None,
    typer.Option(metavar="N", parser=ATTEMPT, help="this attempt (default: last)"),
]


# `stop`, `hold`, `release`, `rm`: several jobs, or filters that pick them (trainq.selection).
SomeUnfinishedJobs = Annotated[
    list[int] | None,
    typer.Argument(
        metavar="JOB...", parser=JOB_ID, autocompletion=unfinished_job, show_default=False
    ),
]
SomeJobs = Annotated[
    list[int] | None,
    typer.Argument(metavar="JOB...", parser=JOB_ID, autocompletion=any_job, show_default=False),
]
UserFilter = Annotated[
    str | None, typer.Option("--user", metavar="NAME", help="this user's jobs (default: yours)")
]
StateFilter = Annotated[
    str | None, typer.Option("--state", metavar="S", parser=STATE, help="jobs in this state")
]
NameFilter = Annotated[
    str | None, typer.Option("--name", metavar="GLOB", help="jobs whose name matches")
]


def jobs_or_filters(ctx: typer.Context, jobs: list[int] | None, **filters: Any) -> None:
    from trainq.selection import Filters, check  # noqa: PLC0415

    try:
        check(jobs or [], Filters(**filters))
    except TrainqError as exc:
        raise UsageError(exc.message, ctx) from None


def picked(
    ctx: typer.Context, command: str, jobs: list[int] | None, socket: str | None, **filters: Any
) -> argparse.Namespace:
    """The parsed line of a command given JOB... or the filters that pick its jobs."""
    jobs_or_filters(ctx, jobs, **filters)
    return parsed(ctx, command, socket=socket, jobs=jobs or [], **filters)


def job_or_group(ctx: typer.Context, job: int | None, group: int | None) -> None:
    if job is None and group is None:
        raise UsageError("the following arguments are required: JOB (or --group G)", ctx)
    if job is not None and group is not None:
        raise UsageError("argument --group: not allowed with argument JOB", ctx)


def parsed(ctx: typer.Context, command: str, **values: Any) -> argparse.Namespace:
    """The parsed line: `--socket` given after the command wins over one given before."""
    socket = values.pop("socket", None) or (ctx.parent.params.get("socket") if ctx.parent else None)
    return argparse.Namespace(command=command, socket=socket, **values)


def repeated(flag: str, metavar: str, kind: Callable[[str], Any], help_text: str) -> Any:
    return typer.Option(flag, metavar=metavar, parser=kind, help=help_text, show_default=False)
