"""A trainer that is preempted and resumes: on its first attempt it says it is ready
(output/data/ready) and runs until SIGTERM, then saves a checkpoint and exits 0; on a later
attempt that finds the checkpoint it records where it resumed (model/resumed.json) and ends."""

import json
import os
import signal
import sys
import time

base = os.environ["SAGEMAKER_BASE_DIR"]
ckpt = os.path.join(base, "checkpoints", "state.json")
attempt = int(os.environ["TRAINQ_ATTEMPT"])

if os.path.exists(ckpt):
    with open(ckpt) as f:
        state = json.load(f)
    state["resumed_on"] = attempt
    with open(os.path.join(base, "model", "resumed.json"), "w") as f:
        json.dump(state, f)
    print(f"resumed from step {state['step']} on attempt {attempt}", flush=True)
    sys.exit(0)


def save(signum: int, frame: object) -> None:
    with open(ckpt, "w") as f:
        json.dump({"step": 7, "saved_on": attempt}, f)
    print("checkpoint saved", flush=True)
    sys.exit(0)


signal.signal(signal.SIGTERM, save)
ready = os.path.join(base, "output", "data", "ready")
with open(ready + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.replace(ready + ".tmp", ready)
while True:
    time.sleep(60)
