"""The chaos soak's trainer (bench/chaos.py): counts steps, checkpoints, resumes, and writes
every step it did to a ledger the soak reads.

    chaos_trainer.py LEDGER_DIR STEPS STEP_SECONDS CHECKPOINT_EVERY [CRASH_AT]

It resumes from $SAGEMAKER_BASE_DIR/checkpoints/chaos.json (the last step checkpointed, or 0),
does the steps after it, checkpoints every CHECKPOINT_EVERY steps and on SIGTERM (then exits
0, as a trainer stopped or preempted to checkpoint does), and after the last step checkpoints
STEPS and says "done". Each event is one line appended to LEDGER_DIR/<job id>.jsonl, with
the attempt, the pid and the GPUs the trainer was given, and always after what it reports (a
checkpoint line follows the checkpoint's rename), so the ledger never claims more than was
done. With CRASH_AT, its first attempt crashes on reaching that step, as SIGABRT would
(exit 134, which trainq retries). Standard library only: it runs under the system's
interpreter, as the job's owner.
"""

import json
import os
import signal
import sys
import time

ledger_dir, steps, step_seconds, every = (
    sys.argv[1],
    int(sys.argv[2]),
    float(sys.argv[3]),
    int(sys.argv[4]),
)
crash_at = int(sys.argv[5]) if len(sys.argv) > 5 else 0
job = os.environ["TRAINQ_JOB_ID"]
attempt = int(os.environ["TRAINQ_ATTEMPT"])
checkpoint = os.path.join(os.environ["SAGEMAKER_BASE_DIR"], "checkpoints", "chaos.json")
ledger = os.open(
    os.path.join(ledger_dir, f"{job}.jsonl"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644
)


def record(event: str, **fields: object) -> None:
    # One write of one line on an O_APPEND descriptor: lines of two processes never mix.
    line = {"t": time.time(), "ev": event, "attempt": attempt, "pid": os.getpid(), **fields}
    os.write(ledger, (json.dumps(line) + "\n").encode())


def save(step: int) -> None:
    partial = checkpoint + ".tmp"
    with open(partial, "w") as f:
        json.dump({"step": step}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(partial, checkpoint)
    record("ckpt", step=step)


stop_asked: list[int] = []  # a stop or a preemption: checkpoint and leave at the next step
signal.signal(signal.SIGTERM, lambda signum, frame: stop_asked.append(signum))
step = 0
if os.path.exists(checkpoint):
    with open(checkpoint) as f:
        step = int(json.load(f)["step"])
record(
    "start",
    step=step,
    cuda=os.environ.get("CUDA_VISIBLE_DEVICES", ""),
    gpus=os.environ.get("TRAINQ_GPUS", ""),
    uuids=os.environ.get("NVIDIA_VISIBLE_DEVICES", ""),
)
while step < steps:
    if stop_asked:
        save(step)
        record("stopped", step=step)
        sys.exit(0)
    time.sleep(step_seconds)
    step += 1
    record("step", step=step)
    if step % every == 0:
        save(step)
    if attempt == 1 and step == crash_at:
        record("crash", step=step)
        sys.exit(134)
save(steps)
record("done", step=steps)
