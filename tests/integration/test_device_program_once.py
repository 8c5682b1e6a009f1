"""The eBPF device program is loaded once per set of GPUs by the root fork server, and the
monitors it forks only attach it: attempts given the same GPUs share one program, others
get their own, and neither a monitor nor its trainer keeps a program's descriptor (root and
a cgroup v2 tree needed)."""

from __future__ import annotations

import ctypes
import json
import os
from collections.abc import Iterator

import pytest

from tests.support.monitor import attempt_of, python
from tests.support.waiting import wait_for
from trainqd.monitor import cgroup, device_filter, spawn

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
