"""Append (job, GPUs, start, end) to a shared ledger after holding the GPUs for a while, so a
test can check that no two jobs ever held the same GPU at the same time, and in what order
jobs started."""

import fcntl
import json
import os
import sys
import time

ledger, hold = sys.argv[1], float(sys.argv[2])
start = time.time()
time.sleep(hold)
entry = {
    "job": int(os.environ["TRAINQ_JOB_ID"]),
    "gpus": os.environ["CUDA_VISIBLE_DEVICES"],
    "uuids": os.environ["NVIDIA_VISIBLE_DEVICES"],
    "start": start,
    "end": time.time(),
}
with open(ledger, "a") as f:
    fcntl.flock(f, fcntl.LOCK_EX)
    f.write(json.dumps(entry) + "\n")
