"""The real GPU backend, over NVML through `pynvml` (the nvidia-ml-py distribution).

The inventory and the topology are read once, at open: they change only with a reboot or a
driver reload, which restarts the daemon anyway. `usage()` asks NVML every time, and never
lets one GPU's failure escape: a GPU whose processes cannot be listed is reported as busy
with unknown processes, so a flaky driver call delays a job instead of sharing a GPU.

`pynvml` is imported only when this backend is opened: hosts without NVIDIA hardware never
load it. Its functions return `bytes` in older releases and `str` in newer ones; every
string goes through `_text`.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
from typing import Any

from trainqd.gpus.base import (
    DISTANCE_BOARD,
    DISTANCE_CROSS_NUMA,
    DISTANCE_HOST_BRIDGE,
    DISTANCE_NUMA_NODE,
    DISTANCE_NVLINK,
    DISTANCE_PCIE_SWITCH,
    DISTANCE_PCIE_SWITCHES,
    DISTANCE_SAME,
    BackendKind,
    GpuBackendError,
    GpuDevice,
    GpuSample,
    GpuUsage,
)

_MIB = 1024 * 1024
_NVML_LIBRARY = "libnvidia-ml.so.1"
# nvmlNvLinkDeviceType_t, spelled out because old nvidia-ml-py releases lack the names.
_NVLINK_REMOTE_GPU = 0
_NVLINK_REMOTE_SWITCH = 2

# nvmlGpuTopologyLevel_t values (stable across NVML releases) on trainq's distance scale.
_TOPOLOGY_DISTANCE = {
    0: DISTANCE_BOARD,  # INTERNAL
    10: DISTANCE_PCIE_SWITCH,  # SINGLE
    20: DISTANCE_PCIE_SWITCHES,  # MULTIPLE
    30: DISTANCE_HOST_BRIDGE,  # HOSTBRIDGE
    40: DISTANCE_NUMA_NODE,  # NODE (formerly CPU)
    50: DISTANCE_CROSS_NUMA,  # SYSTEM
}


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _canonical_bus_id(bus_id: str) -> str:
    """One spelling for a PCI address: NVML gives "00000000:18:00.0" in `busId` and
    "0000:18:00.0" in `busIdLegacy`, in either case."""
    domain, _, rest = bus_id.strip().lower().rpartition(":")
    domain, _, bus = domain.rpartition(":")
    return f"{int(domain or '0', 16):08x}:{bus}:{rest}"


def _library_problem() -> str:
    """Why the NVML library cannot be loaded, in the dynamic loader's own words."""
    try:
        ctypes.CDLL(_NVML_LIBRARY)
    except OSError as exc:
        return str(exc)
    return f"{_NVML_LIBRARY} was not found"


def _import_pynvml() -> Any:
    try:
        import pynvml  # noqa: PLC0415 (only hosts that choose NVML pay for it)
    except ImportError:
        raise GpuBackendError(
            "NVML is not available: the nvidia-ml-py package is not installed"
        ) from None
    return pynvml


def _init_problem(nvml: Any, error: Exception) -> str:
    code = getattr(error, "value", None)
    if code == nvml.NVML_ERROR_LIBRARY_NOT_FOUND:
        return f"NVML is not available: {_library_problem()}"
    if code == nvml.NVML_ERROR_DRIVER_NOT_LOADED:
        return "NVML is not available: the NVIDIA kernel driver is not loaded"
    if code == nvml.NVML_ERROR_NO_PERMISSION:
        return "NVML is not available: permission denied opening the NVIDIA devices"
    return f"NVML is not available: {error}"


class NvmlBackend:
    """The GPUs NVML sees on this host."""

    kind: BackendKind = "nvml"

    def __init__(self, nvml: Any) -> None:
        """Take an initialised `pynvml` module and read the inventory; `open_nvml` is the
        way in."""
        self._nvml = nvml
        self._closed = False
        self._handles: dict[int, Any] = {}
        self._devices: list[GpuDevice] = []
        # GPUs NVML counts but cannot open (lost, or hidden by a device cgroup): trainq
        # leaves them alone, and the daemon logs why.
        self.unreadable: dict[int, str] = {}
        for index in range(nvml.nvmlDeviceGetCount()):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                device = GpuDevice(
                    index=index,
                    uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
                    name=_text(nvml.nvmlDeviceGetName(handle)),
                    memory_total_mib=int(nvml.nvmlDeviceGetMemoryInfo(handle).total) // _MIB,
                    pci_bus_id=_text(nvml.nvmlDeviceGetPciInfo(handle).busId),
                )
            except nvml.NVMLError as exc:
                self.unreadable[index] = f"GPU {index}: {exc}"
                continue
            self._handles[index] = handle
            self._devices.append(device)
        self._distances = self._read_topology()

    def devices(self) -> list[GpuDevice]:
        return list(self._devices)

    def usage(self) -> list[GpuUsage]:
        return [self._usage_of(device.index) for device in self._devices]

    def sample(self) -> list[GpuSample]:
        return [self._sample_of(device.index) for device in self._devices]

    def _sample_of(self, index: int) -> GpuSample:
        """One GPU's readings; each call that fails (not supported on this board, a GPU in
        trouble) leaves its reading None rather than losing the others."""
        nvml, handle = self._nvml, self._handles[index]
        utilization: float | None = None
        memory_used: int | None = None
        power: float | None = None
        processes: dict[int, int] = {}
        with contextlib.suppress(nvml.NVMLError):
            utilization = float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
        with contextlib.suppress(nvml.NVMLError):
            memory_used = int(nvml.nvmlDeviceGetMemoryInfo(handle).used) // _MIB
        with contextlib.suppress(nvml.NVMLError):
            power = nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0  # milliwatts
        with contextlib.suppress(nvml.NVMLError):
            for process in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
                used = getattr(process, "usedGpuMemory", None)
                # NVML reports no per-process memory under some drivers and in containers.
                if isinstance(used, int) and used >= 0:
                    processes[int(process.pid)] = used // _MIB
        return GpuSample(index, utilization, memory_used, power, processes)

    def distance(self, a: int, b: int) -> int:
        if a == b and a in self._handles:
            return DISTANCE_SAME
        try:
            return self._distances[min(a, b), max(a, b)]
        except KeyError:
            raise ValueError(f"no GPU pair ({a}, {b}) in the NVML inventory") from None

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        # Shutting down either way: a failure here leaves nothing to release.
        with contextlib.suppress(self._nvml.NVMLError):
            self._nvml.nvmlShutdown()

    def _usage_of(self, index: int) -> GpuUsage:
        nvml, handle = self._nvml, self._handles[index]
        try:
            memory_used: int | None = int(nvml.nvmlDeviceGetMemoryInfo(handle).used) // _MIB
        except Exception:  # memory is informative: its absence harms nothing
            memory_used = None
        try:
            processes = list(nvml.nvmlDeviceGetComputeRunningProcesses(handle))
            processes += self._graphics_processes(handle)
            pids = frozenset(int(process.pid) for process in processes)
        except Exception as exc:  # one GPU's failure, of any kind, must not stop planning
            return GpuUsage(
                index,
                memory_used,
                frozenset(),
                error=f"cannot list processes on GPU {index}: {exc}",
            )
        return GpuUsage(index, memory_used, pids)

    def _graphics_processes(self, handle: Any) -> list[Any]:
        nvml = self._nvml
        try:
            return list(nvml.nvmlDeviceGetGraphicsRunningProcesses(handle))
        except nvml.NVMLError_NotSupported:
            # Compute-only boards cannot run graphics work, so nothing is missed.
            return []

    def _read_topology(self) -> dict[tuple[int, int], int]:
        nvlinked = self._nvlinked_pairs()
        distances = {}
        for a, b in itertools.combinations(sorted(self._handles), 2):
            if (a, b) in nvlinked:
                distances[a, b] = DISTANCE_NVLINK
                continue
            try:
                level = self._nvml.nvmlDeviceGetTopologyCommonAncestor(
                    self._handles[a], self._handles[b]
                )
            except self._nvml.NVMLError:
                # Virtual machines often hide the PCIe tree: assume the farthest, so no
                # pair looks closer than it may be.
                level = None
            distances[a, b] = _TOPOLOGY_DISTANCE.get(level, DISTANCE_CROSS_NUMA)
        return distances

    def _nvlinked_pairs(self) -> set[tuple[int, int]]:
        """GPU pairs with an active NVLink between them, directly or through NVSwitches
        (every GPU with an active link to a switch reaches every other such GPU)."""
        by_bus_id = {_canonical_bus_id(d.pci_bus_id): d.index for d in self._devices}
        pairs: set[tuple[int, int]] = set()
        on_fabric: set[int] = set()
        for index, handle in self._handles.items():
            for link in range(self._nvml.NVML_NVLINK_MAX_LINKS):
                peer = self._active_link_peer(handle, link)
                if peer is None:
                    break
                if peer == "":
                    continue
                if peer == "switch":
                    on_fabric.add(index)
                elif (other := by_bus_id.get(peer)) is not None and other != index:
                    pairs.add((min(index, other), max(index, other)))
        pairs.update(itertools.combinations(sorted(on_fabric), 2))
        return pairs

    def _active_link_peer(self, handle: Any, link: int) -> str | None:
        """The far end of one NVLink: "switch", a canonical PCI bus id, "" for an inactive
        link, or None when the GPU has no such link (no more links to look at)."""
        nvml = self._nvml
        try:
            if nvml.nvmlDeviceGetNvLinkState(handle, link) != nvml.NVML_FEATURE_ENABLED:
                return ""
        except (nvml.NVMLError_NotSupported, nvml.NVMLError_InvalidArgument):
            return None
        except nvml.NVMLError:
            return ""
        # Releases of NVML before the NVSwitch era lack the call: their links join GPUs.
        remote_type = _NVLINK_REMOTE_GPU
        with contextlib.suppress(AttributeError, nvml.NVMLError):
            remote_type = nvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link)
        if remote_type == _NVLINK_REMOTE_SWITCH:
            return "switch"
        try:
            return _canonical_bus_id(
                _text(nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId)
            )
        except nvml.NVMLError:
            return ""


def open_nvml() -> NvmlBackend:
    """Initialise NVML and read the inventory; GpuBackendError (one line) when NVML cannot
    be used on this host."""
    nvml = _import_pynvml()
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        raise GpuBackendError(_init_problem(nvml, exc)) from None
    try:
        return NvmlBackend(nvml)
    except nvml.NVMLError as exc:
        with contextlib.suppress(nvml.NVMLError):  # the error being reported matters more
            nvml.nvmlShutdown()
        raise GpuBackendError(f"NVML failed while reading the GPU inventory: {exc}") from None
