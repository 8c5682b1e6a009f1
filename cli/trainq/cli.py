"""The `trainq` command: its typer application (each command's flags are in `trainq.flags`),
the dispatch to one function per command (`trainq.commands.COMMANDS`), and the rule that
every failure is one line on stderr with a meaningful exit status.

Parsing and running are two steps. Each typer function of trainq.flags only turns its flags
into an `argparse.Namespace` (the commands' one input type) and returns it; `main` then runs
the command. So parsing is testable alone (`parse`), and the commands and their imports (h11,
rich for tables) are loaded only once the line has parsed: `--help`, `--version`, usage
errors and Tab completion do not pay for them.

Start-up cost (bench/cli.py measures it; the budget of `trainq submit` and `trainq ls` is
150 ms median on a 2-core machine): typer is pinned below 0.26 (from 0.29 it validates every
flag through pydantic, ~150 ms of imports; from 0.26 it carries click as a private copy,
whose exceptions this module needs). rich is loaded by typer only to draw `--help`, and by
the commands that draw tables; usage errors are worded in one line without it
(`trainq.flags.usage`). Flag values are parsed by trainq.flag_values' functions, wrapped
(`trainq.flags.values.typed`) so that their messages reach the user as they are.

Adding a command: write `def run(ctx: Context, args: Namespace) -> int` in its own module,
add a line to `trainq.commands.COMMANDS` that imports it lazily, add one function to the
module of trainq.flags of its concern, decorated with `@commands.command(short_help=...)`,
whose parameters are its flags and which returns `parsed(ctx, "name", flag=value, ...)`:
the attribute names the command reads; and add its name to `ORDER` here. The flags that set
a spec's fields are declared once (`trainq.spec_flags.SPEC_FLAGS`); `@with_spec_flags`
(`trainq.flags.spec`) gives them to the commands that build a spec (`submit`, `export`).

Exit statuses: trainq.core.errors.ExitCode (2 for usage errors), 130 after Ctrl-C, 141 when the
reader of stdout went away (`trainq ls | head -1`), both quietly, as a shell would report a
process ended by SIGINT or SIGPIPE; 1 for anything unexpected, with a hint to rerun with
TRAINQ_DEBUG=1 for the traceback.
"""

# No `from __future__ import annotations`: typer reads every command's annotations on each
# run, and evaluating them once at import is cheaper than typer evaluating strings.
import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import click
import typer
from typer.core import TyperGroup
from typer.models import CommandInfo

from trainq.core import __version__
from trainq.core.errors import TrainqError
from trainq.core.paths import client_socket
from trainq.flags import control, experiments, export, host, logs, queue, submit, ui
from trainq.flags.common import PROG, Socket, UsageError, did_you_mean
from trainq.flags.usage import one_line_usage

INTERRUPTED = 130
BROKEN_PIPE = 141
USAGE = 2
DEBUG_ENV = "TRAINQ_DEBUG"
COMPLETE_VAR = "_TRAINQ_COMPLETE"  # set by the script of `trainq --show-completion`


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
            raise UsageError(
                f"argument COMMAND: invalid choice: {name!r} (choose from {choices})"
                + did_you_mean(name, self.commands),
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


# The order in which `trainq` and `trainq --help` list the commands.
ORDER = (
    "submit",
    "stop",
    "ls",
    "requeue",
    "show",
    "logs",
    "metrics",
    "tune",
    "wait",
    "gpus",
    "health",
    "top",
    "report",
    "users",
    "hold",
    "release",
    "update",
    "rm",
    "drain",
    "resume",
    "ui",
    "export",
)
PARTS = (submit, control, queue, logs, experiments, host, ui, export)


def _place(info: CommandInfo) -> int:
    """Where the command goes in `ORDER`; one that ORDER forgot is a mistake made here."""
    assert info.callback is not None
    name = info.callback.__name__
    if name not in ORDER:
        raise RuntimeError(f"trainq.cli.ORDER does not list the command {name!r}")
    return ORDER.index(name)


app.registered_commands.extend(
    sorted((info for part in PARTS for info in part.commands.registered_commands), key=_place)
)


# -- running ----------------------------------------------------------------------------


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
        _say_raw(one_line_usage(exc))
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
