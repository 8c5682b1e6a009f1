"""Stopping a real trainer through its monitor: grace, SIGKILL of the whole tree, time
limits, and a monitor that carries on without the process that started it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import replace

from tests.support.monitor import (
    Attempt,
    alive,
    attempt_of,
    identities,
    python,
    trainer,
)
from tests.support.waiting import wait_for
from trainqd.monitor import procfs
from trainqd.monitor.records import (
    EXIT_RECORD,
    StopOrder,
    atomic_write_json,
    deadline_path,
    write_record,
)


def test_trainer_that_checkpoints_on_sigterm_is_stopped_within_the_grace() -> None:
    with attempt_of(trainer("monitor_checkpointer.py")) as a:
        a.start().wait_data("ready")
        a.stop(grace=10)
        record = a.wait()
        assert (record.outcome, record.exit_code, record.signal) == ("stopped", 0, None)
        assert record.reason == "stopped on request: exited with status 0"
        assert (a.ml_root / "checkpoints" / "ckpt").read_text() == "step 42\n"
        assert "checkpoint saved" in a.stdout()


def test_after_the_grace_every_process_of_the_tree_is_killed() -> None:
    argv = trainer("monitor_tree.py", "--trainer-ignores-term", "--children-ignore-term")
    with attempt_of(argv) as a:
        a.start()
        tree = identities([int(p) for p in a.wait_data("tree").split()])
        trainer_pid, _, in_own_session, orphan = (pid for pid, _ in tree)
        # The setsid child is out of the trainer's group, the orphan out of its subtree.
        assert os.getsid(in_own_session) == in_own_session
        orphan_stat = procfs.read_stat(orphan)
        assert orphan_stat is not None
        assert orphan_stat.ppid == a.pid  # the monitor is the subreaper
        began = time.monotonic()
        a.stop(grace=0.5)
        record = a.wait()
        assert time.monotonic() - began >= 0.5
        assert (record.outcome, record.signal) == ("stopped", signal.SIGKILL)
        assert record.reason == "stopped on request: killed by SIGKILL when the 0.5 s grace ran out"
        assert [pid for pid, ticks in tree if alive(pid, ticks)] == []
        assert trainer_pid not in procfs.descendants(a.pid, include_zombies=True)


def test_sigterm_without_a_stop_file_interrupts_with_the_launch_grace() -> None:
    argv = trainer("monitor_tree.py", "--trainer-ignores-term")
    with attempt_of(argv, stop_grace_seconds=0.3) as a:
        a.start().wait_data("tree")
        a.interrupt()
        record = a.wait()
        assert (record.outcome, record.signal) == ("interrupted", signal.SIGKILL)
        assert "host shutdown" in (record.reason or "")
        assert "0.3 s grace" in (record.reason or "")


def test_a_second_shorter_stop_cuts_the_grace_and_a_longer_one_never_extends_it() -> None:
    argv = trainer("monitor_tree.py", "--trainer-ignores-term")
    with attempt_of(argv, stop_grace_seconds=60) as a:
        a.start().wait_data("tree")
        a.stop(grace=30)
        wait_for(lambda: "stopping (user)" in a.monitor_log(), what="the first stop")
        began = time.monotonic()
        a.stop(grace=0)  # trainq stop --grace 0 after a plain stop
        record = a.wait()
        assert time.monotonic() - began < 5
        assert (record.outcome, record.signal) == ("stopped", signal.SIGKILL)

    with attempt_of(argv, stop_grace_seconds=60) as a:
        a.start().wait_data("tree")
        began = time.monotonic()
        a.stop(grace=0.5)
        wait_for(lambda: "stopping (user)" in a.monitor_log(), what="the first stop")
        a.stop(grace=60)
        record = a.wait()
        assert 0.5 <= time.monotonic() - began < 5
        assert record.signal == signal.SIGKILL


def test_the_time_limit_stops_the_trainer_with_the_launch_grace() -> None:
    with attempt_of(trainer("monitor_checkpointer.py")) as a:
        deadline = time.time() + 1.0
        a.launch = replace(a.launch, deadline=deadline)
        a.start()
        record = a.wait()
        assert (record.outcome, record.exit_code) == ("timed_out", 0)
        assert record.reason == "time limit reached: exited with status 0"
        assert record.started_at is not None
        assert record.started_at < deadline <= record.ended_at
        assert (a.ml_root / "checkpoints" / "ckpt").exists()


def test_a_stop_from_trainqd_for_the_time_limit_is_recorded_as_timed_out() -> None:
    with attempt_of(trainer("monitor_checkpointer.py")) as a:
        a.start().wait_data("ready")
        a.stop(grace=10, reason="time_limit")
        record = a.wait()
        assert record.outcome == "timed_out"


def test_a_time_limit_already_past_never_starts_the_trainer() -> None:
    with attempt_of(python("open('ran', 'w').close()")) as a:
        a.launch = replace(a.launch, deadline=time.time() - 1)
        record = a.start().wait()
        assert record.outcome == "timed_out"
        assert record.started_at is None
        assert not (a.root / "ran").exists()


def move_deadline(a: Attempt, deadline: float | None) -> None:
    """What trainqd does when a running job's time limit changes (watcher.set_deadline)."""
    path = deadline_path(os.path.dirname(a.launch.stop_file), a.launch.attempt)
    atomic_write_json(path, {"deadline": deadline})
    os.kill(a.pid, signal.SIGHUP)


def test_a_deadline_moved_earlier_stops_the_trainer_as_its_time_limit() -> None:
    with attempt_of(trainer("monitor_checkpointer.py")) as a:
        a.launch = replace(a.launch, deadline=time.time() + 3600)
        a.start().wait_data("ready")
        move_deadline(a, time.time())
        record = a.wait()
        assert (record.outcome, record.exit_code) == ("timed_out", 0)
        assert "time limit changed" in a.monitor_log()


def test_a_deadline_moved_later_or_lifted_lets_the_trainer_run_on() -> None:
    with attempt_of(trainer("monitor_checkpointer.py")) as a:
        old = time.time() + 2
        a.launch = replace(a.launch, deadline=old)
        a.start().wait_data("ready")
        move_deadline(a, None)
        wait_for(lambda: "time limit changed" in a.monitor_log(), what="the monitor to hear")
        wait_for(lambda: time.time() > old + 1, timeout=10, what="the old deadline to pass")
        assert "stopping" not in a.monitor_log()
        a.stop(grace=10)
        assert a.wait().outcome == "stopped"


def test_sigint_and_sighup_do_not_touch_the_job() -> None:
    with attempt_of(trainer("monitor_checkpointer.py")) as a:
        trainer_pid = int(a.start().wait_data("ready"))
        os.kill(a.pid, signal.SIGINT)
        os.kill(a.pid, signal.SIGHUP)
        wait_for(lambda: procfs.read_stat(a.pid) is not None)
        # Still both there after the signals were certainly handled: a stop still works.
        a.stop(grace=10)
        record = a.wait()
        assert record.outcome == "stopped"
        assert record.exit_code == 0
        assert (a.ml_root / "checkpoints" / "ckpt").exists()
        assert procfs.read_stat(trainer_pid) is None


KEEPER = """
import os, sys
from trainqd.monitor import libc, spawn
from trainqd.monitor.records import Launch

# Orphans come to this process, so the monitor it reaps at the end leaves no zombie.
libc.set_child_subreaper()
launch = Launch.from_json(sys.stdin.buffer.read())
starter = os.fork()
if starter == 0:
    monitor = spawn.start_monitor(launch)
    print(monitor.pid, flush=True)
    os._exit(0)  # dies at once, like a trainqd that crashed
os.waitpid(starter, 0)
print("starter gone", flush=True)
while True:
    try:
        os.wait()
    except ChildProcessError:
        break
"""


def test_the_monitor_outlives_the_process_that_started_it() -> None:
    with (
        attempt_of(trainer("monitor_checkpointer.py")) as a,
        subprocess.Popen(
            [sys.executable, "-c", KEEPER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        ) as keeper,
    ):
        try:
            assert keeper.stdin is not None
            assert keeper.stdout is not None
            keeper.stdin.write(a.launch.to_json().decode())
            keeper.stdin.close()
            monitor = int(keeper.stdout.readline())
            assert keeper.stdout.readline() == "starter gone\n"
            trainer_pid = int(a.wait_data("ready"))
            stat = procfs.read_stat(monitor)
            assert stat is not None
            assert stat.ppid == keeper.pid
            assert procfs.read_stat(trainer_pid) is not None
            request = StopOrder(grace_seconds=5, reason="user")
            write_record(a.launch.stop_file, request)
            os.kill(monitor, signal.SIGTERM)
            keeper.wait(15)
            record = a.record()
            assert record is not None
            assert record.outcome == "stopped"
            assert (a.dir / EXIT_RECORD).exists()
        finally:
            if keeper.poll() is None:
                procfs.kill_tree(keeper.pid, term_wait=0, kill_wait=5)
                keeper.kill()


def test_an_internal_error_while_the_trainer_runs_kills_the_whole_tree() -> None:
    argv = trainer("monitor_tree.py", "--trainer-ignores-term", "--children-ignore-term")
    # A grace the monitor cannot compute with, met only once a stop comes.
    with attempt_of(argv, stop_grace_seconds="30") as a:
        a.start()
        tree = identities([int(p) for p in a.wait_data("tree").split()])
        a.stop()
        assert a.popen is not None
        assert a.popen.wait(15) == 1
        record = a.record()
        assert record is not None
        assert record.outcome == "lost"
        assert (record.reason or "").startswith("monitor error: ")
        assert [pid for pid, ticks in tree if alive(pid, ticks)] == []
