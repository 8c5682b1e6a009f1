"""The [tune] table's checks, decided from the request alone, each one line; and the CLI
never imports Optuna."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from trainq.core.tuning import TuneRequest

SPEC = {
    "command": ["true"],
    "metric_definitions": [{"name": "val_loss", "regex": "val_loss=([0-9.]+)"}],
    "hyperparameters": {"epochs": "3"},
}


def request(spec: dict[str, Any] | None = None, **tune: Any) -> TuneRequest:
    return TuneRequest.model_validate({"spec": spec or SPEC, "tune": tune})


def test_a_complete_table_is_taken() -> None:
    made = request(
        objective="val_loss",
        search="grid",
        space={"batch": {"choice": [32, 64]}, "layers": {"int": [2, 4]}},
    )
    assert made.tune.grid() == {"batch": [32, 64], "layers": [2, 3, 4]}


@pytest.mark.parametrize(
    ("tune", "says"),
    [
        ({"objective": "val_loss", "space": {"x": {"uniform": [1, 1]}}}, "low end must be below"),
        ({"objective": "val_loss", "space": {"x": {"choice": []}}}, "at least 1 item"),
        (
            {"objective": "val_loss", "space": {"x": {"uniform": [0, 1], "int": [0, 1]}}},
            "one of loguniform, uniform, int or choice",
        ),
        ({"objective": "val_loss", "space": {"epochs": {"int": [1, 9]}}}, "both fixed and in"),
        ({"objective": "val_loss", "max_parallel": 65, "space": {"x": {"int": [0, 1]}}}, "65"),
        (
            {"objective": "val_loss", "quantile": 0.75, "space": {"x": {"int": [0, 1]}}},
            "less than or equal to 0.5",
        ),
        (
            {"objective": "val_loss", "search": "grid", "space": {"x": {"int": [0, 100_000]}}},
            "over 10000 points",
        ),
    ],
)
def test_bad_tables_are_refused(tune: dict[str, Any], says: str) -> None:
    with pytest.raises(ValidationError, match=says):
        request(**tune)


def test_without_metric_definitions_the_objective_comes_from_metrics_jsonl() -> None:
    spec = {k: v for k, v in SPEC.items() if k != "metric_definitions"}
    assert request(spec, objective="anything", space={"x": {"int": [0, 1]}}).tune.objective


def test_pbt_copies_the_top_into_the_bottom_and_perturbs_within_ranges() -> None:
    from trainq.core.tuning import Dimension
    from trainqd.experiments.pbt import Standing, donor_for, perturb

    running = [Standing(n, 4, value) for n, value in enumerate([0.1, 0.5, 0.9, 0.3])]
    assert donor_for(running[2], running, quantile=0.25, minimize=True) == running[0]
    assert donor_for(running[1], running, quantile=0.25, minimize=True) is None
    assert donor_for(running[0], running, quantile=0.25, minimize=False) == running[2]
    assert donor_for(running[0], running[:1], quantile=0.5, minimize=True) is None
    space = {
        "lr": Dimension(loguniform=(1e-4, 1e-1)),
        "layers": Dimension(int=(2, 8)),
        "act": Dimension(choice=["relu", "tanh"]),
    }
    for seed in range(200):
        new = perturb({"lr": 0.1, "layers": 8, "act": "relu"}, space, seed)
        assert 1e-4 <= new["lr"] <= 0.1
        assert 2 <= new["layers"] <= 8
        assert new["act"] in ("relu", "tanh")
    assert perturb({"lr": 0.01, "layers": 4, "act": "tanh"}, space, 5) == perturb(
        {"lr": 0.01, "layers": 4, "act": "tanh"}, space, 5
    )
