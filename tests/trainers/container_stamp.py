"""The container benchmark's trainer (bench/containers.py): appends "start TIME" to the file
argv[1] as its first act, TIME being time.time() right after the interpreter is up, then
exits 0, at once or after argv[2] seconds."""

import time

started = time.time()

import sys  # noqa: E402 (after the clock is read: nothing of the start is left out)

with open(sys.argv[1], "a") as f:
    f.write(f"start {started!r}\n")
if len(sys.argv) > 2:
    time.sleep(float(sys.argv[2]))
