"""A subprocess job sees only its own GPUs, as Slurm's ConstrainDevices does.

NVIDIA's device nodes are character devices of major 195: /dev/nvidiaN is the GPU whose
device minor is N; minors 254 and 255 are the shared control nodes (nvidia-modeset,
nvidiactl) every CUDA program needs. A root monitor, before it starts the trainer, refuses
the job every GPU minor but its own, so the GPUs of other jobs cannot be opened from the
job, and nvidia-smi or NVML in it list only its own. It does so in each of two ways the host
offers, both where both are (a hybrid host), as each can refuse on its own:

- cgroup v2 (Debian 12's default): an eBPF device program on the attempt's own cgroup, the
  one the monitor entered at its start (cgroup.py, device_filter.py);
- cgroup v1: a devices cgroup that denies those minors: the one of the job's set of GPUs
  (trainq/gpus-<minors>) that the fork server forked the monitor in (forkserver.py), else
  one of the monitor's own that it moves into.

Children inherit both; nothing else of the host is denied. Where neither works, the job runs
unconfined and the monitor's log says why. TRAINQ_DEVICES_NO_V1=1 in trainqd's environment
leaves the v1 devices cgroup out, so tests can show the eBPF program alone at work.

Device minors come from the NVIDIA driver (/proc/driver/nvidia/gpus/*/information, by UUID);
without a driver (simulated GPUs) a GPU's minor is its index, the minor of the node a root
trainqd makes for it (trainqd/gpus/fake_nodes.py).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping

from trainqd.monitor import cgroup, device_filter

NVIDIA_MAJOR = 195
CONTROL_MINORS = frozenset({254, 255})
V1_DEVICES = "/sys/fs/cgroup/devices"
PARENT = "trainq"
DRIVER_GPUS = "/proc/driver/nvidia/gpus"
NO_V1_ENV = "TRAINQ_DEVICES_NO_V1"
# The devices cgroups v1 the fork server forks monitors in, one per set of GPUs.
SET_PREFIX = "gpus-"


def job_minors(env: Mapping[str, str]) -> set[int]:
    """The device minors of the GPUs given to the job (TRAINQ_GPUS / TRAINQ_GPU_UUIDS)."""
    indices = [int(i) for i in env.get("TRAINQ_GPUS", "").split(",") if i]
    uuids = [u for u in env.get("TRAINQ_GPU_UUIDS", "").split(",") if u]
    if not os.path.isdir(DRIVER_GPUS):
        return set(indices)
    by_uuid = driver_minors()
    missing = [u for u in uuids if u not in by_uuid]
    if missing:
        raise LookupError(f"the NVIDIA driver lists no GPU {missing[0]}")
    return {by_uuid[u] for u in uuids}


def driver_minors() -> dict[str, int]:
    """UUID -> device minor, as the NVIDIA kernel driver reports them."""
    found = {}
    for bus_id in os.listdir(DRIVER_GPUS):
        fields = {}
        with open(os.path.join(DRIVER_GPUS, bus_id, "information")) as f:
            for line in f:
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
        if "GPU UUID" in fields and fields.get("Device Minor", "").isdigit():
            found[fields["GPU UUID"]] = int(fields["Device Minor"])
    return found


def confine(job_id: int, attempt: int, minors: set[int], ml_root: str) -> str | None:
    """Refuse this process and its children every GPU node but `minors` and the control
    nodes, in every way the host offers. Returns a line saying why the job is not
    confined, or None."""
    by_bpf = _confine_v2(job_id, attempt, minors, ml_root)
    if os.environ.get(NO_V1_ENV) == "1":
        by_v1: str | None = f"{NO_V1_ENV}=1"
    else:
        by_v1 = _confine_v1(job_id, attempt, minors)
    if by_bpf is None or by_v1 is None:
        return None
    return (
        "the job could open every GPU's node: "
        f"no eBPF device program ({by_bpf}), no devices cgroup v1 ({by_v1})"
    )


def _confine_v2(job_id: int, attempt: int, minors: set[int], ml_root: str) -> str | None:
    try:
        here = cgroup.own_cgroup_dir()
    except cgroup.Unavailable as exc:
        return str(exc)
    # Only the attempt's own cgroup: where the monitor could not make it, it is still in
    # trainqd's, whose every process the program would confine too.
    subtree = cgroup.subtree_name(cgroup.jobs_dir_of(ml_root))
    # A node of a job of several nodes: its own cgroup inside the attempt's.
    attempt_cgroup = here
    if os.path.basename(here).startswith(cgroup.NODE_PREFIX):
        attempt_cgroup = os.path.dirname(here)
    if os.path.basename(attempt_cgroup) != cgroup.attempt_name(job_id, attempt) or (
        os.path.basename(os.path.dirname(attempt_cgroup)) != subtree
    ):
        return "the monitor is not in the attempt's own cgroup"
    try:
        device_filter.attach(here, NVIDIA_MAJOR, minors | CONTROL_MINORS)
    except device_filter.FilterUnavailable as exc:
        return str(exc)
    return None


def v1_available() -> bool:
    return os.environ.get(NO_V1_ENV) != "1" and os.path.isfile(
        os.path.join(V1_DEVICES, "devices.deny")
    )


def own_v1_cgroup() -> str | None:
    """This process's devices cgroup v1, as /proc/self/cgroup names it ("/trainq/...")."""
    with open("/proc/self/cgroup", encoding="utf-8", errors="replace") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            if "devices" in controllers.split(","):
                return path
    return None


def set_cgroup_name(minors: set[int]) -> str:
    """The devices cgroup v1 of every attempt given exactly `minors`, as /proc names it."""
    return f"/{PARENT}/{SET_PREFIX}" + "-".join(str(m) for m in sorted(minors))


def make_set_cgroup(minors: set[int]) -> str:
    """Make (or write the rules of, again) the devices cgroup v1 shared by the attempts given
    `minors`, for the fork server to fork their monitors in (forkserver.py); its path."""
    path = V1_DEVICES + set_cgroup_name(minors)
    os.makedirs(path, exist_ok=True)
    _deny_all_but(path, minors)
    return path


def _deny_all_but(path: str, minors: set[int]) -> None:
    # The cgroup starts as its parent allows (everything); each write adds one denied
    # device. A wildcard deny could not be narrowed again by an allow.
    fd = os.open(os.path.join(path, "devices.deny"), os.O_WRONLY | os.O_CLOEXEC)
    try:
        for minor in range(256):
            if minor not in minors and minor not in CONTROL_MINORS:
                os.write(fd, f"c {NVIDIA_MAJOR}:{minor} rwm".encode())
    finally:
        os.close(fd)


def _confine_v1(job_id: int, attempt: int, minors: set[int]) -> str | None:
    """Move this process into a new devices cgroup where only `minors` of the GPU nodes
    can be opened, unless it was forked in the one of its set. Returns why that failed,
    or None."""
    if not os.path.isfile(os.path.join(V1_DEVICES, "devices.deny")):
        return "none on this host"
    try:
        if own_v1_cgroup() == set_cgroup_name(minors):
            return None  # only root makes these, and writes their rules before use
    except OSError as exc:
        return f"{exc.filename}: {exc.strerror}"
    parent = os.path.join(V1_DEVICES, PARENT)
    try:
        os.makedirs(parent, exist_ok=True)
        _remove_empty_children(parent)
        path = os.path.join(parent, f"{job_id}.{attempt}.{os.getpid()}")
        os.mkdir(path)
        _deny_all_but(path, minors)
        fd = os.open(os.path.join(path, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, str(os.getpid()).encode())
        finally:
            os.close(fd)
    except OSError as exc:
        return f"{exc.filename}: {exc.strerror}"
    return None


def _remove_empty_children(parent: str) -> None:
    # Each attempt's cgroup outlives its monitor (a cgroup cannot be removed from inside);
    # later attempts remove those whose monitor is gone. rmdir refuses one still in use, and
    # one whose monitor lives may be about to be joined, so it is left alone.
    for name in os.listdir(parent):
        child = os.path.join(parent, name)
        pid = name.rpartition(".")[2]
        if os.path.isdir(child) and pid.isdigit() and not _alive(int(pid)):
            with contextlib.suppress(OSError):
                os.rmdir(child)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
