"""Run until the file argv[1] exists, then exit with argv[2] (default 0). Writes its pid to
output/data/pid once running, so tests know it started."""

import os
import sys
import time

base = os.environ["SAGEMAKER_BASE_DIR"]
release, code = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 0
pid_file = os.path.join(base, "output", "data", "pid")
with open(pid_file + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.replace(pid_file + ".tmp", pid_file)
while not os.path.exists(release):
    time.sleep(0.02)
print(f"released, exiting {code}")
sys.exit(code)
