"""A subprocess job sees only its own GPUs, as Slurm's ConstrainDevices does.

NVIDIA's device nodes are character devices of major 195: /dev/nvidiaN is the GPU whose
device minor is N; minors 254 and 255 are the shared control nodes (nvidia-modeset,
nvidiactl) every CUDA program needs. A root monitor puts itself, before it starts the
trainer, into a devices cgroup of its own (cgroup v1) that denies every GPU minor but the
job's, so the GPUs of other jobs cannot be opened from the job, and nvidia-smi or NVML in it
list only its own. Children inherit the cgroup; nothing else of the host is denied.

Device minors come from the NVIDIA driver (/proc/driver/nvidia/gpus/*/information, by UUID);
without a driver (simulated GPUs) a GPU's minor is its index, the minor of the node a root
trainqd makes for it (trainqd/gpus/fake_nodes.py).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping

NVIDIA_MAJOR = 195
CONTROL_MINORS = frozenset({254, 255})
V1_DEVICES = "/sys/fs/cgroup/devices"
PARENT = "trainq"
DRIVER_GPUS = "/proc/driver/nvidia/gpus"


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


def confine(job_id: int, attempt: int, minors: set[int]) -> str | None:
    """Move this process into a new devices cgroup where only `minors` of the GPU nodes
    can be opened. Returns a line saying why the job is not confined, or None."""
    if not os.path.isfile(os.path.join(V1_DEVICES, "devices.deny")):
        return "no devices cgroup (cgroup v1) here: the job could open every GPU's node"
    parent = os.path.join(V1_DEVICES, PARENT)
    try:
        os.makedirs(parent, exist_ok=True)
        _remove_empty_children(parent)
        path = os.path.join(parent, f"{job_id}.{attempt}.{os.getpid()}")
        os.mkdir(path)
        # The cgroup starts as its parent allows (everything); each write adds one denied
        # device. A wildcard deny could not be narrowed again by an allow.
        fd = os.open(os.path.join(path, "devices.deny"), os.O_WRONLY | os.O_CLOEXEC)
        try:
            for minor in range(256):
                if minor not in minors and minor not in CONTROL_MINORS:
                    os.write(fd, f"c {NVIDIA_MAJOR}:{minor} rwm".encode())
        finally:
            os.close(fd)
        fd = os.open(os.path.join(path, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, str(os.getpid()).encode())
        finally:
            os.close(fd)
    except OSError as exc:
        return f"cannot confine the job to its GPUs: {exc.filename}: {exc.strerror}"
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
