"""What the scheduler knows about GPUs, whatever backend reports them.

A backend gives three things: the inventory (read once, when the daemon starts), the live
usage (which processes hold each GPU right now, read whenever the scheduler plans), and the
topology as a distance between two GPUs. Distances share one scale across backends so the
planner never needs to know which backend it runs on:

    0   the same GPU
    5   joined by NVLink (directly or through an NVSwitch fabric)
    10  on one board (NVML's INTERNAL level)
    20  behind one PCIe switch (SINGLE)
    30  behind several PCIe switches, same host bridge below them (MULTIPLE)
    40  under one host bridge (HOSTBRIDGE)
    50  on one NUMA node, across host bridges (NODE)
    60  across NUMA nodes, over the socket interconnect (SYSTEM)

Everything here is standard library only: the GPU tests run on machines where trainq's own
dependencies are not installed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol

from trainq.core.errors import TrainqError

BackendKind = Literal["nvml", "fake", "none"]

DISTANCE_SAME = 0
DISTANCE_NVLINK = 5
DISTANCE_BOARD = 10
DISTANCE_PCIE_SWITCH = 20
DISTANCE_PCIE_SWITCHES = 30
DISTANCE_HOST_BRIDGE = 40
DISTANCE_NUMA_NODE = 50
DISTANCE_CROSS_NUMA = 60


class GpuBackendError(TrainqError):
    """A GPU backend could not be opened or read; the message is one line a person can act on."""

    code = "gpu_backend"


@dataclass(frozen=True)
class GpuDevice:
    """One GPU as the inventory lists it. `index` is NVML's, which CUDA_VISIBLE_DEVICES uses
    when CUDA_DEVICE_ORDER=PCI_BUS_ID."""

    index: int
    uuid: str
    name: str
    memory_total_mib: int
    pci_bus_id: str


@dataclass(frozen=True)
class GpuUsage:
    """Who holds one GPU right now.

    `pids` are every compute and graphics process on the GPU, trainq's own jobs included; the
    daemon subtracts its jobs' process trees to find foreign ones. `error` is set when the
    live state could not be read: the GPU must then count as busy, never as free, because
    handing a GPU that may be in use to a week-long job is the worse mistake.
    """

    index: int
    memory_used_mib: int | None
    pids: frozenset[int]
    error: str | None = None

    def taken_by_others(self, *, held_by_trainq: bool) -> bool:
        """The one rule for "a GPU someone else uses": no job of trainq's holds it, and a
        process runs on it or its state cannot be read. The planner never hands such a GPU
        out; `trainq gpus` shows it as not available."""
        return not held_by_trainq and (bool(self.pids) or self.error is not None)


@dataclass(frozen=True)
class GpuSample:
    """How busy one GPU is at one moment, for watching jobs (never for planning).

    Every reading is optional: a board may not report power, a driver call may fail, and a
    sample with holes is still worth keeping. `process_memory_mib` is the memory of each
    compute process on the GPU by pid, so the daemon can add up its own job's share."""

    index: int
    utilization_percent: float | None = None
    memory_used_mib: int | None = None
    power_watts: float | None = None
    process_memory_mib: Mapping[int, int] = field(default_factory=dict)


class GpuBackend(Protocol):
    """The GPU inventory and its live state. Methods may block briefly (NVML calls), so the
    daemon calls them from a worker thread."""

    @property
    def kind(self) -> BackendKind: ...

    def devices(self) -> list[GpuDevice]:
        """The inventory read when the backend was opened, sorted by index."""
        ...

    def usage(self) -> list[GpuUsage]:
        """The live state of every GPU in `devices()`, in the same order. Never raises for
        one unreadable GPU: that GPU is reported with `error` set."""
        ...

    def sample(self) -> list[GpuSample]:
        """Utilization, memory and power of every GPU in `devices()`, in the same order.
        Never raises: what cannot be read is left None."""
        ...

    def distance(self, a: int, b: int) -> int:
        """How far apart two GPUs are on the scale in this module's docstring; symmetric,
        0 only for a == b. Raises ValueError for an index the backend does not have."""
        ...

    def close(self) -> None:
        """Release the backend's resources; safe to call twice."""
        ...


class NoGpuBackend:
    """No GPUs: only CPU jobs run. `reason` says why when `auto` found nothing, so the daemon
    can log it at start."""

    kind: BackendKind = "none"

    def __init__(self, reason: str | None = None) -> None:
        self.reason = reason

    def devices(self) -> list[GpuDevice]:
        return []

    def usage(self) -> list[GpuUsage]:
        return []

    def sample(self) -> list[GpuSample]:
        return []

    def distance(self, a: int, b: int) -> int:
        raise ValueError(f"no GPUs {a} and {b}: this host has no GPUs")

    def close(self) -> None:
        return None
