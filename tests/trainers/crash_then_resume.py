"""Crash the way argv[1] says on the first attempt, after saving a checkpoint; on a later
attempt resume from that checkpoint and succeed.

    crash_then_resume.py exit:134 | signal:SEGV | toolkit:134 | exit:1
"""

import json
import os
import signal
import sys

base = os.environ["SAGEMAKER_BASE_DIR"]
ckpt = os.path.join(base, "checkpoints", "state.json")
attempt = int(os.environ["TRAINQ_ATTEMPT"])
kind, _, value = sys.argv[1].partition(":")

if os.path.exists(ckpt):
    with open(ckpt) as f:
        state = json.load(f)
    state["resumed_on"] = attempt
    with open(os.path.join(base, "model", "resumed.json"), "w") as f:
        json.dump(state, f)
    print(f"resumed from step {state['step']} on attempt {attempt}")
    sys.exit(0)

with open(ckpt, "w") as f:
    json.dump({"step": 100, "saved_on": attempt}, f)
print(f"attempt {attempt} crashing: {sys.argv[1]}", flush=True)
if kind == "exit":
    sys.exit(int(value))
if kind == "signal":
    signal.signal(getattr(signal, f"SIG{value}"), signal.SIG_DFL)
    os.kill(os.getpid(), getattr(signal, f"SIG{value}"))
if kind == "toolkit":
    # What the SageMaker training toolkit does when the user script dies: it exits 1 and
    # records the script's real exit code in the failure file.
    with open(os.path.join(base, "output", "failure"), "w") as f:
        f.write(f'ExitCode {value}\nErrorMessage ""\nCommand "/usr/bin/python3 train.py"')
    sys.exit(1)
raise SystemExit(f"unknown crash kind {sys.argv[1]}")
