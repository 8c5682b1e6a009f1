"""Running a real monitor in tests: a Launch in a fresh directory, started as trainqd starts
it (spawn.start_monitor), stopped as trainqd stops it (stop file, then SIGTERM)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from tests.support.daemon import SYSTEM_PYTHON, TRAINERS, scratch_dir
from tests.support.waiting import wait_for
from trainq.core import outcomes
from trainq.core.outcomes import ExitRecord
from trainqd.attempts.watcher import StopCause
from trainqd.monitor import procfs, spawn
from trainqd.monitor.records import (
    EXIT_RECORD,
    MONITOR_LOG,
    STDERR,
    STDOUT,
    Credentials,
    Launch,
    MonitorInfo,
    StopOrder,
    monitor_info_path,
    parse_exit_record,
    parse_monitor_info,
    read_json,
    write_record,
)

PYTHON = SYSTEM_PYTHON  # the trainers' interpreter, which every owner may run
PATH = "/usr/local/bin:/usr/bin:/bin"
ROOT = Credentials(uid=0, gid=0, groups=[0], user="root", home="/root")
NOBODY = Credentials(uid=65534, gid=65534, groups=[65534], user="nobody", home="/nonexistent")

# A monitor started as a personal trainqd (not root) starts it: the Launch on stdin, trainqd's
# package and trainq's (the monitor speaks trainq.core.outcomes) on the path in argv.
PERSONAL_DAEMON = """
import sys
sys.path[:0] = sys.argv[1:]
from trainqd.monitor import spawn
from trainqd.monitor.records import Launch
monitor = spawn.start_monitor(Launch.from_json(sys.stdin.buffer.read()))
sys.exit(monitor.wait(15))
"""


def personal_monitor(script: str = PERSONAL_DAEMON) -> list[str]:
    """The argv of `script` (PERSONAL_DAEMON or one like it), with the packages' parents it
    puts on the path."""
    package_parent = Path(procfs.__file__).resolve().parents[2]
    core_parent = Path(outcomes.__file__).resolve().parents[2]
    return [PYTHON, "-c", script, str(package_parent), str(core_parent)]


def run_as_nobody(
    launch_json: bytes, script: str = PERSONAL_DAEMON, timeout: float = 30
) -> subprocess.CompletedProcess[bytes]:
    """A personal trainqd's monitor for `launch_json`, run as nobody to its end."""
    return subprocess.run(
        personal_monitor(script),
        input=launch_json,
        user=65534,
        group=65534,
        extra_groups=[],
        capture_output=True,
        timeout=timeout,
        check=False,
    )


def trainer(name: str, *args: str) -> list[str]:
    return [PYTHON, str(TRAINERS / name), *args]


def python(code: str) -> list[str]:
    return [PYTHON, "-c", code]


class Attempt:
    """One attempt's directories, its Launch, and the monitor running it."""

    def __init__(self, root: Path, launch: Launch) -> None:
        self.root = root
        self.launch = launch
        self.ml_root = Path(launch.ml_root)
        self.dir = Path(launch.attempt_dir)
        self.popen: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def start(self) -> Attempt:
        self.popen = spawn.start_monitor(self.launch)
        return self

    def wait(self, timeout: float = 15.0) -> ExitRecord:
        """The exit record, once the monitor has written it and exited."""
        assert self.popen is not None
        popen = self.popen
        wait_for(lambda: popen.poll() is not None, timeout=timeout, what="the monitor's exit")
        record = self.record()
        assert record is not None, f"no exit record; monitor.log:\n{self.monitor_log()}"
        assert popen.returncode == 0, f"monitor exited {popen.returncode}:\n{self.monitor_log()}"
        return record

    def record(self) -> ExitRecord | None:
        raw = read_json(str(self.dir / EXIT_RECORD))
        return None if raw is None else parse_exit_record(raw)

    def info(self, timeout: float = 10.0) -> MonitorInfo:
        path = monitor_info_path(os.path.dirname(self.launch.stop_file), self.launch.attempt)
        raw = wait_for(lambda: read_json(path), timeout=timeout, what="the monitor's record")
        return parse_monitor_info(raw)

    def stop(self, grace: float | None = None, reason: StopCause = "user") -> None:
        """What trainqd does: the request in the stop file, then SIGTERM to the monitor."""
        if grace is None:
            grace = self.launch.stop_grace_seconds
        request = StopOrder(grace_seconds=grace, reason=reason)
        write_record(self.launch.stop_file, request)
        self.interrupt()

    def interrupt(self) -> None:
        """SIGTERM alone, as a host that shuts down sends it to every process."""
        os.kill(self.pid, signal.SIGTERM)

    def text(self, name: str) -> str:
        try:
            return (self.dir / name).read_text()
        except FileNotFoundError:
            return ""

    def stdout(self) -> str:
        return self.text(STDOUT)

    def stderr(self) -> str:
        return self.text(STDERR)

    def monitor_log(self) -> str:
        return self.text(MONITOR_LOG)

    def data(self, name: str) -> Path:
        """A path under <ml root>/output/data, where the test trainers leave their notes."""
        return self.ml_root / "output" / "data" / name

    def wait_data(self, name: str, timeout: float = 10.0) -> str:
        path = self.data(name)
        return wait_for(lambda: path.exists() and path.read_text(), timeout=timeout, what=name)

    def kill_monitor_tree(self) -> None:
        """Last-resort cleanup for a failed test: nothing it started may outlive it."""
        if self.popen is None or self.popen.poll() is not None:
            return
        procfs.kill_tree(self.pid, term_wait=0, kill_wait=5)
        self.popen.kill()
        self.popen.wait(5)


def make_launch(root: Path, argv: list[str], **changes: Any) -> Launch:
    # As trainqd lays it out (<state>/jobs/<id>/ml): the attempt's cgroup is named after its
    # jobs directory, so attempts of tests running at once never share one.
    ml_root = root / "jobs" / "7" / "ml"
    attempt_dir = root / "attempts" / "1"
    attempt_dir.mkdir(parents=True)
    ml_root.mkdir(parents=True)
    launch = Launch(
        job_id=7,
        attempt=1,
        runtime="subprocess",
        argv=argv,
        env={
            "PATH": PATH,
            "SAGEMAKER_BASE_DIR": str(ml_root),
            "TRAINQ_ATTEMPT": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
        },
        cwd=str(root),
        owner=ROOT,
        ml_root=str(ml_root),
        attempt_dir=str(attempt_dir),
        stop_file=str(root / "attempts" / "1.stop"),
        stop_grace_seconds=5.0,
    )
    return replace(launch, **changes)


@contextmanager
def attempt_of(argv: list[str], **changes: Any) -> Iterator[Attempt]:
    """A fresh directory with an Attempt for `argv` (not started yet); everything it
    started is killed and its directory removed afterwards."""
    root = scratch_dir("tq-mon-")  # a job's owner other than root must get in
    attempt = Attempt(root, make_launch(root, argv, **changes))
    try:
        yield attempt
    finally:
        attempt.kill_monitor_tree()
        shutil.rmtree(root, ignore_errors=True)


def give_to(attempt: Attempt, owner: Credentials) -> None:
    """Hand the attempt's directories to `owner`, as trainqd does before it starts a monitor."""
    for path in (attempt.root, attempt.ml_root, attempt.dir, attempt.dir.parent):
        os.chown(path, owner.uid, owner.gid)


def alive(pid: int, ticks: int) -> bool:
    """Whether that very process still exists and is not a zombie."""
    stat = procfs.read_stat(pid)
    return stat is not None and stat.start_ticks == ticks and stat.alive


def identities(pids: list[int]) -> list[tuple[int, int]]:
    found = []
    for pid in pids:
        ticks = procfs.start_ticks(pid)
        assert ticks is not None, f"process {pid} is already gone"
        found.append((pid, ticks))
    return found
