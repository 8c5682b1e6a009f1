"""A SageMaker script-mode user script, started by the sagemaker-training toolkit's `train`.

Its first attempt saves a checkpoint under /opt/ml/checkpoints (the fixed path SageMaker
code uses) and dies by the signal given with --crash (SEGV, ABRT; none: no crash); a later
attempt resumes from that checkpoint and saves a model."""

import argparse
import json
import os
import signal

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, required=True)
parser.add_argument("--crash", default="none")
parser.add_argument("--model-dir", default=os.environ["SM_MODEL_DIR"])
args = parser.parse_args()

checkpoint = "/opt/ml/checkpoints/state.json"
attempt = int(os.environ["TRAINQ_ATTEMPT"])
start = 0
if os.path.exists(checkpoint):
    with open(checkpoint) as f:
        start = json.load(f)["epoch"]
    print(f"resuming from epoch {start} on attempt {attempt}", flush=True)
for epoch in range(start, args.epochs):
    with open(checkpoint, "w") as f:
        json.dump({"epoch": epoch + 1, "attempt": attempt}, f)
    if args.crash != "none" and attempt == 1 and epoch == 0:
        print(f"attempt {attempt} dying by SIG{args.crash}", flush=True)
        signal.signal(getattr(signal, f"SIG{args.crash}"), signal.SIG_DFL)
        os.kill(os.getpid(), getattr(signal, f"SIG{args.crash}"))
with open(os.path.join(args.model_dir, "model.json"), "w") as f:
    json.dump(
        {
            "epochs": args.epochs,
            "resumed_from": start,
            "attempt": attempt,
            "channels": json.loads(os.environ["SM_CHANNELS"]),
            "hps": json.loads(os.environ["SM_HPS"]),
        },
        f,
    )
print("training done", flush=True)
