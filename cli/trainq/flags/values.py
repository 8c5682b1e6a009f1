"""Flag values: their parsers, wrapped so that their messages reach the user as they are."""

from collections.abc import Callable
from typing import Any

import typer

from trainq.core.states import JobState
from trainq.flag_values import (
    parse_integer,
    parse_job_id,
    parse_seconds,
    parse_whole_number,
    parse_whole_seconds,
)
from trainq.logs import parse_since
from trainq.sweep import parse_sweep


def typed(parse: Callable[[str], Any], name: str) -> Callable[[str], Any]:
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


def indices(text: str | None) -> list[int] | None:
    return None if text is None else [int(part) for part in text.split(",")]


# trainq.core.nodes' HOST_PREFIX, not imported: that module loads the spec (pydantic), which
# every command would then pay for.
HOST_PREFIX = "algo-"


def _node(text: str) -> int:
    """A node of a job of several nodes: its number (1 is algo-1) or its host name."""
    number = text.removeprefix(HOST_PREFIX)
    if not (number.isascii() and number.isdigit()) or int(number) == 0:
        raise ValueError(
            f"expected a node's number (1, 2, ...) or host name (algo-1, ...), got {text!r}"
        )
    return int(number)


def _group_by(text: str) -> str:
    if text not in ("user", "class"):
        raise ValueError(f"invalid choice: {text!r} (choose from 'user', 'class')")
    return text


COUNT = typed(parse_whole_number, "count")
INTEGER = typed(parse_integer, "integer")
JOB_ID = typed(parse_job_id, "job id")
ATTEMPT = typed(_attempt_number, "attempt")
NODE = typed(_node, "node")
DURATION = typed(parse_seconds, "duration")
WHOLE_DURATION = typed(parse_whole_seconds, "duration")
STATE = typed(_state, "state")
GROUP_BY = typed(_group_by, "group")
SWEEP = typed(parse_sweep, "KEY=V1,V2")
SINCE = typed(parse_since, "time")
GPU_INDICES = typed(_gpu_indices, "GPU indices")
