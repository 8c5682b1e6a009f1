"""Population based training's decisions, as pure functions (tuner.py carries them out).

At each perturbation interval (every `perturbation_interval` steps of a trial), the trial is
ranked among the tune's running trials by their latest objective: one in the bottom
quantile takes (exploit) the checkpoints of one in the top quantile and goes on with that
trial's hyperparameters perturbed (explore): a continuous value times 0.8 or 1.2, an integer
one step down or up, a choice the next or previous one, each kept within its range, and with
probability 1/4 a value drawn anew from the range instead.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

from trainq.core.tuning import Dimension

RESAMPLE = 0.25


@dataclass(frozen=True)
class Standing:
    """A running trial's place: its number, latest step and objective value."""

    number: int
    step: float
    value: float


def donor_for(
    trial: Standing, others: list[Standing], *, quantile: float, minimize: bool
) -> Standing | None:
    """The trial to copy if `trial` is in the bottom quantile of `others` (itself among
    them), else None. Ranked by value only; with fewer than 2 trials nothing is decided."""
    if len(others) < 2:
        return None
    ranked = sorted(others, key=lambda s: s.value if minimize else -s.value)
    cut = max(1, math.floor(len(ranked) * quantile))
    top, bottom = ranked[:cut], ranked[-cut:]
    if trial.number not in {s.number for s in bottom} or trial.number in {s.number for s in top}:
        return None
    seed = trial.number * 7919 + int(trial.step)
    return random.Random(seed).choice(top)  # noqa: S311 (a search, not a secret)


def _perturb_one(value: Any, dimension: Dimension, rng: random.Random) -> Any:
    if dimension.choice is not None:
        choices = dimension.choice
        if rng.random() < RESAMPLE or value not in choices:
            return rng.choice(choices)
        at = choices.index(value) + rng.choice((-1, 1))
        return choices[min(max(at, 0), len(choices) - 1)]
    if dimension.int is not None:
        low, high = dimension.int
        if rng.random() < RESAMPLE:
            return rng.randint(low, high)
        return min(max(int(value) + rng.choice((-1, 1)), low), high)
    bottom, top = map(float, dimension.loguniform or dimension.uniform or (0.0, 1.0))
    if rng.random() < RESAMPLE:
        if dimension.loguniform is not None:
            return math.exp(rng.uniform(math.log(bottom), math.log(top)))
        return rng.uniform(bottom, top)
    return min(max(float(value) * rng.choice((0.8, 1.2)), bottom), top)


def perturb(params: dict[str, Any], space: dict[str, Dimension], seed: int) -> dict[str, Any]:
    rng = random.Random(seed)  # noqa: S311 (a search, not a secret)
    return {name: _perturb_one(params[name], space[name], rng) for name in sorted(space)}
