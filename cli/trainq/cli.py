"""The `trainq` command: argument parsing, the dispatch to one function per command, and the
rule that every failure is one line on stderr with a meaningful exit status.

Why argparse and not typer (a decision, measured on the lab's 2-core machines): `import
typer` pulls in pydantic and a typer `submit` takes 260-380 ms, `import httpx` alone ~140 ms,
`import rich.console` ~90 ms, while argparse + h11 + json + socket do a whole submit in
~70 ms; the target is `trainq submit` <= 120 ms median. So: the standard library's argparse,
one subcommand per API request, joined by one dispatch table (`trainq.commands.COMMANDS`,
in the style of pueue's client); HTTP/1.1 with h11 on a blocking unix socket
(`trainq.client`); rich imported only by the commands that draw tables (`ls`, `show`,
`gpus`: `trainq.render`); pydantic never (`submit` sends a plain dict, the daemon validates
it and answers one line). The commands, and h11 with them, are imported only once the
arguments have parsed, so `--help`, `--version` and usage errors do not pay for them.

Exit statuses: trainq.core.errors.ExitCode (2 for usage errors), 130 after Ctrl-C, 141 when the
reader of stdout went away (`trainq ls | head -1`), both quietly, as a shell would report a
process ended by SIGINT or SIGPIPE; 1 for anything unexpected, with a hint to rerun with
TRAINQ_DEBUG=1 for the traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from trainq.core import __version__
from trainq.core.errors import TrainqError
from trainq.core.paths import SOCKET_ENV, client_socket
from trainq.core.states import JobState
from trainq.specfile import (
    parse_channel,
    parse_env,
    parse_key_value,
    parse_seconds,
    parse_whole_seconds,
)

if TYPE_CHECKING:
    from collections.abc import Callable

INTERRUPTED = 130
BROKEN_PIPE = 141
DEBUG_ENV = "TRAINQ_DEBUG"


class _Formatter(argparse.HelpFormatter):
    """argparse's help layout, but measuring the terminal without importing shutil.

    argparse builds a formatter on every add_argument(), and its default imports shutil
    (and with it bz2, lzma and zlib) to learn the width: ~5 ms on every `trainq` run.
    """

    def __init__(
        self,
        prog: str,
        indent_increment: int = 2,
        max_help_position: int = 24,
        width: int | None = None,
    ) -> None:
        super().__init__(prog, indent_increment, max_help_position, width or _columns())


def _columns() -> int:
    # What shutil.get_terminal_size() answers: $COLUMNS, the terminal, else 80.
    try:
        return int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        pass
    try:
        return os.get_terminal_size().columns  # of standard output
    except OSError:
        return 80


class _Parser(argparse.ArgumentParser):
    """argparse, but an error is one line (`trainq submit: <message>`), no usage block, and
    no abbreviated flags (`--gp` for `--gpus`), which would make adding a flag a breaking
    change."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message}\n")


def _argument_type(parse: Callable[[str], Any], name: str) -> Callable[[str], Any]:
    """An argparse type whose ValueError message reaches the user as it is."""

    def convert(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = name
    return convert


def _whole_number(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise ValueError(f"expected a whole number (0 or more), got {text!r}")
    return value


def _attempt_number(text: str) -> int:
    if not text.isdigit() or int(text) == 0:
        raise ValueError(f"expected an attempt number (1, 2, ...), got {text!r}")
    return int(text)


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"expected an integer, got {text!r}") from None


def _job_id(text: str) -> int:
    if not text.isdigit() or int(text) == 0:
        raise ValueError(f"expected a job id (a whole number like 12), got {text!r}")
    return int(text)


def _state(text: str) -> str:
    state = text.upper()
    if state not in JobState.__members__:
        raise ValueError(f"unknown state {text!r} (one of {', '.join(JobState.__members__)})")
    return state


COUNT = _argument_type(_whole_number, "count")
INTEGER = _argument_type(_integer, "integer")
JOB_ID = _argument_type(_job_id, "job id")
ATTEMPT = _argument_type(_attempt_number, "attempt")
DURATION = _argument_type(parse_seconds, "duration")
WHOLE_DURATION = _argument_type(parse_whole_seconds, "duration")
KEY_VALUE = _argument_type(parse_key_value, "KEY=VALUE")
ENV_ENTRY = _argument_type(parse_env, "NAME=VALUE")
CHANNEL = _argument_type(parse_channel, "channel")
STATE = _argument_type(_state, "state")

SUBMIT_HELP = """\
Submit a job and print its id. The spec comes from -f FILE (TOML or JSON) with the flags
over it. A subprocess job (a COMMAND after `--`, or `command` in the file) runs in the
current directory unless --workdir says otherwise, and, unless its environment sets PATH,
with your PATH, so `python3` means the same program it means to you. Relative paths
(channels, -f, --workdir) are taken from the current directory; `~` is expanded."""


def _add_submit(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("submit", parents=[common], help="submit a job", description=SUBMIT_HELP)
    p.add_argument("-f", "--file", metavar="SPEC", help="spec file (.toml or .json)")
    p.add_argument("--name", help="job name (letters, digits, '.', '_', '-')")
    p.add_argument("--gpus", type=COUNT, metavar="N", help="whole GPUs the job needs")
    p.add_argument("--priority", type=INTEGER, metavar="P", help="higher runs first")
    p.add_argument(
        "--hp",
        type=KEY_VALUE,
        action="append",
        default=[],
        metavar="K=V",
        help="hyperparameter (repeatable; replaces the file's entry of that name)",
    )
    p.add_argument(
        "--channel",
        type=CHANNEL,
        action="append",
        default=[],
        metavar="NAME=PATH[:MODE]",
        help="input channel; MODE is File (default), Pipe or FastFile (repeatable)",
    )
    p.add_argument(
        "--env",
        type=ENV_ENTRY,
        action="append",
        default=[],
        metavar="K=V",
        help="environment variable; K alone passes on your value (repeatable)",
    )
    p.add_argument(
        "--max-runtime",
        type=WHOLE_DURATION,
        metavar="S",
        help="stop the job after this long: seconds, or 30m, 12h, 2d",
    )
    p.add_argument(
        "--stop-grace",
        type=DURATION,
        metavar="S",
        help="time between SIGTERM and SIGKILL when the job is stopped",
    )
    p.add_argument(
        "--max-retries", type=COUNT, metavar="N", help="retries of transient crashes (default 3)"
    )
    p.add_argument("--image", help="run this container image (as `IMAGE train`)")
    p.add_argument("--engine", choices=("docker", "podman"), help="container engine")
    p.add_argument("--workdir", metavar="DIR", help="working directory of a subprocess job")
    p.add_argument(
        "--wait",
        action="store_true",
        help="wait for the job to end; exit 0 COMPLETED, 1 FAILED, 3 STOPPED",
    )
    p.add_argument("--json", action="store_true", help="print the job record as JSON")
    p.add_argument(
        "command_argv",
        nargs="*",
        metavar="-- COMMAND",
        help="the trainer's command line (subprocess jobs)",
    )


def build_parser() -> tuple[_Parser, dict[str, _Parser]]:
    """The parser, and each command's own parser (for errors in the command's name)."""
    # --socket is accepted before or after the command; SUPPRESS keeps a command's parser
    # from overwriting the value given before the command with None.
    common = _Parser(add_help=False)
    common.add_argument(
        "--socket",
        default=argparse.SUPPRESS,
        metavar="PATH",
        help=f"trainqd's socket (default: ${SOCKET_ENV}, your own daemon's "
        "socket if it exists, else /run/trainq/trainq.sock)",
    )
    parser = _Parser(
        prog="trainq",
        parents=[common],
        description="Submit and watch training jobs run by trainqd.",
    )
    parser.add_argument("--version", action="version", version=f"trainq {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    _add_submit(sub, common)

    p = sub.add_parser("stop", parents=[common], help="stop a job (SIGTERM, grace, SIGKILL)")
    p.add_argument("job", type=JOB_ID, metavar="JOB")
    p.add_argument(
        "--grace",
        type=DURATION,
        metavar="S",
        help="seconds between SIGTERM and SIGKILL (default: the job's own)",
    )

    p = sub.add_parser("ls", parents=[common], help="list jobs (unfinished ones by default)")
    p.add_argument("--all", action="store_true", help="include ended jobs")
    p.add_argument("--user", metavar="NAME", help="only this user's jobs")
    p.add_argument("--state", type=STATE, metavar="S", help="only jobs in this state")
    p.add_argument("--wide", action="store_true", help="absolute times, full reasons")
    p.add_argument("--json", action="store_true", help="print the daemon's JSON")

    p = sub.add_parser("show", parents=[common], help="everything about one job")
    p.add_argument("job", type=JOB_ID, metavar="JOB")
    p.add_argument("--json", action="store_true", help="print the job record as JSON")

    p = sub.add_parser("logs", parents=[common], help="print a job's output")
    p.add_argument("job", type=JOB_ID, metavar="JOB")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing until it ends")
    which = p.add_mutually_exclusive_group()
    which.add_argument(
        "--stdout",
        dest="stream",
        action="store_const",
        const="stdout",
        help="only its standard output",
    )
    which.add_argument(
        "--stderr",
        dest="stream",
        action="store_const",
        const="stderr",
        help="only its standard error",
    )
    p.set_defaults(stream="both")
    p.add_argument("--attempt", type=ATTEMPT, metavar="N", help="this attempt (default: last)")

    p = sub.add_parser(
        "wait",
        parents=[common],
        help="wait for a job to end",
        description="Exit 0 if it COMPLETED, 1 if it FAILED, 3 if STOPPED.",
    )
    p.add_argument("job", type=JOB_ID, metavar="JOB")

    p = sub.add_parser("gpus", parents=[common], help="the GPUs and who holds them")
    p.add_argument("--json", action="store_true", help="print the daemon's JSON")

    p = sub.add_parser("health", parents=[common], help="is trainqd up, and how busy")
    p.add_argument("--json", action="store_true", help="print the daemon's JSON")

    return parser, dict(sub.choices)


def parse(argv: list[str]) -> argparse.Namespace:
    """Parse the command line; argparse's SystemExit (help, version, errors) passes through."""
    parser, commands = build_parser()
    args, extra = parser.parse_known_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        parser.exit(2)
    if extra:
        hint = ""
        if args.command == "submit" and any(arg.startswith("-") for arg in extra):
            hint = " (put the job's command after `--`: trainq submit [options] -- COMMAND...)"
        commands[args.command].error(f"unrecognized arguments: {' '.join(extra)}{hint}")
    return args


def _say(message: str) -> None:
    # One line even if a message from the daemon carries a newline.
    line = " ".join(part.strip() for part in message.splitlines() if part.strip())
    try:
        sys.stderr.write(f"trainq: {line}\n")
        sys.stderr.flush()
    except (BrokenPipeError, ValueError):
        pass


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
    return code if isinstance(code, int) else 2


def main(argv: list[str] | None = None) -> int:
    """Run `trainq` with `argv` (default: sys.argv[1:]) and return its exit status."""
    debug = bool(os.environ.get(DEBUG_ENV))
    try:
        try:
            args = parse(sys.argv[1:] if argv is None else list(argv))
        except SystemExit as exc:
            return _exit_status(exc.code)
        from trainq.commands import COMMANDS, Context  # noqa: PLC0415 (see module docstring)

        try:
            cwd: Path | None = Path.cwd()
        except FileNotFoundError:
            cwd = None  # deleted under us; only `submit` needs it, and says so
        ctx = Context(
            socket_path=client_socket(getattr(args, "socket", None)),
            environ=os.environ,
            cwd=cwd,
        )
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
