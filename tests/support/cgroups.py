"""Cgroups for the root integration tests: whether there is a cgroup v2 tree, a scratch
cgroup of the test's own, the end of a forked monitor's attempt cgroup, and a process that
joins a cgroup and tries device nodes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.support.monitor import Attempt
from tests.support.waiting import wait_for
from trainqd.monitor import cgroup


def have_v2() -> bool:
    try:
        cgroup.own_cgroup_dir()
    except cgroup.Unavailable:
        return False
    return True


needs_v2 = pytest.mark.skipif(not have_v2(), reason="no cgroup v2 tree")


@contextmanager
def scratch_cgroup(name: str) -> Iterator[str]:
    """A fresh cgroup under this process's own; whatever is left in it is killed after."""
    path = os.path.join(cgroup.own_cgroup_dir(), f"trainq-test-{name}-{os.getpid()}")
    os.mkdir(path)
    try:
        yield path
    finally:
        assert cgroup.kill(path, 5.0) == []
        os.rmdir(path)  # and a program attached to it goes with it


def monitor_gone(attempt: Attempt, pid: int) -> str:
    """Wait for a forked monitor's record and its exit (the fork server reaps it): its
    attempt's cgroup, still there."""
    wait_for(attempt.record, timeout=15, what="the exit record")
    path = cgroup.attempt_path(attempt.launch.ml_root, attempt.launch.job_id, 1)
    wait_for(lambda: pid not in cgroup.members(path), what="the monitor's exit")
    return path


def remove_attempt_cgroup(path: str) -> None:
    """As trainqd does once the monitor is gone."""
    cgroup.kill(path, 5.0)
    assert cgroup.remove(path)


# Joins the cgroup named first (v2, or a v1 devices one), then tries to open each node named
# after it; prints {path: "opened" | errno name, "cgroups": its /proc/self/cgroup lines}.
_OPEN_IN = """
import errno, json, os, sys
with open(os.path.join(sys.argv[1], "cgroup.procs"), "w") as f:
    f.write("0")
report = {}
for path in sys.argv[2:]:
    try:
        os.close(os.open(path, os.O_RDWR))
        report[path] = "opened"
    except OSError as exc:
        report[path] = errno.errorcode[exc.errno]
with open("/proc/self/cgroup") as f:
    report["cgroups"] = f.read().splitlines()
print(json.dumps(report))
"""


def open_in(cgroup_dir: str, paths: list[str]) -> dict[str, object]:
    """What a fresh process in `cgroup_dir` got opening each of `paths`."""
    done = subprocess.run(
        [sys.executable, "-c", _OPEN_IN, cgroup_dir, *paths],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    report: dict[str, object] = json.loads(done.stdout)
    return report
