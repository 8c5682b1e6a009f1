"""Jobs of several nodes, seen from outside: the gang's monitor of an attempt."""

from __future__ import annotations

import json

from tests.support.daemon import Daemon
from tests.support.waiting import wait_for


def gang_monitor(daemon: Daemon, job_id: int, attempt: int = 1) -> int:
    info = daemon.state_dir / "jobs" / str(job_id) / "attempts" / f"{attempt}.monitor"
    wait_for(info.exists, what="the gang's monitor to say who it is")
    pid: int = json.loads(info.read_text())["monitor_pid"]
    return pid
