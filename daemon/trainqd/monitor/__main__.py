"""A job's monitor: `python -S -I -c BOOT` (see spawn.py), the Launch as JSON on stdin.

stdin is a memfd that trainqd wrote the launch into; it is read to its end and replaced by
/dev/null, so no child of the monitor can read the launch (it holds the whole environment
of the job, and for a container job the engine's). stdout and stderr are monitor.log.
Exit status: 0 once the exit record is written, 1 after an internal error (a record that
says so is written all the same), 2 when the launch itself is unusable.
"""

from __future__ import annotations

import os
import signal
import socket
import sys

from trainqd.monitor import handover
from trainqd.monitor.log import log
from trainqd.monitor.records import Launch
from trainqd.monitor.spawn import SPARE_FLAG
from trainqd.monitor.supervise import run

_HELD = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def read_launch() -> bytes:
    chunks = []
    while chunk := os.read(0, 1 << 16):
        chunks.append(chunk)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    return b"".join(chunks)


def wait_for_launch() -> bytes | None:
    """A spare's wait: the launch memfd and monitor.log arrive on the socket at fd 0; None
    when trainqd closed its end (it stopped, or no longer needs a spare)."""
    with socket.socket(fileno=0) as sock:
        message, fds, _, _ = socket.recv_fds(sock, 16, 2)
        sock.detach()
    handover.keep(0)
    if not message or len(fds) != 2:
        for fd in fds:
            os.close(fd)
        return None
    launch_fd, log_fd = fds
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(log_fd)
    os.dup2(launch_fd, 0)
    os.close(launch_fd)
    # A signal sent to the idle spare was meant for nobody: drop it (SIG_IGN discards
    # pending signals even while they are blocked). A stop meant for this attempt is in its
    # stop file too, which the monitor reads before it starts the trainer.
    for signum in _HELD:
        signal.signal(signum, signal.SIG_IGN)
        signal.signal(signum, signal.SIG_DFL)
    return read_launch()


def exit_now(status: int) -> None:
    """End the process at once. The exit record is on disk and every line of the log went
    out with its own write(2): the interpreter's orderly teardown (10-20 ms here) would only
    keep trainqd, which learns of the end from this process's exit, waiting."""
    os._exit(status)


def main() -> int:
    try:
        if SPARE_FLAG in sys.argv:
            data = wait_for_launch()
            if data is None:
                return 0
        else:
            data = read_launch()
        launch = Launch.from_json(data)
    except (OSError, ValueError, TypeError, KeyError) as exc:
        log(f"unusable launch: {type(exc).__name__}: {exc}")
        return 2
    return run(launch)


if __name__ == "__main__":
    sys.exit(main())
