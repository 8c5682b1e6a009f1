"""The spare monitor's word back to trainqd: "my trainer has started" (one byte on the socket
the attempt was handed over on). trainqd starts the next spare only then, so that spare's
start-up never competes with this attempt's for the CPU. A monitor started cold has no such
socket and says nothing; trainqd then does not wait.
"""

from __future__ import annotations

import contextlib
import os

_held: list[int] = []  # the socket's descriptor, while there is one to answer on


def keep(fd: int) -> None:
    """Hold on to the hand-over socket (a descriptor of its own, closed on exec)."""
    _held.append(os.dup(fd))


def announce_started() -> None:
    """Once, after the trainer started (or could not): trainqd may start the next spare."""
    while _held:
        fd = _held.pop()
        with contextlib.suppress(OSError):  # trainqd gone: nobody to tell
            os.write(fd, b"S")
        os.close(fd)
