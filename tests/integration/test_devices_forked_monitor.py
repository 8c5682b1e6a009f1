"""A root fork server prepares each monitor's GPU confinement before it forks it: the eBPF
device program is loaded once per set of GPUs and the monitors only attach it (attempts
given the same GPUs share one program; neither a monitor nor its trainer keeps a program's
descriptor), and on a host with the devices cgroup v1 the monitor is forked in its set's
devices cgroup, which refuses the other GPUs' nodes (root and a cgroup v2 tree needed)."""

from __future__ import annotations

import ctypes
import errno
import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.monitor import attempt_of, python
from tests.support.waiting import wait_for
from trainqd.monitor import cgroup, device_filter, devices, spawn

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="BPF and cgroups are root's")

BPF_PROG_QUERY = 16

# The trainer: the targets of its own descriptors and of its monitor's (its parent).
DESCRIPTORS = python(
    "import json, os\n"
    "def links(pid):\n"
    "    d = f'/proc/{pid}/fd'\n"
    "    found = []\n"
    "    for n in os.listdir(d):\n"
    "        try:\n"
    "            found.append(os.readlink(f'{d}/{n}'))\n"
    "        except OSError:\n"
    "            pass\n"
    "    return found\n"
    "print(json.dumps({'own': links('self'), 'monitor': links(os.getppid())}))"
)


class _Query(ctypes.Structure):
    # union bpf_attr for BPF_PROG_QUERY, up to prog_cnt.
    _fields_ = [
        ("target_fd", ctypes.c_uint32),
        ("attach_type", ctypes.c_uint32),
        ("query_flags", ctypes.c_uint32),
        ("attach_flags", ctypes.c_uint32),
        ("prog_ids", ctypes.c_uint64),
        ("prog_cnt", ctypes.c_uint32),
        ("pad", ctypes.c_uint32),
    ]


def attached(cgroup_dir: str) -> list[int]:
    """The ids of the device programs attached to the cgroup itself."""
    ids = (ctypes.c_uint32 * 8)()
    fd = os.open(cgroup_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        query = _Query(
            target_fd=fd,
            attach_type=device_filter.BPF_CGROUP_DEVICE,
            prog_ids=ctypes.addressof(ids),
            prog_cnt=8,
        )
        device_filter._bpf(BPF_PROG_QUERY, query)
    finally:
        os.close(fd)
    return list(ids[: query.prog_cnt])


def have_v2() -> bool:
    try:
        cgroup.own_cgroup_dir()
    except cgroup.Unavailable:
        return False
    return True


@pytest.fixture
def starter() -> Iterator[spawn.MonitorStarter]:
    started = spawn.MonitorStarter()
    try:
        yield started
    finally:
        started.close()


def run_with_gpus(
    starter: spawn.MonitorStarter, gpus: str
) -> tuple[list[int], dict[str, list[str]]]:
    """One attempt given the GPUs `gpus`: the programs on its cgroup, what its trainer saw."""
    with attempt_of(DESCRIPTORS) as attempt:
        attempt.launch.env["TRAINQ_GPUS"] = gpus
        pid = starter.start(attempt.launch).pid
        wait_for(attempt.record, timeout=15, what="the exit record")
        path = cgroup.attempt_path(attempt.launch.ml_root, 7, 1)
        wait_for(lambda: pid not in cgroup.members(path), what="the monitor's exit")
        try:
            programs = attached(path)
        finally:
            cgroup.kill(path, 5.0)
            cgroup.remove(path)
        assert "could open every GPU" not in attempt.monitor_log()
        seen: dict[str, list[str]] = json.loads(attempt.stdout())
        return programs, seen


@pytest.mark.skipif(not have_v2(), reason="no cgroup v2 tree")
def test_attempts_given_the_same_gpus_share_one_loaded_program(
    starter: spawn.MonitorStarter,
) -> None:
    first, seen_first = run_with_gpus(starter, "0")
    again, seen_again = run_with_gpus(starter, "0")
    other, _ = run_with_gpus(starter, "1")
    assert len(first) == 1
    assert first == again
    assert len(other) == 1
    assert other != first
    for seen in (seen_first, seen_again):
        for owner in ("own", "monitor"):
            assert "anon_inode:bpf-prog" not in seen[owner], owner


# The trainer: its devices cgroup v1, as /proc/self/cgroup names it.
DEVICES_V1 = python(
    "for line in open('/proc/self/cgroup'):\n"
    "    if ':devices:' in line:\n"
    "        print(line.strip().split(':', 2)[2])"
)

# Joins the devices cgroup v1 argv[1] (and no attempt's cgroup v2: no device program), then
# opens each node named after it; prints {path: "opened" | errno name}.
OPEN_IN = """
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
print(json.dumps(report))
"""


def v1_cgroup_of(starter: spawn.MonitorStarter, gpus: str) -> str:
    """The devices cgroup v1 the trainer of an attempt given `gpus` ran in."""
    with attempt_of(DEVICES_V1) as attempt:
        attempt.launch.env["TRAINQ_GPUS"] = gpus
        pid = starter.start(attempt.launch).pid
        wait_for(attempt.record, timeout=15, what="the exit record")
        path = cgroup.attempt_path(attempt.launch.ml_root, 7, 1)
        wait_for(lambda: pid not in cgroup.members(path), what="the monitor's exit")
        cgroup.kill(path, 5.0)
        cgroup.remove(path)
        assert "could open every GPU" not in attempt.monitor_log()
        return attempt.stdout().strip()


@pytest.mark.skipif(not have_v2(), reason="no cgroup v2 tree")
@pytest.mark.skipif(not devices.v1_available(), reason="no devices cgroup v1")
def test_a_monitor_is_forked_in_its_sets_devices_cgroup_which_refuses_other_gpus(
    starter: spawn.MonitorStarter, tmp_path: Path
) -> None:
    assert v1_cgroup_of(starter, "0") == "/trainq/gpus-0"
    assert v1_cgroup_of(starter, "1") == "/trainq/gpus-1"
    assert v1_cgroup_of(starter, "0") == "/trainq/gpus-0"
    nodes = {}
    for name, minor in (("nvidia0", 0), ("nvidia1", 1), ("nvidiactl", 255)):
        nodes[name] = str(tmp_path / name)
        os.mknod(nodes[name], stat.S_IFCHR | 0o666, os.makedev(devices.NVIDIA_MAJOR, minor))
    said = subprocess.run(
        [sys.executable, "-c", OPEN_IN, devices.V1_DEVICES + "/trainq/gpus-0", *nodes.values()],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    report = json.loads(said.stdout)
    # With no driver behind a node, an open the cgroup lets through fails with ENXIO.
    passed = {"opened", errno.errorcode[errno.ENXIO]}
    assert report[nodes["nvidia0"]] in passed
    assert report[nodes["nvidiactl"]] in passed
    assert report[nodes["nvidia1"]] == errno.errorcode[errno.EPERM]
