"""Report who this trainer runs as, and whether it may write where it is asked to.

    monitor_whoami.py [PATH ...]

Writes output/data/whoami (uid euid suid gid egid groups...) and creates output/data/mine;
for each PATH, tries to create a file in it and writes the outcome ("ok" or the errno
name) to output/data/write-<n>.
"""

import errno
import os
import sys

data = os.path.join(os.environ["SAGEMAKER_BASE_DIR"], "output", "data")
with open(os.path.join(data, "mine"), "w") as f:
    f.write("made by the trainer\n")
for n, path in enumerate(sys.argv[1:]):
    try:
        with open(os.path.join(path, f"written-by-trainer-{os.getpid()}"), "w") as f:
            f.write("x")
        result = "ok"
    except OSError as exc:
        result = errno.errorcode.get(exc.errno or 0, str(exc.errno))
    with open(os.path.join(data, f"write-{n}"), "w") as f:
        f.write(result)
ids = [*os.getresuid(), *os.getresgid(), *os.getgroups()]
with open(os.path.join(data, "whoami.tmp"), "w") as f:
    f.write(" ".join(map(str, ids)))
os.replace(os.path.join(data, "whoami.tmp"), os.path.join(data, "whoami"))
