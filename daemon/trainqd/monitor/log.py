"""The monitor's own diagnostics: one timestamped line each, on stderr (monitor.log).

Terse on purpose: this is the log of the supervision, not of the training (the trainer's
output has files of its own). Written with one write(2) per line, so lines from the
monitor and its children never interleave mid-line.
"""

from __future__ import annotations

import contextlib
import os
import time

# A node's monitor of a job of several nodes names its node on each line (monitor/gang.py).
prefix = ""


def log(message: str) -> None:
    now = time.time()
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now))
    line = f"{stamp}.{int(now % 1 * 1000):03d}Z {prefix}{message}\n"
    with contextlib.suppress(OSError):  # a full disk must not take the supervision down
        os.write(2, line.encode("utf-8", "replace"))


def log_exception(exc: BaseException) -> None:
    """The exception and, where the traceback module can still be imported (the monitor
    may have dropped to a user who cannot read the Python installation), its traceback."""
    log(f"{type(exc).__name__}: {exc}")
    try:
        import traceback  # noqa: PLC0415 (only when something broke)
    except ImportError:
        return
    lines = traceback.format_exception(exc)
    log("".join(lines).rstrip().replace("\n", "\n    "))
