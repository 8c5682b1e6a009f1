"""A tuning experiment as submitted (`trainq tune -f SPEC`, `POST /v1/tunes`): a job spec,
whose trials it makes, and its `[tune]` table. What can be decided from these alone is
checked here; what depends on the host (GPUs, the user's limits) is trainqd's to check.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator, model_validator

from trainq.core.spec import JobSpec
from trainq.core.spec_limits import MAX_HP_KEY
from trainq.core.spec_parts import METRIC_NAME_RE

MAX_TRIALS = 10_000
MAX_PARALLEL = 64
MAX_PARAMETERS = 32
MAX_CHOICES = 256
MAX_GRID = 10_000

Search = Literal["grid", "random", "tpe"]
EarlyStopping = Literal["none", "median", "asha", "hyperband", "pbt"]
Number = float | int
Choice = str | bool | int | float
Count = int  # `int` is a field's name inside Dimension


def _bounded(number: float) -> bool:
    """A range's end: a finite float, or an integer within 64 bits (a larger one would
    overflow on its way to a float, in this check or in the search)."""
    if isinstance(number, int):
        return -(2**63) <= number < 2**63
    return math.isfinite(number)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Dimension(_Strict):
    """One hyperparameter's range: exactly one of the keys."""

    loguniform: tuple[Number, Number] | None = None
    uniform: tuple[Number, Number] | None = None
    int: tuple[StrictInt, StrictInt] | None = None
    choice: Annotated[list[Choice], Field(min_length=1, max_length=MAX_CHOICES)] | None = None

    @model_validator(mode="after")
    def _one(self) -> Dimension:
        given = [k for k in ("loguniform", "uniform", "int", "choice") if getattr(self, k)]
        if len(given) != 1:
            raise ValueError("a range is one of loguniform, uniform, int or choice")
        low_high = self.loguniform or self.uniform or self.int
        if low_high is not None:
            low, high = low_high
            if not (_bounded(low) and _bounded(high)):
                raise ValueError(f"{given[0]}: each end must be a finite number within 64 bits")
            if low >= high:
                raise ValueError(
                    f"{given[0]} = [{low}, {high}]: the low end must be below the high"
                )
            if self.loguniform is not None and low <= 0:
                raise ValueError(f"loguniform = [{low}, {high}]: both ends must be above 0")
        return self

    @property
    def kind(self) -> str:
        return next(k for k in ("loguniform", "uniform", "int", "choice") if getattr(self, k))

    def grid_count(self) -> Count | None:
        """How many values a discrete range holds (counted, never listed); None for a
        continuous one."""
        if self.choice is not None:
            return len(self.choice)
        if self.int is not None:
            return self.int[1] - self.int[0] + 1
        return None

    def grid_values(self) -> list[Choice] | None:
        """Every value of a discrete range; None for a continuous one."""
        if self.choice is not None:
            return list(self.choice)
        if self.int is not None:
            return list(range(self.int[0], self.int[1] + 1))
        return None


class TuneSettings(_Strict):
    """The `[tune]` table."""

    objective: str
    direction: Literal["minimize", "maximize"] = "minimize"
    max_trials: Annotated[StrictInt, Field(ge=1, le=MAX_TRIALS)] = 16
    max_parallel: Annotated[StrictInt, Field(ge=1, le=MAX_PARALLEL)] = 1
    search: Search = "tpe"
    early_stopping: EarlyStopping = "none"
    seed: Annotated[StrictInt, Field(ge=0, le=2**31 - 1)] = 0
    max_failures: Annotated[StrictInt, Field(ge=0, le=MAX_TRIALS)] = 3
    # pbt: how many steps between a trial's perturbations, and which share of the running
    # trials is the bottom that copies the top.
    perturbation_interval: Annotated[StrictInt, Field(ge=1, le=1_000_000)] = 4
    quantile: Annotated[float, Field(gt=0, le=0.5)] = 0.25
    space: dict[str, Dimension]

    @field_validator("objective")
    @classmethod
    def _objective(cls, value: str) -> str:
        if not METRIC_NAME_RE.match(value):
            raise ValueError(f"objective {value!r} is not a metric name")
        return value

    @field_validator("space")
    @classmethod
    def _space(cls, value: dict[str, Dimension]) -> dict[str, Dimension]:
        if not value:
            raise ValueError("the search space is empty: give [tune.space] at least one range")
        if len(value) > MAX_PARAMETERS:
            raise ValueError(f"at most {MAX_PARAMETERS} hyperparameters in the search space")
        for name in value:
            if not name or len(name) > MAX_HP_KEY or "=" in name or not name.isprintable():
                raise ValueError(f"hyperparameter name {name!r} is not valid")
        return value

    @model_validator(mode="after")
    def _grid(self) -> TuneSettings:
        if self.search != "grid":
            return self
        size = 1
        for name, dimension in self.space.items():
            count = dimension.grid_count()  # an int range of 10^12 is never listed
            if count is None:
                raise ValueError(
                    f"a grid search needs discrete ranges: {name} is {dimension.kind} "
                    "(use choice or int)"
                )
            size *= count
            if size > MAX_GRID:
                raise ValueError(f"the grid has over {MAX_GRID} points")
        return self

    def grid(self) -> dict[str, list[Choice]]:
        return {name: d.grid_values() or [] for name, d in self.space.items()}


class TuneRequest(_Strict):
    """The body of `POST /v1/tunes`: the trials' job spec and the `[tune]` table."""

    spec: JobSpec
    tune: TuneSettings

    @model_validator(mode="after")
    def _objective_defined(self) -> TuneRequest:
        names = [d.name for d in self.spec.metric_definitions]
        # Without metric_definitions the objective is expected in metrics.jsonl.
        if names and self.tune.objective not in names:
            raise ValueError(
                f"objective {self.tune.objective!r} is not one of the metric_definitions "
                f"({', '.join(names)})"
            )
        clash = sorted(set(self.tune.space) & set(self.spec.hyperparameters))
        if clash:
            raise ValueError(f"hyperparameter {clash[0]!r} is both fixed and in the search space")
        return self


def as_hyperparameter(value: Any) -> str:
    """A trial's value as its job's hyperparameters carry it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)
