"""The dispatch profile's marks (bench/profile_dispatch.py): with TRAINQ_PROFILE=1 in
trainqd's environment, trainqd logs each of its steps and every monitor writes its own into
monitor.log, forked monitors included; without it, neither writes a mark."""

from __future__ import annotations

import json

import pytest

from tests.support.daemon import TERMINAL, running_daemon

MONITOR_STEPS = {"forked", "launch read", "record space reserved", "trainer spawned", "exit"}
# The end is settled once the job reads COMPLETED, and its log line may follow a moment
# later: only trainqd's steps up to the handover are required here.
DAEMON_STEPS = {"launching", "attempt recorded", "directories made", "monitor forked"}


def marks(on: bool) -> tuple[set[str], set[str]]:
    """The steps the monitor and trainqd marked for one job that ran to its end."""
    env = {"TRAINQ_PROFILE": "1"} if on else {}
    with running_daemon(gpus="fake:1", env=env) as daemon:
        job = daemon.submit({"gpus": 1, "command": ["/bin/true"]})
        ended = daemon.wait_state(job["id"], *TERMINAL)
        assert ended["state"] == "COMPLETED", ended
        attempt = daemon.state_dir / "jobs" / str(job["id"]) / "attempts" / "1"
        monitor = {
            line.split(" ", 3)[3]
            for line in (attempt / "monitor.log").read_text().splitlines()
            if line.split(" ")[1:2] == ["profile"]
        }
        lines = daemon.log_file.read_text().splitlines()
        events = [json.loads(line) for line in lines if line.startswith("{")]
        logged = {e["step"] for e in events if e.get("event") == "profile"}
    return monitor, logged


@pytest.mark.parametrize("on", [True, False], ids=["on", "off"])
def test_profile_marks_only_when_asked(on: bool) -> None:
    monitor, logged = marks(on)
    if on:
        assert monitor >= MONITOR_STEPS
        assert logged >= DAEMON_STEPS
    else:
        assert monitor == set()
        assert logged == set()
