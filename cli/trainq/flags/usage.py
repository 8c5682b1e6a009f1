"""A usage error in one line, worded as argparse worded it."""

import re

import click

from trainq.flags.common import PROG, did_you_mean


def _argument_name(param: click.Parameter) -> str:
    if isinstance(param, click.Option):
        return "/".join(param.opts)
    return param.human_readable_name


def _flags(ctx: click.Context) -> list[str]:
    return [opt for param in ctx.command.params for opt in getattr(param, "opts", [])]


def one_line_usage(exc: click.UsageError) -> str:
    """argparse's wording of a usage error, as trainq has always printed it."""
    prefix = exc.ctx.command_path if exc.ctx is not None else PROG
    if isinstance(exc, click.MissingParameter) and exc.param is not None:
        message = f"the following arguments are required: {_argument_name(exc.param)}"
    elif isinstance(exc, click.BadParameter) and exc.param is not None:
        message = f"argument {_argument_name(exc.param)}: {exc.message}"
        # A job id's place takes unknown flags (`show -3` is a bad id): `--nmae` is a flag.
        flag = re.search(r"got '(--[^']+)'$", exc.message)
        if isinstance(exc.param, click.Argument) and flag and exc.ctx is not None:
            hint = did_you_mean(flag[1], _flags(exc.ctx))
            if hint:
                return f"{prefix}: unrecognized arguments: {flag[1]}{hint}"
    elif isinstance(exc, click.NoSuchOption):
        message = f"unrecognized arguments: {exc.option_name}"
        if exc.ctx is not None:  # click's near misses are loose (`--json` for `--bogus`)
            hint = did_you_mean(exc.option_name, _flags(exc.ctx))
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
