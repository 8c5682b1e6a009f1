"""Ray Tune's side of bench/tune.py: the same curves as a function trainable, its ASHA and
its PBT schedulers, four simulated GPUs as a custom resource. Run by an interpreter with
`ray[tune]`; prints one JSON line: a row per mode, as bench/tune.py reports trainq's.

    python bench/tune_ray.py EPOCHS EPOCH_SECONDS TRIALS PARALLEL
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
import time
from typing import Any

import ray  # type: ignore[import-not-found]
from ray import tune  # type: ignore[import-not-found]
from ray.tune.schedulers import (  # type: ignore[import-not-found]
    ASHAScheduler,
    PopulationBasedTraining,
)

EPOCHS, EPOCH, TRIALS, PARALLEL = (
    int(sys.argv[1]),
    float(sys.argv[2]),
    int(sys.argv[3]),
    int(sys.argv[4]),
)
OPTIMUM = 1.0 / EPOCHS
SPACE = {"lr": tune.loguniform(1e-4, 1e-1), "layers": tune.randint(2, 9)}


def curve(config: dict[str, Any]) -> None:
    """examples/tune/train.py's curve, reported and checkpointed each epoch."""
    start = 1
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as where, open(os.path.join(where, "epoch.json")) as f:
            start = json.load(f)["epoch"] + 1
    floor = (math.log10(config["lr"]) + 2) ** 2 + 0.05 * (config["layers"] - 4) ** 2
    for epoch in range(start, EPOCHS + 1):
        time.sleep(EPOCH)
        with tempfile.TemporaryDirectory() as where:
            with open(os.path.join(where, "epoch.json"), "w") as f:
                json.dump({"epoch": epoch}, f)
            tune.report(
                {"val_loss": floor + 1.0 / epoch, "epoch": epoch},
                checkpoint=tune.Checkpoint.from_directory(where),
            )


def run(name: str, scheduler: Any) -> dict[str, Any]:
    trainable = tune.with_resources(
        curve, tune.PlacementGroupFactory([{"CPU": 0.01, "gpu": 0, "fake_gpu": 1}])
    )
    tuner = tune.Tuner(
        trainable,
        param_space=SPACE,
        tune_config=tune.TuneConfig(
            metric="val_loss",
            mode="min",
            num_samples=TRIALS,
            scheduler=scheduler,
            max_concurrent_trials=PARALLEL,
        ),
        run_config=tune.RunConfig(storage_path=tempfile.mkdtemp(prefix="raytune"), verbose=0),
    )
    began = time.time()
    results = tuner.fit()
    wall = time.time() - began
    best, seconds, reached = math.inf, 0.0, []
    for result in results:
        frame = result.metrics_dataframe
        if frame is None or frame.empty:
            continue
        best = min(best, float(frame["val_loss"].min()))
        seconds += float(frame["time_total_s"].max())
        close = frame[frame["val_loss"] <= OPTIMUM * 1.01]
        if not close.empty:
            reached.append(float(close["timestamp"].min()) - began)
    return {
        "mode": name,
        "best": best,
        "gpu_seconds": seconds,
        "wall": wall,
        "within_1pct": min(reached) if reached else None,
        "gap": None,
    }


def main() -> None:
    ray.init(num_cpus=2, resources={"fake_gpu": PARALLEL}, include_dashboard=False)
    rows = [
        run(
            "Ray Tune ASHA",
            ASHAScheduler(time_attr="epoch", max_t=EPOCHS, grace_period=1, reduction_factor=3),
        ),
        run(
            "Ray Tune PBT",
            PopulationBasedTraining(
                time_attr="epoch", perturbation_interval=3, hyperparam_mutations=SPACE
            ),
        ),
    ]
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
