"""Jobs of several nodes, seen from outside: the gang's monitor of an attempt, and a knock
on a node's port by someone who should not reach it."""

from __future__ import annotations

import json

from tests.support.daemon import Daemon
from tests.support.waiting import wait_for

# Connect to the address and port given (a host's user or job, as a script for
# `python3 -c`), and say how it went: "connected", or "refused: " and why.
KNOCK = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3).close()
    print("connected")
except OSError as exc:
    print("refused:", type(exc).__name__, exc)
"""


def gang_monitor(daemon: Daemon, job_id: int, attempt: int = 1) -> int:
    info = daemon.state_dir / "jobs" / str(job_id) / "attempts" / f"{attempt}.monitor"
    wait_for(info.exists, what="the gang's monitor to say who it is")
    pid: int = json.loads(info.read_text())["monitor_pid"]
    return pid
