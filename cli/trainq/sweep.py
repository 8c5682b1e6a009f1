"""`trainq submit --sweep KEY=V1,V2,...`: a grid of hyperparameters as one list of specs.

Each `--sweep` names one hyperparameter and its values; the grid is their cartesian
product, in the order the flags were given (the last flag varies fastest). Each point's
values go over the spec's own hyperparameters (`--hp` and the file's), and a named spec's
jobs are told apart by a suffix, `NAME-1`, `NAME-2`, ... The daemon queues the list in one
transaction as one group and refuses one larger than its `max_jobs_per_submit`; a grid
too large to be worth building is refused here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from trainq.core.errors import InvalidRequest

# Far beyond any daemon's cap (10,000 by default), small enough to count without building.
MOST_POINTS = 1_000_000


def parse_sweep(text: str) -> tuple[str, tuple[str, ...]]:
    """`KEY=V1,V2,...`: the hyperparameter's name and its values (at least one, none empty,
    none twice)."""
    key, sep, rest = text.partition("=")
    if not sep:
        raise ValueError(f"expected KEY=V1,V2,..., got {text!r}")
    if not key:
        raise ValueError(f"missing the hyperparameter's name before '=' in {text!r}")
    if not rest:
        raise ValueError(f"no values after '=' in {text!r}; give one or more, separated by ','")
    values = tuple(rest.split(","))
    if "" in values:
        raise ValueError(f"an empty value in {text!r}; separate values with single commas")
    for value in values:
        if values.count(value) > 1:
            raise ValueError(f"value {value!r} is given twice in {text!r}")
    return key, values


def points(sweeps: Sequence[tuple[str, Sequence[str]]]) -> list[dict[str, str]]:
    """The grid's points, each a {name: value} of every swept hyperparameter."""
    keys = [key for key, _ in sweeps]
    for key in keys:
        if keys.count(key) > 1:
            raise InvalidRequest(
                f"--sweep {key} is given twice; give all its values in one: --sweep {key}=A,B,C"
            )
    count = math.prod(len(values) for _, values in sweeps)
    if count > MOST_POINTS:
        raise InvalidRequest(
            f"the sweep has {count:,} points, more than trainqd takes in one request "
            "(its max_jobs_per_submit: 10,000 unless its administrator changed it)"
        )
    grid: list[dict[str, str]] = [{}]
    for key, values in sweeps:
        grid = [{**point, key: value} for point in grid for value in values]
    return grid


def expand(spec: Mapping[str, Any], sweeps: Sequence[tuple[str, Sequence[str]]]) -> list[Any]:
    """One spec per point of the grid: the point's values over the spec's hyperparameters,
    and the spec's name (if any) with the point's number after it."""
    grid = points(sweeps)
    own = spec.get("hyperparameters")
    if own is not None and not isinstance(own, dict):
        raise InvalidRequest(
            f"the spec's 'hyperparameters' must be a table to sweep over, not {type(own).__name__}"
        )
    name = spec.get("name")
    specs = []
    for number, point in enumerate(grid, start=1):
        one = {**spec, "hyperparameters": {**(own or {}), **point}}
        if isinstance(name, str):
            one["name"] = f"{name}-{number}"
        specs.append(one)
    return specs
