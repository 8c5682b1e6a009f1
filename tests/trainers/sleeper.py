"""Sleep until killed; on SIGTERM note it in the model dir (a stand-in for a checkpoint) and
exit 0, unless told to ignore SIGTERM. Writes its pid to output/data/pid once running."""

import os
import signal
import sys
import time

base = os.environ["SAGEMAKER_BASE_DIR"]
ignore = "--ignore-sigterm" in sys.argv


def on_term(signum, frame):
    with open(os.path.join(base, "checkpoints", "on-sigterm"), "w") as f:
        f.write(os.environ["TRAINQ_ATTEMPT"])
    sys.exit(0)


signal.signal(signal.SIGTERM, signal.SIG_IGN if ignore else on_term)
with open(os.path.join(base, "output", "data", "pid.tmp"), "w") as f:
    f.write(str(os.getpid()))
os.replace(
    os.path.join(base, "output", "data", "pid.tmp"), os.path.join(base, "output", "data", "pid")
)
print("sleeping", flush=True)
while True:
    time.sleep(60)
