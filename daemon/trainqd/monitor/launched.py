"""The attempt whose launch is on stdin, run to its exit record: what a monitor started by
trainqd (`__main__`) and one forked by the fork server (forkserver.py) both do."""

from __future__ import annotations

import os

from trainqd.monitor import gang
from trainqd.monitor.log import log
from trainqd.monitor.profile import mark
from trainqd.monitor.records import Launch
from trainqd.monitor.supervise import run


def read_launch() -> bytes:
    chunks = []
    while chunk := os.read(0, 1 << 16):
        chunks.append(chunk)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    return b"".join(chunks)


def run_from_stdin() -> int:
    """The attempt whose launch is on fd 0, from its start to its exit record."""
    try:
        launch = Launch.from_json(read_launch())
    except (OSError, ValueError, TypeError, KeyError) as exc:
        log(f"unusable launch: {type(exc).__name__}: {exc}")
        return 2
    mark("launch read")
    return gang.run(launch) if launch.nodes else run(launch)
