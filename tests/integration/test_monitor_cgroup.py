"""An attempt's cgroup against real processes: what enters it, what its end kills, and what
trainqd finds of it once its monitor is gone (root and a cgroup v2 tree needed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cgroups import needs_v2
from tests.support.waiting import wait_for
from trainqd.attempts import cgroups, leftovers
from trainqd.monitor import cgroup, procfs

# Plays a monitor: enters the attempt's cgroup, leaves a sleeper behind (double fork, own
# session, empty environment), reports, and on a line from stdin ends the cgroup (unless
# told "vanish": then it exits without ending anything, as a killed monitor would).
MONITOR = """
import json, os, subprocess, sys, time
from trainqd.monitor import cgroup
ml_root, job_id = sys.argv[1], int(sys.argv[2])
held = cgroup.AttemptCgroup.enter(ml_root, job_id, 1)
sleeper = subprocess.run(
    ["setsid", "/bin/sh", "-c", "env -i /bin/sleep 300 >/dev/null 2>&1 & echo $!"],
    capture_output=True, text=True, check=True,
).stdout.strip()
print(json.dumps({"path": held.path, "sleeper": int(sleeper)}), flush=True)
said = sys.stdin.readline().strip()
if said == "vanish":
    os._exit(0)
if said == "alone":  # the sleeper ended by other means first, as the tree kill does
    os.kill(int(sleeper), 9)
    deadline = time.monotonic() + 10
    while str(sleeper) in open(os.path.join(held.path, "cgroup.procs")).read().split():
        if time.monotonic() > deadline:
            sys.exit("the sleeper did not die")
        time.sleep(0.01)
survivors = held.end(drain=0.0, kill_wait=5.0)
here = open("/proc/self/cgroup").read().strip()
print(json.dumps({"survivors": survivors, "in": here}), flush=True)
"""

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="cgroups are root's")


def start_monitor(ml_root: Path, job_id: int) -> tuple[subprocess.Popen[str], str, int]:
    proc = subprocess.Popen(
        [sys.executable, "-c", MONITOR, str(ml_root), str(job_id)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    said = json.loads(proc.stdout.readline())
    return proc, said["path"], said["sleeper"]


def alive(pid: int) -> bool:
    stat = procfs.read_stat(pid)
    return stat is not None and stat.alive


def test_each_trainqd_and_attempt_has_its_own_name(tmp_path: Path) -> None:
    one = cgroup.attempt_path(str(tmp_path / "a" / "jobs" / "1" / "ml"), 1, 2, "/cg")
    other = cgroup.attempt_path(str(tmp_path / "b" / "jobs" / "1" / "ml"), 1, 2, "/cg")
    assert one != other
    assert one.startswith("/cg/trainq-")
    assert one.endswith("/job-1-2")
    assert cgroup.subtree(str(tmp_path / "a" / "jobs"), "/cg") == os.path.dirname(one)


@needs_v2
def test_the_end_of_an_attempts_cgroup_kills_what_left_the_tree(tmp_path: Path) -> None:
    ml_root = tmp_path / "jobs" / "1" / "ml"
    proc, path, sleeper = start_monitor(ml_root, 1)
    try:
        assert alive(sleeper)
        assert str(sleeper) in Path(path, "cgroup.procs").read_text().split()
        assert Path(f"/proc/{proc.pid}/cgroup").read_text().strip().endswith("/job-1-1")
        out, _ = proc.communicate("end\n", timeout=30)
        said = json.loads(out)
        assert said["survivors"] == []
        assert not said["in"].endswith("/job-1-1")  # it left before the kill
        assert not alive(sleeper)
        assert not os.path.exists(path)  # a root monitor tidies up
    finally:
        proc.kill()
        cgroup.kill(path, 5)
        cgroup.remove(path)


@needs_v2
def test_trainqd_kills_the_cgroup_of_a_vanished_monitor(tmp_path: Path) -> None:
    jobs_dir = tmp_path / "jobs"
    ml_root = jobs_dir / "2" / "ml"
    proc, path, sleeper = start_monitor(ml_root, 2)
    try:
        proc.communicate("vanish\n", timeout=30)
        assert alive(sleeper)  # nothing but its cgroup ties it to the job now
        assert leftovers.end_attempt_cgroup(str(ml_root), 2, 1) == 1
        wait_for(lambda: not alive(sleeper), timeout=5)
        assert not os.path.exists(path)
        cgroups.release(str(jobs_dir))
        assert not os.path.exists(os.path.dirname(path))
    finally:
        proc.kill()
        cgroup.kill(path, 5)
        cgroup.remove(path)


@needs_v2
def test_a_monitor_alone_in_its_cgroup_ends_it_without_leaving(tmp_path: Path) -> None:
    """Nothing of the job is left: the monitor stays (no second migration, which waits out
    an RCU grace period on the dispatch path), and trainqd removes the cgroup after it."""
    ml_root = tmp_path / "jobs" / "3" / "ml"
    proc, path, sleeper = start_monitor(ml_root, 3)
    try:
        out, _ = proc.communicate("alone\n", timeout=30)
        said = json.loads(out)
        assert said["survivors"] == []
        assert said["in"].endswith("/job-3-1")
        assert not alive(sleeper)
        assert os.path.exists(path)  # until the monitor has exited, trainqd's to remove
        assert leftovers.end_attempt_cgroup(str(ml_root), 3, 1) == 0
        assert not os.path.exists(path)
    finally:
        proc.kill()
        cgroup.kill(path, 5)
        cgroup.remove(path)


@needs_v2
def test_trainqd_removes_an_empty_probe_cgroup_a_killed_fork_server_left(tmp_path: Path) -> None:
    jobs_dir = str(tmp_path / "jobs")
    probe = os.path.join(cgroup.subtree(jobs_dir), f"{cgroup.PROBE_PREFIX}12345")
    os.makedirs(probe)
    try:
        assert cgroups.prepare(jobs_dir) is None
        assert not os.path.exists(probe)
    finally:
        cgroups.release(jobs_dir)
        if os.path.exists(probe):
            os.rmdir(probe)
            os.rmdir(os.path.dirname(probe))
