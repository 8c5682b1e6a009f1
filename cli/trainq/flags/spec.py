"""The spec's flags (trainq.spec_flags.SPEC_FLAGS) as typer options of the commands that
build a spec (`submit`, `export`)."""

# No `from __future__ import annotations`: typer reads every command's annotations on each
# run (see trainq.cli).
import argparse
import functools
import inspect
from collections.abc import Callable
from typing import Annotated, Any

import typer

from trainq.flags.values import typed
from trainq.spec_flags import SPEC_FLAGS, SpecFlag


def _spec_option(flag: SpecFlag, panel: str | None) -> Any:
    """The typer option of one of the spec's flags (trainq.spec_flags.SPEC_FLAGS)."""
    parser = None if flag.parse is None else typed(flag.parse, flag.param)
    return typer.Option(
        flag.flag,
        metavar=flag.metavar,
        parser=parser,
        help=flag.help,
        show_default=False,
        rich_help_panel=panel,
    )


def with_spec_flags(
    after: str, panel: str | None = None
) -> Callable[[Callable[..., argparse.Namespace]], Callable[..., argparse.Namespace]]:
    """Give a command the spec's flags (trainq.spec_flags.SPEC_FLAGS), after its parameter
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
