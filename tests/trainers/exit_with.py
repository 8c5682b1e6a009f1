"""Exit with argv[1]; with argv[2], write it as the failure file first; print to both
streams so logs and the stderr tail have something to show."""

import os
import sys

code = int(sys.argv[1])
print(f"stdout line from a trainer exiting {code}", flush=True)
for i in range(3):
    print(f"stderr line {i}", file=sys.stderr, flush=True)
if len(sys.argv) > 2:
    with open(os.path.join(os.environ["SAGEMAKER_BASE_DIR"], "output", "failure"), "w") as f:
        f.write(sys.argv[2])
sys.exit(code)
