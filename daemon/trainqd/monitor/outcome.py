"""The monitor's side of an attempt's end: it concludes the `Ending` (trainq.core.outcomes)
that trainqd judges (scheduling/outcomes.py) and records (scheduling/endings.py).

The reason of an unsuccessful end is, in this order (as SageMaker does; docs/architecture.md): the
first 1024 characters of `<ml root>/output/failure`, the tail of the trainer's stderr,
or a description of the exit status. A stop is described rather than explained by the
trainer: the trainer did nothing wrong.

The failure file lies in a directory the job's owner controls, and a container job's
monitor reads it as root. So it is reached by a walk that follows no link, opened without
blocking (it could be a FIFO), read only if it is a regular file with one name, and only
its first few kilobytes: the owner cannot make root read, or wait on, anything else.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import stat
from typing import TYPE_CHECKING

from trainq.core.outcomes import REASON_CHARS, Ending, Outcome
from trainqd.monitor.process import describe_status, exit_code_and_signal
from trainqd.monitor.records import read_json, read_up_to

FAILURE_FILE = ("output", "failure")
# Enough bytes for REASON_CHARS characters of UTF-8, however wide.
_REASON_BYTES = REASON_CHARS * 4
OOM_HINT = "killed by SIGKILL (out of memory?)"
# SIGTERM with no stop request from trainqd: the host is shutting down (systemd sends it to
# every process left), or someone signalled the monitor. Not a stop: the job runs again.
INTERRUPTED = "interrupted: SIGTERM without a stop request (host shutdown?)"

if TYPE_CHECKING:
    from typing import Literal

    StopCause = Literal["user", "time_limit", "feeder", "shutdown", "preempt"]

# Plain classes where a dataclass would do: building a dataclass costs a millisecond or
# two at import, and the monitor imports this before its trainer starts.


class Stop:
    """The monitor ended the trainer: why, with what grace, and whether it had to kill
    (the grace ran out and the tree got SIGKILL)."""

    __slots__ = ("cause", "forced", "grace")

    def __init__(self, cause: StopCause, grace: float, forced: bool = False) -> None:
        self.cause: StopCause = cause
        self.grace = grace
        self.forced = forced


def read_failure_file(ml_root: str) -> str | None:
    """The first REASON_CHARS characters of the failure file; None if absent or empty."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    opened: list[int] = []
    try:
        fd = os.open(ml_root, flags | os.O_DIRECTORY)
        opened.append(fd)
        *dirs, name = FAILURE_FILE
        for part in dirs:
            fd = os.open(part, flags | os.O_DIRECTORY, dir_fd=fd)
            opened.append(fd)
        fd = os.open(name, flags | os.O_NONBLOCK, dir_fd=fd)
        opened.append(fd)
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            return None
        data = read_up_to(fd, _REASON_BYTES)
    except OSError:
        return None
    finally:
        for fd in opened:
            os.close(fd)
    text = data.decode("utf-8", "replace")[:REASON_CHARS].rstrip()
    return text or None


def output_tail(fd: int) -> str | None:
    """The last REASON_CHARS characters written to `fd` (a regular file open for reading),
    starting at a line boundary where one is at hand; None if nothing was written."""
    with contextlib.suppress(OSError):
        size = os.fstat(fd).st_size
        start = max(0, size - _REASON_BYTES)
        text = os.pread(fd, _REASON_BYTES, start).decode("utf-8", "replace").rstrip()
        cut = start > 0
        if len(text) > REASON_CHARS:
            text = text[-REASON_CHARS:]
            cut = True
        if cut:
            newline = text.find("\n")
            if 0 <= newline < len(text) - 1:
                text = text[newline + 1 :]
        return text.strip() or None
    return None


def explain(ml_root: str, stderr_fd: int, fallback: str) -> str:
    return read_failure_file(ml_root) or output_tail(stderr_fd) or fallback


def conclude(status: int, stop: Stop | None, ml_root: str, stderr_fd: int) -> Ending:
    """The ending of a trainer that exited with wait status `status`."""
    exit_code, signum = exit_code_and_signal(status)
    how = describe_status(status)
    if stop is not None:
        if stop.forced and signum is not None:
            how = f"{how} when the {round(stop.grace, 1):g} s grace ran out"
        if stop.cause == "feeder":  # the reason is the feeder's, filled in by the caller
            return Ending(Outcome.FEEDER_FAILED, exit_code, signum)
        if stop.cause == "time_limit":
            return Ending(Outcome.TIMED_OUT, exit_code, signum, f"time limit reached: {how}")
        if stop.cause == "shutdown":
            return Ending(Outcome.INTERRUPTED, exit_code, signum, f"{INTERRUPTED}: {how}")
        if stop.cause == "preempt":  # whatever the trainer did, it runs again
            return Ending(Outcome.PREEMPTED, exit_code, signum, f"preempted: {how}")
        return Ending(Outcome.STOPPED, exit_code, signum, f"stopped on request: {how}")
    if exit_code == 0:
        return Ending(Outcome.EXITED, 0)
    if signum is None:
        return Ending(Outcome.EXITED, exit_code, None, explain(ml_root, stderr_fd, how))
    if signum == signal.SIGKILL:  # which nobody in trainq sent: the kernel's OOM killer, mostly
        said = read_failure_file(ml_root) or output_tail(stderr_fd)
        reason = OOM_HINT if said is None else f"{OOM_HINT}\n{said}"
        return Ending(Outcome.SIGNALED, None, signum, reason)
    return Ending(Outcome.SIGNALED, None, signum, explain(ml_root, stderr_fd, how))


def not_started(cause: str) -> Ending:
    """An attempt stopped (or interrupted, or out of time) before its trainer started."""
    if cause == "time_limit":
        return Ending(Outcome.TIMED_OUT, reason="time limit reached before the trainer started")
    if cause == "shutdown":
        return Ending(Outcome.INTERRUPTED, reason="interrupted before the trainer started")
    if cause == "preempt":
        return Ending(Outcome.PREEMPTED, reason="preempted before the trainer started")
    return Ending(Outcome.STOPPED, reason="stopped before the trainer started")


def read_stop_request(stop_file: str, default_grace: float) -> tuple[float, StopCause]:
    """The stop file's grace and reason. trainqd writes it before each SIGTERM, so a SIGTERM
    without one came from elsewhere, in practice the host shutting down: the launch's grace,
    and "shutdown" (the attempt is interrupted, not stopped)."""
    try:
        raw = read_json(stop_file)
    except (OSError, ValueError):
        raw = None
    if not isinstance(raw, dict):
        return default_grace, "shutdown"
    asked = _seconds(raw.get("grace_seconds"))
    reason = raw.get("reason")
    cause: StopCause = reason if reason in ("time_limit", "preempt") else "user"
    return (default_grace if asked is None else asked), cause


def _seconds(value: object) -> float | None:
    """`value` if it is a usable number of seconds (what a stop file may say), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None
