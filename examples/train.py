"""An example trainer under the SageMaker training-container contract, standard library only.

It fits the line y = w*x + b by stochastic gradient descent and finds everything where a
SageMaker trainer does (under SAGEMAKER_BASE_DIR, else /opt/ml):

    input/config/hyperparameters.json   epochs (default 3), lr (default 0.01)
    input/config/inputdataconfig.json   which channels there are, and their modes
    input/data/train/                   the training set, File mode: CSV files of x,y
    input/data/validation_<epoch>       the validation set, Pipe mode: one FIFO per epoch
    checkpoints/state.json              written after every epoch; a retried or preempted
                                        attempt resumes from it
    model/model.json                    the fitted model
    output/failure                      why it failed, for `trainq show`

Without a train channel it trains on a few points of its own, so that it runs anywhere.
On SIGTERM (a stop, a preemption) it finishes the epoch, saves its checkpoint and exits.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

BASE = Path(os.environ.get("SAGEMAKER_BASE_DIR", "/opt/ml"))
CONFIG = BASE / "input" / "config"
DATA = BASE / "input" / "data"
CHECKPOINT = BASE / "checkpoints" / "state.json"
Point = tuple[float, float]
stop_requested: list[int] = []  # the signals received


def on_sigterm(signum: int, frame: Any) -> None:
    stop_requested.append(signum)


def read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.exists() else {}


def parse_points(lines: Any) -> list[Point]:
    points = []
    for line in lines:
        if line.strip():
            x, y = line.split(",")
            points.append((float(x), float(y)))
    return points


def file_channel(name: str) -> list[Point]:
    """Every CSV line of a File mode channel (a directory, or a single file)."""
    root = DATA / name
    files = sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else [root]
    points: list[Point] = []
    for path in files:
        with path.open() as lines:
            points += parse_points(lines)
    return points


def pipe_channel(name: str, epoch: int) -> list[Point]:
    """One epoch of a Pipe mode channel: its FIFO, read to the end."""
    with (DATA / f"{name}_{epoch}").open() as lines:
        return parse_points(lines)


def mean_squared_error(w: float, b: float, points: list[Point]) -> float:
    return sum((w * x + b - y) ** 2 for x, y in points) / max(1, len(points))


def save(path: Path, state: dict[str, Any]) -> None:
    """Atomically: a kill half-way leaves the previous file whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(state))
    os.replace(partial, path)


def train() -> None:
    hps = read_json(CONFIG / "hyperparameters.json")
    channels = read_json(CONFIG / "inputdataconfig.json")
    epochs, lr = int(hps.get("epochs", 3)), float(hps.get("lr", 0.01))
    if "train" in channels:
        points = file_channel("train")
    else:
        points = [(x / 10, 3 * x / 10 + 1) for x in range(-10, 11)]
    validation = channels.get("validation", {}).get("TrainingInputMode")

    state = read_json(CHECKPOINT) or {"epoch": 0, "w": 0.0, "b": 0.0}
    if state["epoch"]:
        print(f"resuming from the checkpoint of epoch {state['epoch']}", flush=True)
    w, b = state["w"], state["b"]
    pipe_epoch = 0  # each attempt's FIFOs are numbered from 0
    for epoch in range(state["epoch"] + 1, epochs + 1):
        for x, y in points:
            error = w * x + b - y
            w, b = w - lr * error * x, b - lr * error
        line = f"epoch {epoch}/{epochs}: train mse {mean_squared_error(w, b, points):.5f}"
        if validation == "Pipe":
            held_out = pipe_channel("validation", pipe_epoch)
            pipe_epoch += 1
            line += f", validation mse {mean_squared_error(w, b, held_out):.5f}"
        elif validation == "File":
            line += f", validation mse {mean_squared_error(w, b, file_channel('validation')):.5f}"
        print(line, flush=True)
        save(CHECKPOINT, {"epoch": epoch, "w": w, "b": b})
        if stop_requested:
            print(f"stopping after epoch {epoch}: the checkpoint is saved", file=sys.stderr)
            sys.exit(143)
        time.sleep(float(hps.get("epoch_seconds", 0)))  # to watch it run: --hp epoch_seconds=5
    save(BASE / "model" / "model.json", {"w": w, "b": b})
    print(f"model y = {w:.3f}x + {b:.3f} saved to {BASE / 'model' / 'model.json'}", flush=True)


def main() -> int:
    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        train()
    except Exception as exc:
        reason = f"{type(exc).__name__}: {exc}"
        (BASE / "output").mkdir(parents=True, exist_ok=True)
        (BASE / "output" / "failure").write_text(reason[:1024])
        print(reason, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
