"""The `trainq` command: its flags (typer), the dispatch to one function per command
(`trainq.commands.COMMANDS`), and the rule that every failure is one line on stderr with a
meaningful exit status.

Parsing and running are two steps. Each typer function below only turns its flags into an
`argparse.Namespace` (the commands' one input type) and returns it; `main` then runs the
command. So parsing is testable alone (`parse`), and the commands and their imports (h11,
rich for tables) are loaded only once the line has parsed: `--help`, `--version`, usage
errors and Tab completion do not pay for them.

Start-up cost (bench/cli.py measures it; the budget of `trainq submit` and `trainq ls` is
150 ms median on a 2-core machine): typer is pinned below 0.26 (from 0.29 it validates every
flag through pydantic, ~150 ms of imports; from 0.26 it carries click as a private copy,
whose exceptions this module needs). rich is loaded by typer only to draw `--help`, and by
the commands that draw tables; usage errors are worded here, in one line, without it.
Flag values are parsed by trainq.specfile's functions, wrapped (`_typed`) so that their
messages reach the user as they are.

Adding a command: write `def run(ctx: Context, args: Namespace) -> int` in its own module,
add a line to `trainq.commands.COMMANDS` that imports it lazily, and add one function here
decorated with `@app.command(short_help=...)` whose parameters are its flags and which
returns `_parsed(ctx, "name", flag=value, ...)`: the attribute names the command reads.
The flags that set a spec's fields are declared once (`trainq.specfile.SPEC_FLAGS`);
`@_with_spec_flags` gives them to the commands that build a spec (`submit`, `export`).

Exit statuses: trainq.core.errors.ExitCode (2 for usage errors), 130 after Ctrl-C, 141 when the
reader of stdout went away (`trainq ls | head -1`), both quietly, as a shell would report a
process ended by SIGINT or SIGPIPE; 1 for anything unexpected, with a hint to rerun with
TRAINQ_DEBUG=1 for the traceback.
"""

# No `from __future__ import annotations`: typer reads every command's annotations on each
# run, and evaluating them once at import is cheaper than typer evaluating strings.
import argparse
import functools
import inspect
import os
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Annotated, Any

import click
import typer
from typer.core import TyperGroup

from trainq.completion import any_job, unfinished_job
from trainq.core import __version__
from trainq.core.errors import TrainqError
from trainq.core.export.common import TARGETS
from trainq.core.paths import SOCKET_ENV, client_socket
from trainq.core.states import JobState
from trainq.logs import parse_since
from trainq.specfile import (
    SPEC_FLAGS,
    SpecFlag,
    parse_integer,
    parse_job_id,
    parse_key_value,
    parse_seconds,
    parse_whole_number,
    parse_whole_seconds,
)
from trainq.sweep import parse_sweep

PROG = "trainq"
INTERRUPTED = 130
BROKEN_PIPE = 141
USAGE = 2
DEBUG_ENV = "TRAINQ_DEBUG"
COMPLETE_VAR = "_TRAINQ_COMPLETE"  # set by the script of `trainq --show-completion`


def _typed(parse: Callable[[str], Any], name: str) -> Callable[[str], Any]:
    """A flag's parser whose ValueError message is what the user reads (click's own
    wrapping of a parser would print the bad value alone); click adds the flag's name."""

    def convert(value: Any) -> Any:
        if not isinstance(value, str):
            return value  # a default, already parsed
        try:
            return parse(value)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None

    convert.__name__ = name
    return convert


def _attempt_number(text: str) -> int:
    if not text.isdigit() or int(text) == 0:
        raise ValueError(f"expected an attempt number (1, 2, ...), got {text!r}")
    return int(text)


def _state(text: str) -> str:
    state = text.upper()
    if state not in JobState.__members__:
        raise ValueError(f"unknown state {text!r} (one of {', '.join(JobState.__members__)})")
    return state


def _gpu_indices(text: str) -> str:
    """`2,3` checked; the command splits it (a typer option holds one value, not a list)."""
    parts = [part.strip() for part in text.split(",")]
    if not all(part.isdigit() for part in parts):
        raise ValueError(f"expected GPU indices such as 2,3, got {text!r}")
    return ",".join(str(index) for index in sorted({int(part) for part in parts}))


def _indices(text: str | None) -> list[int] | None:
    return None if text is None else [int(part) for part in text.split(",")]


def _group_by(text: str) -> str:
    if text not in ("user", "class"):
        raise ValueError(f"invalid choice: {text!r} (choose from 'user', 'class')")
    return text


COUNT = _typed(parse_whole_number, "count")
INTEGER = _typed(parse_integer, "integer")
JOB_ID = _typed(parse_job_id, "job id")
ATTEMPT = _typed(_attempt_number, "attempt")
DURATION = _typed(parse_seconds, "duration")
WHOLE_DURATION = _typed(parse_whole_seconds, "duration")
STATE = _typed(_state, "state")
GROUP_BY = _typed(_group_by, "group")
SWEEP = _typed(parse_sweep, "KEY=V1,V2")
SINCE = _typed(parse_since, "time")
GPU_INDICES = _typed(_gpu_indices, "GPU indices")


def _did_you_mean(word: str, known: Iterable[str]) -> str:
    """`; did you mean 'submit'?` for a near miss (`sumbit`, `--gpu`), else nothing."""
    import difflib  # noqa: PLC0415 (only a mistake pays for it)

    # Flags share their `--`, which makes any two look alike: they must be closer.
    cutoff = 0.8 if word.startswith("-") else 0.7
    close = difflib.get_close_matches(word, list(known), n=1, cutoff=cutoff)
    return f"; did you mean {close[0]!r}?" if close else ""


class _UsageError(click.UsageError):
    """A usage error already worded as trainq words it (`argument --x: ...`)."""


class _Group(TyperGroup):
    """Commands listed in the order they were added, and an unknown one named as such."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else ""
        if name not in self.commands and not ctx.resilient_parsing:
            choices = ", ".join(repr(command) for command in self.commands)
            raise _UsageError(
                f"argument COMMAND: invalid choice: {name!r} (choose from {choices})"
                + _did_you_mean(name, self.commands),
                ctx,
            )
        return super().resolve_command(ctx, args)


app = typer.Typer(
    name=PROG,
    cls=_Group,
    help="Submit and watch training jobs run by trainqd.",
    context_settings={"help_option_names": ["-h", "--help"]},
    rich_markup_mode="rich",  # rich is imported only when help is drawn
    pretty_exceptions_enable=False,  # errors are one line (main), never a rich traceback
    add_completion=True,  # --install-completion, --show-completion
)

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


def _jobs_or_filters(ctx: typer.Context, jobs: list[int] | None, **filters: Any) -> None:
    from trainq.selection import Filters, check  # noqa: PLC0415

    try:
        check(jobs or [], Filters(**filters))
    except TrainqError as exc:
        raise _UsageError(exc.message, ctx) from None


def _job_or_group(ctx: typer.Context, job: int | None, group: int | None) -> None:
    if job is None and group is None:
        raise _UsageError("the following arguments are required: JOB (or --group G)", ctx)
    if job is not None and group is not None:
        raise _UsageError("argument --group: not allowed with argument JOB", ctx)


def _parsed(ctx: typer.Context, command: str, **values: Any) -> argparse.Namespace:
    """The parsed line: `--socket` given after the command wins over one given before."""
    socket = values.pop("socket", None) or (ctx.parent.params.get("socket") if ctx.parent else None)
    return argparse.Namespace(command=command, socket=socket, **values)


def _show_version(value: bool) -> None:
    if value:
        sys.stdout.write(f"{PROG} {__version__}\n")
        raise typer.Exit(0)


@app.callback()
def _root(
    socket: Socket = None,
    version: Annotated[
        bool,
        typer.Option("--version", is_eager=True, callback=_show_version, help="print the version"),
    ] = False,
) -> None:
    """Submit and watch training jobs run by trainqd."""


SUBMIT_HELP = """\
Submit a job and print its id. The spec comes from -f FILE (TOML or JSON) with the flags
over it. A subprocess job (a COMMAND after `--`, or `command` in the file) runs in the
current directory unless --workdir says otherwise, and, unless its environment sets PATH,
with your PATH, so `python3` means the same program it means to you. Relative paths
(channels, -f, --workdir) are taken from the current directory; `~` is expanded."""


def _repeated(flag: str, metavar: str, kind: Callable[[str], Any], help_text: str) -> Any:
    return typer.Option(flag, metavar=metavar, parser=kind, help=help_text, show_default=False)


def _spec_option(flag: SpecFlag, panel: str | None) -> Any:
    """The typer option of one of the spec's flags (trainq.specfile.SPEC_FLAGS)."""
    parser = None if flag.parse is None else _typed(flag.parse, flag.param)
    return typer.Option(
        flag.flag,
        metavar=flag.metavar,
        parser=parser,
        help=flag.help,
        show_default=False,
        rich_help_panel=panel,
    )


def _with_spec_flags(
    after: str, panel: str | None = None
) -> Callable[[Callable[..., argparse.Namespace]], Callable[..., argparse.Namespace]]:
    """Give a command the spec's flags (trainq.specfile.SPEC_FLAGS), after its parameter
    `after`; the command gets their values as `spec_flags` (lists as lists, never None)."""

    def decorate(command: Callable[..., argparse.Namespace]) -> Callable[..., argparse.Namespace]:
        own = [p for p in inspect.signature(command).parameters.values() if p.name != "spec_flags"]
        at = [p.name for p in own].index(after) + 1
        added = [
            inspect.Parameter(
                flag.param,
                inspect.Parameter.KEYWORD_ONLY,
                default=None,
                annotation=Annotated[flag.kind, _spec_option(flag, panel)],
            )
            for flag in SPEC_FLAGS
        ]
        params = [*own[:at], *added, *own[at:]]

        @functools.wraps(command)
        def run(*args: Any, **values: Any) -> argparse.Namespace:
            given = {flag.param: values.pop(flag.param) for flag in SPEC_FLAGS}
            lists = {name: list(value or []) for name, value in given.items() if _is_list(name)}
            return command(*args, spec_flags={**given, **lists}, **values)

        run.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in params}
        return run

    return decorate


def _is_list(param: str) -> bool:
    kind = next(flag.kind for flag in SPEC_FLAGS if flag.param == param)
    return list[str] in getattr(kind, "__args__", ())


@app.command(help=SUBMIT_HELP, short_help="submit a job")
@_with_spec_flags(after="file")
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
        _repeated(
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
        raise _UsageError("argument --follow: follows one job, not a --sweep", ctx)
    return _parsed(
        ctx, "submit", socket=socket, file=file, **spec_flags, wait=wait or follow,
        follow=follow, json=json, token=token, command_argv=list(command_argv or []),
        sweep=list(sweep or []), like=like,
    )  # fmt: skip


@app.command(short_help="stop a job (SIGTERM, grace, SIGKILL)", context_settings=JOB_COMMAND)
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
    _jobs_or_filters(ctx, jobs, group=group, user=user, state=state, name=name)
    return _parsed(
        ctx, "stop", socket=socket, jobs=jobs or [], group=group, user=user, state=state,
        name=name, grace=grace,
    )  # fmt: skip


@app.command(short_help="list jobs (unfinished ones by default)")
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
    return _parsed(
        ctx, "ls", socket=socket, all=all_jobs, user=user, state=state, wide=wide, json=json,
        group=group,
    )  # fmt: skip


@app.command(short_help="run an ended job again, as a new job", context_settings=JOB_COMMAND)
def requeue(
    ctx: typer.Context,
    job: AnyJob,
    json: Annotated[bool, typer.Option("--json", help="print the new job's record")] = False,
    socket: Socket = None,
) -> argparse.Namespace:
    """Run an ended job of yours again with the same spec, as a new job (the old one's
    record, logs and checkpoints stay as they are); prints the new job's id."""
    return _parsed(ctx, "requeue", socket=socket, job=job, json=json)


@app.command(short_help="everything about one job", context_settings=JOB_COMMAND)
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
    return _parsed(ctx, "show", socket=socket, job=job, json=json, all_fields=all_fields)


@app.command(short_help="print a job's output", context_settings=JOB_COMMAND)
def logs(
    ctx: typer.Context,
    *,
    job: AnyJob,
    follow: Annotated[
        bool, typer.Option("-f", "--follow", help="keep printing until it ends")
    ] = False,
    stdout: Annotated[bool, typer.Option("--stdout", help="only its standard output")] = False,
    stderr: Annotated[bool, typer.Option("--stderr", help="only its standard error")] = False,
    attempt: Annotated[
        int | None,
        typer.Option(metavar="N", parser=ATTEMPT, help="this attempt (default: last)"),
    ] = None,
    node: Annotated[
        int | None,
        typer.Option(metavar="N", parser=ATTEMPT, help="a job of several nodes: node N's"),
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
        raise _UsageError("argument --stderr: not allowed with argument --stdout", ctx)
    stream = "stdout" if stdout else "stderr" if stderr else "both"
    return _parsed(
        ctx, "logs", socket=socket, job=job, follow=follow, stream=stream, attempt=attempt,
        tail=tail, since=since, timestamps=timestamps, node=node,
    )  # fmt: skip


@app.command(short_help="a job's metrics: latest, best, a plot", context_settings=JOB_COMMAND)
def metrics(
    ctx: typer.Context,
    *,
    job: AnyJob,
    attempt: Annotated[
        int | None,
        typer.Option(metavar="N", parser=ATTEMPT, help="this attempt (default: last)"),
    ] = None,
    json: Json = False,
    socket: Socket = None,
) -> argparse.Namespace:
    """A job's metrics, read from its output (metric_definitions, --metric) and from
    /opt/ml/output/metrics.jsonl: each one's latest and best value and a plot of its series."""
    return _parsed(ctx, "metrics", socket=socket, job=job, attempt=attempt, json=json)


@app.command(short_help="tuning experiments: start (-f SPEC), ls, show, stop")
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
        raise _UsageError(f"argument ACTION: invalid choice: {action!r} (ls, show, stop)", ctx)
    if action in ("show", "stop") and tune_id is None:
        raise _UsageError(f"`trainq tune {action}` needs a tune id", ctx)
    if action is None and file is None:
        raise _UsageError("`trainq tune` needs -f SPEC (or ls, show ID, stop ID)", ctx)
    return _parsed(
        ctx, "tune", socket=socket, action=action, tune=tune_id, file=file, json=json, plot=plot
    )


@app.command(short_help="wait for a job to end", context_settings=JOB_COMMAND)
def wait(
    ctx: typer.Context,
    job: OptionalAnyJob = None,
    group: GroupOption = None,
    socket: Socket = None,
) -> argparse.Namespace:
    """Wait for a job to end. Exit 0 if it COMPLETED, 1 if it FAILED, 3 if STOPPED, 9 if its
    time limit stopped it (TIMEOUT). With
    --group, for every job of the group: exit 0 only if all of them COMPLETED."""
    _job_or_group(ctx, job, group)
    return _parsed(ctx, "wait", socket=socket, job=job, group=group)


@app.command(short_help="the GPUs and who holds them")
def gpus(ctx: typer.Context, json: Json = False, socket: Socket = None) -> argparse.Namespace:
    """The GPUs, the job holding each, and processes trainq did not start."""
    return _parsed(ctx, "gpus", socket=socket, json=json)


@app.command(short_help="is trainqd up, and how busy")
def health(ctx: typer.Context, json: Json = False, socket: Socket = None) -> argparse.Namespace:
    """Is trainqd up, and how busy: one line."""
    return _parsed(ctx, "health", socket=socket, json=json)


@app.command(short_help="live view of GPUs, jobs and the queue")
def top(ctx: typer.Context, socket: Socket = None) -> argparse.Namespace:
    """A live view of the GPUs, the running jobs and the queue (q quits)."""
    return _parsed(ctx, "top", socket=socket)


@app.command(short_help="GPU-hours and jobs per user or class")
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
        raise _UsageError("argument --csv: not allowed with argument --json", ctx)
    return _parsed(ctx, "report", socket=socket, since=since, by=by, json=json, csv=csv)


@app.command(short_help="each user's recent usage, share, running and waiting jobs")
def users(ctx: typer.Context, json: Json = False, socket: Socket = None) -> argparse.Namespace:
    """Each user's GPU-hours of late (halved every fair share half-life), their share, and
    their running and waiting jobs and GPUs: fair share starts the lowest usage's jobs first."""
    return _parsed(ctx, "users", socket=socket, json=json)


# -- sharing the workstation (trainq.sharing_commands) ---------------------------------

GpuIndices = Annotated[
    str | None,
    typer.Option(
        "--gpus", metavar="2,3", parser=GPU_INDICES, help="these GPUs (default: the whole host)"
    ),
]


@app.command(short_help="keep jobs from starting; pause running ones", context_settings=JOB_COMMAND)
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
    _jobs_or_filters(ctx, jobs, group=group, user=user, state=state, name=name)
    return _parsed(
        ctx, "hold", socket=socket, jobs=jobs or [], user=user, state=state, name=name,
        group=group,
    )  # fmt: skip


@app.command(short_help="let held jobs start", context_settings=JOB_COMMAND)
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
    _jobs_or_filters(ctx, jobs, group=group, user=user, state=state, name=name)
    return _parsed(
        ctx, "release", socket=socket, jobs=jobs or [], user=user, state=state, name=name,
        group=group,
    )  # fmt: skip


@app.command(
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
    return _parsed(
        ctx, "update", socket=socket, job=job, priority=priority, gpus=gpus,
        max_runtime=max_runtime, job_class=job_class, boost=boost,
    )  # fmt: skip


@app.command(short_help="delete ended jobs, their logs and files", context_settings=JOB_COMMAND)
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
    _jobs_or_filters(
        ctx, jobs, ended=ended, older_than=older_than, user=user, name=name, group=group
    )
    return _parsed(
        ctx, "rm", socket=socket, jobs=jobs or [], ended=ended, older_than=older_than,
        user=user, name=name, group=group,
    )  # fmt: skip


@app.command(short_help="start nothing new on GPUs or the host (admins)")
def drain(
    ctx: typer.Context,
    *,
    reason: Annotated[str, typer.Option(metavar="TEXT", help="why, as others will read it")],
    gpus: GpuIndices = None,
    socket: Socket = None,
) -> argparse.Namespace:
    """Start nothing new on these GPUs (or the whole host); running jobs finish."""
    return _parsed(ctx, "drain", socket=socket, gpus=_indices(gpus), reason=reason)


@app.command(short_help="lift drains (admins)")
def resume(
    ctx: typer.Context, gpus: GpuIndices = None, socket: Socket = None
) -> argparse.Namespace:
    """Lift the drains of these GPUs (default: every drain, the host's included)."""
    return _parsed(ctx, "resume", socket=socket, gpus=_indices(gpus))


@app.command(short_help="the web pages in your browser, through a local forwarder")
def ui(
    ctx: typer.Context,
    port: Annotated[
        int,
        typer.Option(
            "--port", min=0, max=65535, help="port on 127.0.0.1 (default 0: the kernel picks)"
        ),
    ] = 0,
    socket: Socket = None,
) -> argparse.Namespace:
    """Serve trainqd's web pages on 127.0.0.1 as you, behind a secret token: open the URL
    it prints. Ctrl-C stops it."""
    return _parsed(ctx, "ui", socket=socket, port=port)


# -- export: a job, or a spec file and the spec's flags, as another engine's artifact ------

EXPORT_HELP = """\
Print a job as another engine's artifact: a Slurm batch script (--to slurm), a Kubernetes
List of a ConfigMap and a Job (--to kubernetes, container jobs), or a SageMaker
CreateTrainingJob request and its `aws` command (--to sagemaker). The spec comes from JOB
(an existing job) or from -f SPEC with submit's flags over it. What the target cannot
express is refused with one line naming the field (exit 2)."""


def _target(text: str) -> str:
    if text not in TARGETS:
        choices = ", ".join(repr(target) for target in TARGETS)
        raise ValueError(f"invalid choice: {text!r} (choose from {choices})")
    return text


def _targets(incomplete: str) -> list[str]:
    return [target for target in TARGETS if target.startswith(incomplete)]


def _mapping(text: str) -> tuple[str, str]:
    key, value = parse_key_value(text)
    if not value:
        raise ValueError(f"nothing after '=' in {text!r}")
    return key, value


TARGET = _typed(_target, "target")
MAPPING = _typed(_mapping, "NAME=VALUE")


def _option(*decls: str, panel: str, **settings: Any) -> Any:
    """An option of one target's (listed under its name in --help)."""
    return typer.Option(*decls, rich_help_panel=panel, show_default=False, **settings)


@app.command(help=EXPORT_HELP, short_help="a job as a Slurm, Kubernetes or SageMaker artifact")
@_with_spec_flags(after="file", panel="the job (as for submit)")
def export(
    ctx: typer.Context,
    *,
    job_or_command: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="JOB | -- COMMAND",
            help="an existing job's id, or the trainer's command line (subprocess jobs)",
            show_default=False,
        ),
    ] = None,
    to: Annotated[
        str,
        typer.Option(
            "--to",
            metavar="slurm|kubernetes|sagemaker",
            parser=TARGET,
            autocompletion=_targets,
            help="the target engine",
        ),
    ],
    output: Annotated[
        str | None, typer.Option("-o", "--output", metavar="FILE", help="write the artifact here")
    ] = None,
    file: Annotated[
        str | None, typer.Option("-f", "--file", metavar="SPEC", help="spec file (.toml or .json)")
    ] = None,
    python: Annotated[
        str,
        _option(
            "--python",
            panel="slurm",
            metavar="PATH",
            help="the Python with trainq installed on the nodes (default: this one)",
        ),
    ] = sys.executable,
    job_dir: Annotated[
        str | None,
        _option(
            "--job-dir",
            panel="slurm",
            metavar="DIR",
            help="where job directories go on the cluster (default: the submit directory)",
        ),
    ] = None,
    partition: Annotated[
        str | None, _option("--partition", panel="slurm", metavar="NAME", help="the partition")
    ] = None,
    volume: Annotated[
        list[str] | None,
        _option(
            "--volume",
            panel="kubernetes",
            metavar="CHANNEL=SOURCE",
            parser=MAPPING,
            help="the channel's data: a PersistentVolumeClaim name, or an absolute host path "
            "(repeatable)",
        ),
    ] = None,
    namespace: Annotated[
        str | None, _option("--namespace", panel="kubernetes", metavar="NAME", help="its namespace")
    ] = None,
    checkpoints: Annotated[
        str | None,
        _option(
            "--checkpoints",
            panel="kubernetes",
            metavar="SOURCE",
            help="a claim or host path for /opt/ml/checkpoints, so that a retry resumes",
        ),
    ] = None,
    init_image: Annotated[
        str | None,
        _option(
            "--init-image",
            panel="kubernetes",
            metavar="IMAGE",
            help="the image that lays out /opt/ml (a shell, cp)",
        ),
    ] = None,
    s3: Annotated[
        list[str] | None,
        _option(
            "--s3",
            panel="sagemaker",
            metavar="CHANNEL=S3_URI",
            parser=MAPPING,
            help="where the channel's data is in S3 (repeatable)",
        ),
    ] = None,
    instance_type: Annotated[
        str | None,
        _option("--instance-type", panel="sagemaker", metavar="TYPE", help="e.g. ml.g5.xlarge"),
    ] = None,
    role_arn: Annotated[
        str | None,
        _option(
            "--role-arn",
            panel="sagemaker",
            metavar="ARN",
            help="the IAM role SageMaker runs the job as",
        ),
    ] = None,
    output_s3: Annotated[
        str | None,
        _option(
            "--output-s3",
            panel="sagemaker",
            metavar="S3_URI",
            help="where SageMaker puts model.tar.gz",
        ),
    ] = None,
    checkpoint_s3: Annotated[
        str | None,
        _option(
            "--checkpoint-s3",
            panel="sagemaker",
            metavar="S3_URI",
            help="synced with /opt/ml/checkpoints",
        ),
    ] = None,
    volume_size: Annotated[
        int,
        _option(
            "--volume-size",
            panel="sagemaker",
            metavar="GB",
            parser=COUNT,
            help="the training volume's size (default 50)",
        ),
    ] = 50,
    socket: Socket = None,
    spec_flags: dict[str, Any],
) -> argparse.Namespace:
    return _parsed(
        ctx, "export", socket=socket, to=to, output=output, file=file, **spec_flags,
        job_or_command=list(job_or_command or []), python=python, job_dir=job_dir,
        partition=partition, volume=list(volume or []), namespace=namespace,
        checkpoints=checkpoints, init_image=init_image, s3=list(s3 or []),
        instance_type=instance_type, role_arn=role_arn, output_s3=output_s3,
        checkpoint_s3=checkpoint_s3, volume_size=volume_size,
    )  # fmt: skip


# -- running ----------------------------------------------------------------------------


def _argument_name(param: click.Parameter) -> str:
    if isinstance(param, click.Option):
        return "/".join(param.opts)
    return param.human_readable_name


def _flags(ctx: click.Context) -> list[str]:
    return [opt for param in ctx.command.params for opt in getattr(param, "opts", [])]


def _one_line_usage(exc: click.UsageError) -> str:
    """argparse's wording of a usage error, as trainq has always printed it."""
    prefix = exc.ctx.command_path if exc.ctx is not None else PROG
    if isinstance(exc, click.MissingParameter) and exc.param is not None:
        message = f"the following arguments are required: {_argument_name(exc.param)}"
    elif isinstance(exc, click.BadParameter) and exc.param is not None:
        message = f"argument {_argument_name(exc.param)}: {exc.message}"
        # A job id's place takes unknown flags (`show -3` is a bad id): `--nmae` is a flag.
        flag = re.search(r"got '(--[^']+)'$", exc.message)
        if isinstance(exc.param, click.Argument) and flag and exc.ctx is not None:
            hint = _did_you_mean(flag[1], _flags(exc.ctx))
            if hint:
                return f"{prefix}: unrecognized arguments: {flag[1]}{hint}"
    elif isinstance(exc, click.NoSuchOption):
        message = f"unrecognized arguments: {exc.option_name}"
        if exc.ctx is not None:  # click's near misses are loose (`--json` for `--bogus`)
            hint = _did_you_mean(exc.option_name, _flags(exc.ctx))
            if hint:
                return f"{prefix}: {message}{hint}"
    elif isinstance(exc, click.BadOptionUsage) and "requires an argument" in exc.message:
        message = f"argument {exc.option_name}: expected one argument"
    else:
        extra = re.match(r"Got unexpected extra arguments? \((.*)\)$", exc.message)
        message = f"unrecognized arguments: {extra[1]}" if extra else exc.message
    in_submit = exc.ctx is not None and exc.ctx.info_name == "submit"
    if in_submit and message.startswith("unrecognized arguments: -"):
        message += " (put the job's command after `--`: trainq submit [options] -- COMMAND...)"
    return f"{prefix}: {message}"


def _short_usage() -> str:
    """What a bare `trainq` prints on stderr: the commands, one line each."""
    group = typer.main.get_command(app)
    assert isinstance(group, click.Group)
    lines = [f"usage: {PROG} [--socket PATH] COMMAND [ARGS]...", "", "commands:"]
    for name, command in group.commands.items():
        lines.append(f"  {name:<8}{command.short_help or ''}")
    lines += ["", f"`{PROG} COMMAND --help` says more about each."]
    return "\n".join(lines) + "\n"


def parse(argv: Sequence[str]) -> argparse.Namespace | int:
    """Parse the command line: the Namespace to run, or the exit status when parsing was
    the whole job (`--help`, `--version`, completion) or failed (one line already printed).
    """
    if not argv and COMPLETE_VAR not in os.environ:  # a shell asking completes with no argv
        sys.stderr.write(_short_usage())
        return USAGE
    if {"--show-completion", "--install-completion"} & {word.split("=")[0] for word in argv}:
        from trainq.completion import keep_our_order  # noqa: PLC0415

        keep_our_order()
    command = typer.main.get_command(app)
    try:
        result = command.main(
            args=list(argv), prog_name=PROG, complete_var=COMPLETE_VAR, standalone_mode=False
        )
    except click.UsageError as exc:
        _say_raw(_one_line_usage(exc))
        return USAGE
    except click.Abort:
        return INTERRUPTED
    except SystemExit as exc:  # completion, and argparse's own exits
        return _exit_status(exc.code)
    if isinstance(result, argparse.Namespace):
        return result
    return _exit_status(result)


def _say_raw(line: str) -> None:
    from trainq.inert import inert  # noqa: PLC0415 (only when something goes wrong)

    try:
        sys.stderr.write(f"{inert(line)}\n")
        sys.stderr.flush()
    except (BrokenPipeError, ValueError):
        pass


def _say(message: str) -> None:
    # One line even if a message from the daemon carries a newline.
    _say_raw(f"{PROG}: " + " ".join(part.strip() for part in message.splitlines() if part.strip()))


def _silence_stdout() -> None:
    # The reader is gone; point stdout at /dev/null so the interpreter's final flush of
    # whatever is still buffered does not print "Exception ignored ... BrokenPipeError".
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


def _exit_status(code: object) -> int:
    if code is None:
        return 0
    return code if isinstance(code, int) else USAGE


def main(argv: Sequence[str] | None = None) -> int:
    """Run `trainq` with `argv` (default: sys.argv[1:]) and return its exit status."""
    debug = bool(os.environ.get(DEBUG_ENV))
    try:
        args = parse(sys.argv[1:] if argv is None else list(argv))
        if isinstance(args, int):
            return args
        from trainq.commands import COMMANDS  # noqa: PLC0415 (see module docstring)
        from trainq.context import Context  # noqa: PLC0415

        try:
            cwd: Path | None = Path.cwd()
        except FileNotFoundError:
            cwd = None  # deleted under us; only `submit` needs it, and says so
        ctx = Context(socket_path=client_socket(args.socket), environ=os.environ, cwd=cwd)
        return COMMANDS[args.command](ctx, args)
    except KeyboardInterrupt:
        return INTERRUPTED
    except BrokenPipeError:
        _silence_stdout()
        return BROKEN_PIPE
    except Exception as exc:
        if debug:
            import traceback  # noqa: PLC0415

            traceback.print_exc()
        if isinstance(exc, TrainqError):
            _say(exc.message)
            return int(exc.exit_code)
        hint = "" if debug else " (run with TRAINQ_DEBUG=1 for a traceback)"
        _say(f"unexpected error: {type(exc).__name__}: {exc}{hint}")
        return 1
