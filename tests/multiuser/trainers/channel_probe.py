"""A trainer that tries to read everything its channels offer, and says what it got.

For each channel of input/config/inputdataconfig.json: File mode, every file under
input/data/<channel> (links followed); Pipe mode, the FIFO input/data/<channel>_0 to its end.
Whatever a read returns is printed to stdout, so data that should never reach a trainer
would show up in the job's logs as well. The outcome of each read ("ok" or the errno name)
goes to output/data/probe.json, written last; exits 0 whatever it could read.
"""

import errno
import json
import os
import stat
import sys
import time

BASE = os.environ["SAGEMAKER_BASE_DIR"]
FIFO_WAIT_SECONDS = 15.0


def read(path: str) -> str:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        return errno.errorcode.get(exc.errno or 0, str(exc.errno))
    sys.stdout.write(data.decode(errors="replace") + "\n")
    sys.stdout.flush()
    return "ok"


def wait_for_fifo(path: str) -> bool:
    deadline = time.monotonic() + FIFO_WAIT_SECONDS
    while time.monotonic() < deadline:
        try:
            if stat.S_ISFIFO(os.stat(path).st_mode):
                return True
        except FileNotFoundError:
            pass
        time.sleep(0.01)
    return False


with open(os.path.join(BASE, "input", "config", "inputdataconfig.json")) as f:
    channels = json.load(f)
outcomes = {}
for name, config in sorted(channels.items()):
    where = os.path.join(BASE, "input", "data", name)
    if config["TrainingInputMode"] == "Pipe":
        fifo = f"{where}_0"
        outcomes[name] = read(fifo) if wait_for_fifo(fifo) else "no fifo"
        continue
    for root, _dirs, files in os.walk(where, followlinks=True):
        for file in sorted(files):
            full = os.path.join(root, file)
            outcomes[f"{name}/{os.path.relpath(full, where)}"] = read(full)
with open(os.path.join(BASE, "output", "data", "probe.json.tmp"), "w") as f:
    json.dump(outcomes, f)
os.replace(
    os.path.join(BASE, "output", "data", "probe.json.tmp"),
    os.path.join(BASE, "output", "data", "probe.json"),
)
