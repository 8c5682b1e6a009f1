"""A trainer that checkpoints on SIGTERM: writes checkpoints/ckpt and exits 0.

Once its handler is in place it writes its pid to output/data/ready, so a test knows the
stop it sends will be handled. With --slow-checkpoint SECONDS it takes that long to save.
"""

import os
import signal
import sys
import time

base = os.environ["SAGEMAKER_BASE_DIR"]
delay = (
    float(sys.argv[sys.argv.index("--slow-checkpoint") + 1])
    if "--slow-checkpoint" in sys.argv
    else 0
)


def checkpoint(signum: int, frame: object) -> None:
    time.sleep(delay)
    with open(os.path.join(base, "checkpoints", "ckpt"), "w") as f:
        f.write("step 42\n")
    print("checkpoint saved", flush=True)
    sys.exit(0)


signal.signal(signal.SIGTERM, checkpoint)
ready = os.path.join(base, "output", "data", "ready")
with open(ready + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.replace(ready + ".tmp", ready)
while True:
    time.sleep(60)
