"""The spare monitor: started ahead of need, handed its launch over a socket."""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import replace

from tests.helpers import wait_for
from tests.integration.monitor_util import attempt_of, python

from trainqd.monitor import spawn
from trainqd.monitor.records import Launch, StopRequest, write_record


def hand_over(starter: spawn.MonitorStarter, launch: Launch) -> subprocess.Popen[bytes]:
    """Start an attempt as trainqd does, without waiting for its word that it started."""
    popen, started = starter.start(launch)
    if started is not None:
        started.close()
    return popen


def test_a_spare_runs_the_attempt_it_is_handed() -> None:
    starter = spawn.MonitorStarter()
    starter.refill()
    try:
        with attempt_of(python("print('from the spare')")) as attempt:
            spare_pid = starter.spare_pids[0]
            attempt.popen, started = starter.start(attempt.launch)
            assert attempt.pid == spare_pid
            assert started is not None
            started.close()
            starter.refill()
            record = attempt.wait()
            assert (record.outcome, record.exit_code) == ("exited", 0)
            assert "from the spare" in attempt.stdout()
            assert "trainer started" in attempt.monitor_log()
        # A new spare waits for the next attempt.
        assert len(starter.spare_pids) == 1
        assert spare_pid not in starter.spare_pids
    finally:
        starter.close()


def test_a_dead_spare_falls_back_to_a_cold_start() -> None:
    starter = spawn.MonitorStarter(spares=1)
    starter.refill()
    try:
        popen = starter._spares[0][0]
        popen.kill()
        popen.wait()
        with attempt_of(python("print('cold')")) as attempt:
            attempt.popen = hand_over(starter, attempt.launch)
            assert attempt.pid != popen.pid
            assert attempt.pid not in starter.spare_pids
            assert attempt.wait().exit_code == 0
            assert "cold" in attempt.stdout()
    finally:
        starter.close()


def test_signals_to_an_idle_spare_are_dropped_but_a_stop_file_is_not() -> None:
    starter = spawn.MonitorStarter()
    starter.refill()
    try:
        os.kill(starter.spare_pids[0], signal.SIGTERM)  # meant for nobody
        with attempt_of(python("print('ran')")) as attempt:
            attempt.popen = hand_over(starter, attempt.launch)
            assert attempt.wait().outcome == "exited"
        starter.refill()
        stop_first = starter.spare_pids[0]
        with attempt_of(python("print('never')")) as attempt:
            write_record(attempt.launch.stop_file, StopRequest(grace_seconds=1, reason="user"))
            attempt.popen = hand_over(starter, attempt.launch)
            assert attempt.pid == stop_first
            record = attempt.wait()
            assert record.outcome == "stopped"
            assert record.started_at is None
            assert attempt.stdout() == ""
    finally:
        starter.close()


def test_a_spare_exits_when_trainqd_lets_go() -> None:
    starter = spawn.MonitorStarter(spares=2)
    starter.refill()
    spares = [popen for popen, _ in starter._spares]
    assert len(spares) == 2
    starter.close()
    for popen in spares:
        wait_for(lambda p=popen: p.poll() is not None, timeout=5, what="the spares to exit")
        assert popen.returncode == 0


def test_a_spare_waits_idle_and_its_trainer_runs_normally() -> None:
    starter = spawn.MonitorStarter()
    starter.refill()
    try:
        assert all(os.sched_getscheduler(p) == os.SCHED_IDLE for p in starter.spare_pids)
        code = "import os; print(os.sched_getscheduler(0))"
        with attempt_of(python(code)) as attempt:
            attempt.popen = hand_over(starter, attempt.launch)
            assert attempt.wait().exit_code == 0
            assert attempt.stdout().strip() == str(os.SCHED_OTHER)
    finally:
        starter.close()


def test_the_monitor_says_when_its_trainer_has_started() -> None:
    starter = spawn.MonitorStarter()
    starter.refill()
    try:
        release = "import os, sys, time\nwhile not os.path.exists(sys.argv[1]): time.sleep(0.01)"
        with attempt_of(python(release)) as attempt:
            flag = attempt.root / "release"
            attempt.launch = replace(attempt.launch, argv=[*attempt.launch.argv, str(flag)])
            attempt.popen, started = starter.start(attempt.launch)
            assert started is not None
            started.settimeout(10)
            assert started.recv(1) == b"S"  # while the trainer still runs
            assert attempt.record() is None
            started.close()
            flag.touch()
            assert attempt.wait().exit_code == 0
    finally:
        starter.close()
