"""A trainer with a known learning curve, for trying `trainq tune` (README.md, "Tuning").

Its validation loss is a fixed function of its hyperparameters and the epoch: least at
lr = 0.01 and layers = 4, falling with each epoch. It reads the hyperparameters as every
SageMaker trainer does, prints `epoch N val_loss=V` once an epoch (what the spec's
metric_definitions match) once that epoch's checkpoint is kept, so a paused or preempted
trial resumes where it stopped.
"""

import json
import math
import os
import time

base = os.environ.get("SAGEMAKER_BASE_DIR", "/opt/ml")
with open(os.path.join(base, "input", "config", "hyperparameters.json")) as f:
    hp = json.load(f)
lr = float(hp.get("lr", 0.001))
layers = int(hp.get("layers", 2))
epochs = int(hp.get("epochs", 8))
epoch_seconds = float(hp.get("epoch_seconds", 0.2))

checkpoint = os.path.join(base, "checkpoints", "epoch.json")
start = 1
if os.path.exists(checkpoint):
    with open(checkpoint) as f:
        start = json.load(f)["epoch"] + 1

floor = (math.log10(lr) + 2) ** 2 + 0.05 * (layers - 4) ** 2
val_loss = floor + 1.0 / max(start - 1, 1)  # resumed from a last epoch's checkpoint: done
for epoch in range(start, epochs + 1):
    time.sleep(epoch_seconds)
    val_loss = floor + 1.0 / epoch
    # The checkpoint first, then the report: a tuner acting on the report (PBT copying this
    # trial's checkpoints) then finds the state the reported value belongs to.
    with open(checkpoint + ".tmp", "w") as f:
        json.dump({"epoch": epoch}, f)
    os.replace(checkpoint + ".tmp", checkpoint)
    print(f"epoch {epoch} val_loss={val_loss:.6f}", flush=True)

with open(os.path.join(base, "model", "model.json"), "w") as f:
    json.dump({"lr": lr, "layers": layers, "val_loss": val_loss}, f)
