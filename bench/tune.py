"""Tuning: the same known learning curves and budget searched by trainq's `grid` (the sweep
users have today, the baseline), `tpe` + `asha` and `pbt`, on a real trainqd with four
simulated GPUs; and by Ray Tune's ASHA and PBT when `--ray-python` names an interpreter
with `ray[tune]` (bench/tune_ray.py, run by it).

The trainer is examples/tune/train.py: val_loss = (log10(lr) + 2)^2 + 0.05 (layers - 4)^2 +
1/epoch, 9 epochs of EPOCH seconds, a checkpoint each; the optimum is 1/9. Reported per
mode: the best objective, GPU-seconds (trial-seconds: every attempt's run time), wall time,
wall time until a trial within 1 % of the optimum ended, and the median gap between a
trial's end and the next trial's start.

    .venv/bin/python bench/tune.py [--ray-python /path/to/python]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import load, machine, poll_until, running_daemon

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "tune" / "train.py"
EPOCHS, EPOCH = 9, 0.2
OPTIMUM = 1.0 / EPOCHS
TRIALS, PARALLEL = 16, 4
OBJECTIVE = {"name": "val_loss", "regex": r"epoch (?P<step>[0-9]+) val_loss=([-+0-9.eE]+)"}
SPACE = {"lr": {"loguniform": [1e-4, 1e-1]}, "layers": {"int": [2, 8]}}
# The 4 x 4 grid at the middle of four equal bins of each range (log bins for lr).
GRID = {"lr": {"choice": [1.8e-4, 1e-3, 5.6e-3, 3.2e-2]}, "layers": {"choice": [2, 4, 6, 8]}}
MODES: dict[str, dict[str, Any]] = {
    "trainq grid": {"search": "grid", "space": GRID},
    "trainq tpe + asha": {"search": "tpe", "early_stopping": "asha", "space": SPACE},
    "trainq pbt": {
        "search": "random",
        "early_stopping": "pbt",
        "perturbation_interval": 3,
        "space": SPACE,
    },
}


def _seconds(stamp: str | None) -> float | None:
    return None if stamp is None else datetime.fromisoformat(stamp).timestamp()


def run_trainq(name: str, settings: dict[str, Any]) -> dict[str, Any]:
    with running_daemon(gpus="fake:4") as daemon, daemon.client() as client:
        spec = {
            "command": [sys.executable, str(EXAMPLE)],
            "working_dir": "/tmp",
            "gpus": 1,
            "metric_definitions": [OBJECTIVE],
            "hyperparameters": {"epochs": EPOCHS, "epoch_seconds": EPOCH},
        }
        tune = {
            "objective": "val_loss",
            "max_trials": TRIALS,
            "max_parallel": PARALLEL,
            "seed": 1,
            **settings,
        }
        began = time.time()
        created = client.json("POST", "/v1/tunes", {"spec": spec, "tune": tune}, expect=201)

        def ended() -> dict[str, Any] | None:
            record: dict[str, Any] = client.json("GET", f"/v1/tunes/{created['id']}")
            return record if record["state"] != "RUNNING" else None

        done = poll_until(ended, timeout=900, interval=0.2, what=f"{name} to end")
        wall = time.time() - began
        gpu_seconds, reached, starts, ends = 0.0, [], [], []
        for trial in done["trials"]:
            job = client.job(trial["job_id"])
            for attempt in job["attempts"]:
                start, end = _seconds(attempt["started_at"]), _seconds(attempt["ended_at"])
                if start is not None and end is not None:
                    gpu_seconds += end - start
                    starts.append(start)
                    ends.append(end)
            best = trial.get("best")
            last_end = _seconds(job["ended_at"])
            if best is not None and best <= OPTIMUM * 1.01 and last_end is not None:
                reached.append(last_end - began)
        gaps = sorted(
            min(s - e for s in starts if s >= e) for e in ends if any(s >= e for s in starts)
        )
        bests = [t["best"] for t in done["trials"] if t.get("best") is not None]
        return {
            "mode": name,
            "best": min(bests),
            "gpu_seconds": gpu_seconds,
            "wall": wall,
            "within_1pct": min(reached) if reached else None,
            "gap": statistics.median(gaps) if gaps else None,
        }


def run_ray(python: str) -> list[dict[str, Any]]:
    script = Path(__file__).resolve().parent / "tune_ray.py"
    args = [python, str(script), str(EPOCHS), str(EPOCH), str(TRIALS), str(PARALLEL)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=1800, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"tune_ray.py failed: {done.stderr[-2000:]}")
    results: list[dict[str, Any]] = json.loads(done.stdout.strip().splitlines()[-1])
    return results


def cell(value: float | None, unit: str = "") -> str:
    return "-" if value is None else f"{value:.3g}{unit}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ray-python", help="an interpreter with ray[tune] installed")
    args = parser.parse_args()
    print(f"{machine()}; {load()}")
    rows = [run_trainq(name, settings) for name, settings in MODES.items()]
    if args.ray_python:
        rows += run_ray(args.ray_python)
    base = rows[0]
    print(
        f"{TRIALS} trials, {PARALLEL} at once, {EPOCHS} epochs of {EPOCH} s; optimum "
        f"{OPTIMUM:.4f}; {load()}"
    )
    print("| mode | best | GPU-s (ratio to grid) | wall s | s to within 1 % | gap end-to-start |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        ratio = row["gpu_seconds"] / base["gpu_seconds"]
        print(
            f"| {row['mode']} | {row['best']:.4f} | {row['gpu_seconds']:.1f} ({ratio:.2f}) | "
            f"{row['wall']:.1f} | {cell(row['within_1pct'])} | {cell(row['gap'], ' s')} |"
        )


if __name__ == "__main__":
    main()
