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
from pathlib import Path

import pytest

from tests.support.cgroups import monitor_gone, needs_v2, open_in, remove_attempt_cgroup
from tests.support.monitor import attempt_of, python
from trainqd.monitor import device_filter, devices, spawn

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


def run_with_gpus(
    starter: spawn.MonitorStarter, gpus: str
) -> tuple[list[int], dict[str, list[str]]]:
    """One attempt given the GPUs `gpus`: the programs on its cgroup, what its trainer saw."""
    with attempt_of(DESCRIPTORS) as attempt:
        attempt.launch.env["TRAINQ_GPUS"] = gpus
        path = monitor_gone(attempt, starter.start(attempt.launch).pid)
        try:
            programs = attached(path)
        finally:
            remove_attempt_cgroup(path)
        assert "could open every GPU" not in attempt.monitor_log()
        seen: dict[str, list[str]] = json.loads(attempt.stdout())
        return programs, seen


@needs_v2
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


def v1_cgroup_of(starter: spawn.MonitorStarter, gpus: str) -> str:
    """The devices cgroup v1 the trainer of an attempt given `gpus` ran in."""
    with attempt_of(DEVICES_V1) as attempt:
        attempt.launch.env["TRAINQ_GPUS"] = gpus
        remove_attempt_cgroup(monitor_gone(attempt, starter.start(attempt.launch).pid))
        assert "could open every GPU" not in attempt.monitor_log()
        return attempt.stdout().strip()


@needs_v2
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
    # In the v1 devices cgroup alone (no attempt's v2 one, so no device program):
    report = open_in(devices.V1_DEVICES + "/trainq/gpus-0", list(nodes.values()))
    # With no driver behind a node, an open the cgroup lets through fails with ENXIO.
    passed = {"opened", errno.errorcode[errno.ENXIO]}
    assert report[nodes["nvidia0"]] in passed
    assert report[nodes["nvidiactl"]] in passed
    assert report[nodes["nvidia1"]] == errno.errorcode[errno.EPERM]
