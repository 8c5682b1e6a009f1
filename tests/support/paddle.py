"""PaddlePaddle for the tests that run it as a job: a virtual environment of its own, made
once per machine from the package registry and kept in the user's cache.

Apart from trainq's: Paddle 2.6's CPU wheel needs numpy 1 and a protobuf below 5 (its
DistributedStrategy reads descriptor fields that protobuf 7 removed), which the test
extra's other packages outgrew. The wheel is built for x86_64; Debian 12's Python 3.11
is what CI runs. Made in about a minute from an empty pip cache, seconds once cached.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
from pathlib import Path

REQUIREMENTS = ("paddlepaddle==2.6.2", "numpy>=1.24,<2", "protobuf>=3.20.2,<5")


def cache_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "trainq-tests"


def paddle_venv() -> Path:
    """The environment's directory (its `bin/python3` imports paddle), made if missing; one
    process makes it while the others wait on its lock."""
    key = hashlib.sha256(" ".join((sys.version, *REQUIREMENTS)).encode()).hexdigest()[:12]
    venv = cache_root() / f"paddle-{key}"
    ready = venv / "trainq-ready"
    cache_root().mkdir(parents=True, exist_ok=True)
    with open(cache_root() / f"paddle-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not ready.exists():
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
            subprocess.run(
                [str(venv / "bin" / "pip"), "install", "-q", *REQUIREMENTS],
                check=True,
                timeout=900,
            )
            subprocess.run([str(venv / "bin" / "python3"), "-c", "import paddle"], check=True)
            ready.touch()
    return venv
