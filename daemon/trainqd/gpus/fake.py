"""Simulated GPUs: a product feature for CPU-only hosts, demos and tests.

`fake:N` gives N GPUs laid out like a real 8-GPU server: GPUs 2k and 2k+1 share a PCIe
switch, the first half of the switches hang off one NUMA node and the rest off the other.
`fake:/path/gpus.json` describes the GPUs in a file instead, and may declare foreign
processes on them, which is how an operator (or a test) shows trainq a GPU that someone
else is using:

    {
      "count": 4,                                   # or give "gpus", or both
      "gpus": [{"name": "...", "memory_total_mib": 24576, "uuid": "GPU-...",
                "pci_bus_id": "00000000:18:00.0",
                "utilization": 87, "memory_used_mib": 20480, "power_watts": 310.5},
               ...],                                # every key optional
      "distance": [[0, 20, 50, 50], ...],           # count x count, symmetric, 0 on the diagonal
      "processes": {"1": [4242]}                    # GPU index -> pids of foreign processes
    }

The inventory is read once; the processes and the live readings (`utilization` in percent,
`memory_used_mib`, `power_watts`, which `sample()` reports) are read again whenever the file
changes, so a demo or a test can make a GPU busy or idle by rewriting it. A declared pid
counts only while that process is alive, so a GPU frees itself when its foreign process
exits. Standard library only (see base.py).
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainqd.gpus.base import (
    DISTANCE_CROSS_NUMA,
    DISTANCE_NUMA_NODE,
    DISTANCE_PCIE_SWITCH,
    DISTANCE_SAME,
    BackendKind,
    GpuBackendError,
    GpuDevice,
    GpuSample,
    GpuUsage,
)
from trainqd.gpus.fake_nodes import Nodes, make_nodes

MAX_FAKE_GPUS = 64
# What NVML reports for an 80 GB H100, so sizes shown by `trainq gpus` look familiar.
FAKE_MEMORY_TOTAL_MIB = 81559
FAKE_GPU_NAME = "trainq simulated GPU"
_UUID_NAMESPACE = uuid.UUID("6f1c3a52-57d4-4c1e-9a0b-2f7d8e4c1b90")
# Bus numbers of the first GPU on each NUMA node; like real servers, node 1's devices sit in
# the upper half of the bus range.
_NUMA_NODE_FIRST_BUS = (0x18, 0x98)
_RACY_WINDOW_NS = 2_000_000_000
_FILE_KEYS = frozenset({"count", "gpus", "distance", "processes"})
_INVENTORY_KEYS = frozenset({"name", "memory_total_mib", "uuid", "pci_bus_id"})
_LIVE_KEYS = frozenset({"utilization", "memory_used_mib", "power_watts"})
_GPU_KEYS = _INVENTORY_KEYS | _LIVE_KEYS


def fake_uuid(index: int) -> str:
    """A UUID in NVML's format that depends on the index alone, so it survives restarts."""
    return f"GPU-{uuid.uuid5(_UUID_NAMESPACE, f'trainq-fake-gpu-{index}')}"


def _numa_nodes(count: int) -> list[int]:
    switches = math.ceil(count / 2)
    first_switch_of_node_1 = math.ceil(switches / 2)
    return [0 if index // 2 < first_switch_of_node_1 else 1 for index in range(count)]


def server_distances(count: int) -> tuple[tuple[int, ...], ...]:
    """The distance matrix of `count` GPUs laid out like a two-socket server."""
    nodes = _numa_nodes(count)

    def distance(a: int, b: int) -> int:
        if a == b:
            return DISTANCE_SAME
        if a // 2 == b // 2:
            return DISTANCE_PCIE_SWITCH
        return DISTANCE_NUMA_NODE if nodes[a] == nodes[b] else DISTANCE_CROSS_NUMA

    return tuple(tuple(distance(a, b) for b in range(count)) for a in range(count))


def server_devices(count: int) -> list[GpuDevice]:
    nodes = _numa_nodes(count)
    devices = []
    for index in range(count):
        first_of_node = nodes.index(nodes[index])
        bus = _NUMA_NODE_FIRST_BUS[nodes[index]] + 2 * (index - first_of_node)
        devices.append(
            GpuDevice(
                index=index,
                uuid=fake_uuid(index),
                name=FAKE_GPU_NAME,
                memory_total_mib=FAKE_MEMORY_TOTAL_MIB,
                pci_bus_id=f"00000000:{bus:02X}:00.0",
            )
        )
    return devices


@dataclass(frozen=True)
class FakeGpuFile:
    """A parsed and checked `fake:` file."""

    devices: list[GpuDevice]
    distances: tuple[tuple[int, ...], ...]
    processes: Mapping[int, frozenset[int]]
    live: Mapping[int, GpuSample]


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_count(count: object, where: str) -> int:
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_FAKE_GPUS:
        raise ValueError(f"{where} must be a whole number from 1 to {MAX_FAKE_GPUS}")
    return count


def _parse_gpus(raw: object, count: int) -> list[GpuDevice]:
    defaults = server_devices(count)
    if raw is None:
        return defaults
    if not isinstance(raw, list) or len(raw) != count:
        raise ValueError(f'"gpus" must be a list of {count} objects')
    devices = []
    for index, (entry, default) in enumerate(zip(raw, defaults, strict=True)):
        where = f'"gpus"[{index}]'
        if not isinstance(entry, dict):
            raise ValueError(f"{where} must be an object")
        unknown = set(entry) - _GPU_KEYS
        if unknown:
            raise ValueError(f"{where}: unknown key {sorted(unknown)[0]!r}")
        for key in ("name", "uuid", "pci_bus_id"):
            if key in entry and (not isinstance(entry[key], str) or not entry[key].strip()):
                raise ValueError(f"{where}.{key} must be a non-empty string")
        memory = entry.get("memory_total_mib", default.memory_total_mib)
        if not _is_int(memory) or memory <= 0:
            raise ValueError(f"{where}.memory_total_mib must be a positive whole number")
        devices.append(
            GpuDevice(
                index=index,
                uuid=entry.get("uuid", default.uuid),
                name=entry.get("name", default.name),
                memory_total_mib=memory,
                pci_bus_id=entry.get("pci_bus_id", default.pci_bus_id),
            )
        )
    for key in ("uuid", "pci_bus_id"):
        values = [getattr(device, key) for device in devices]
        if len(set(values)) != len(values):
            raise ValueError(f'"gpus": two GPUs have the same {key}')
    return devices


def _number(entry: dict[str, Any], key: str, where: str, top: float | None) -> float | None:
    value = entry.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{where}.{key} must be a number")
    if value < 0 or (top is not None and value > top):
        limit = f"from 0 to {top:g}" if top is not None else "0 or more"
        raise ValueError(f"{where}.{key} must be {limit}")
    return float(value)


def _parse_live(raw: object) -> dict[int, GpuSample]:
    """The live readings of a `"gpus"` list already checked by `_parse_gpus`."""
    if not isinstance(raw, list):
        return {}
    live = {}
    for index, entry in enumerate(raw):
        if not _LIVE_KEYS & set(entry):
            continue  # `sample()` reports it as an idle board
        where = f'"gpus"[{index}]'
        memory = _number(entry, "memory_used_mib", where, None)
        live[index] = GpuSample(
            index=index,
            utilization_percent=_number(entry, "utilization", where, 100),
            memory_used_mib=None if memory is None else int(memory),
            power_watts=_number(entry, "power_watts", where, None),
        )
    return live


def _parse_distances(raw: object, count: int) -> tuple[tuple[int, ...], ...]:
    if raw is None:
        return server_distances(count)
    shape = f'"distance" must be a {count} x {count} list of lists of whole numbers'
    if not isinstance(raw, list) or len(raw) != count:
        raise ValueError(shape)
    rows = []
    for row in raw:
        if not isinstance(row, list) or len(row) != count or not all(map(_is_int, row)):
            raise ValueError(shape)
        rows.append(tuple(row))
    for a in range(count):
        for b in range(count):
            if rows[a][b] != rows[b][a]:
                raise ValueError(f'"distance" is not symmetric at [{a}][{b}]')
            if a == b and rows[a][b] != 0:
                raise ValueError(
                    f'"distance"[{a}][{a}] must be 0 (a GPU is distance 0 from itself)'
                )
            if a != b and rows[a][b] <= 0:
                raise ValueError(f'"distance"[{a}][{b}] must be positive (distinct GPUs)')
    return tuple(rows)


def _parse_processes(raw: object, count: int) -> dict[int, frozenset[int]]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ValueError('"processes" must be an object: {"<GPU index>": [pid, ...]}')
    processes = {}
    for key, pids in raw.items():
        if not key.isdigit() or int(key) >= count:
            raise ValueError(f'"processes": {key!r} is not a GPU index (0 to {count - 1})')
        if not isinstance(pids, list) or not all(_is_int(pid) and pid > 0 for pid in pids):
            raise ValueError(f'"processes"[{key!r}] must be a list of process ids')
        processes[int(key)] = frozenset(pids)
    return processes


def parse_fake_file(document: Any) -> FakeGpuFile:
    """Check a decoded `fake:` file; ValueError with one line says what is wrong."""
    if not isinstance(document, dict):
        raise ValueError("the file must hold a JSON object")
    unknown = set(document) - _FILE_KEYS
    if unknown:
        raise ValueError(
            f"unknown key {sorted(unknown)[0]!r} (known: {', '.join(sorted(_FILE_KEYS))})"
        )
    gpus = document.get("gpus")
    if "count" in document:
        count = _check_count(document["count"], '"count"')
    elif isinstance(gpus, list):
        count = _check_count(len(gpus), 'the number of "gpus"')
    else:
        raise ValueError('give "count" or a "gpus" list')
    return FakeGpuFile(
        devices=_parse_gpus(gpus, count),
        distances=_parse_distances(document.get("distance"), count),
        processes=_parse_processes(document.get("processes"), count),
        live=_parse_live(gpus),
    )


def _read_fake_file(path: Path) -> FakeGpuFile:
    try:
        document = json.loads(path.read_bytes())
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path} is not valid JSON: {exc}") from None
    try:
        return parse_fake_file(document)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


def _is_alive(pid: int) -> bool:
    """Whether `pid` is a running process; a zombie has exited and no longer holds a GPU."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            line = stat.read()
    except FileNotFoundError:
        return False
    except OSError:  # no /proc to read: ask the kernel, which cannot tell zombies apart
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass  # someone else's process: alive
        return True
    # The command name is parenthesised and may hold spaces or parentheses: the state
    # letter follows the last ')'.
    name_end = line.rfind(b")")
    return line[name_end + 2 : name_end + 3] not in (b"Z", b"X")


class FakeGpuBackend:
    """Simulated GPUs; see the module docstring."""

    kind: BackendKind = "fake"
    # Device nodes this backend made or took over (fake_nodes.py), removed again by close().
    _nodes: Nodes | None = None

    def __init__(
        self,
        devices: Sequence[GpuDevice],
        distances: Sequence[Sequence[int]],
        processes_file: Path | None = None,
        processes: Mapping[int, frozenset[int]] | None = None,
        live: Mapping[int, GpuSample] | None = None,
    ) -> None:
        self._devices = sorted(devices, key=lambda device: device.index)
        self._distances = {
            (a.index, b.index): distances[row][column]
            for row, a in enumerate(self._devices)
            for column, b in enumerate(self._devices)
        }
        self._processes_file = processes_file
        self._declared: Mapping[int, frozenset[int]] = dict(processes or {})
        self._live: Mapping[int, GpuSample] = dict(live or {})
        self._file_error: str | None = None
        # None until the first usage() reads the file again: it may have changed since the
        # inventory was read, and one extra read is cheaper than reasoning about that race.
        self._file_key: tuple[int, int, int] | None = None
        self._lock = threading.Lock()

    @classmethod
    def with_count(cls, count: int) -> FakeGpuBackend:
        if not 1 <= count <= MAX_FAKE_GPUS:
            raise GpuBackendError(
                f"the number of simulated GPUs must be from 1 to {MAX_FAKE_GPUS}, not {count}"
            )
        return cls(server_devices(count), server_distances(count))

    @classmethod
    def from_file(cls, path: Path) -> FakeGpuBackend:
        try:
            parsed = _read_fake_file(path)
        except ValueError as exc:
            raise GpuBackendError(str(exc)) from None
        return cls(parsed.devices, parsed.distances, path, parsed.processes, parsed.live)

    def devices(self) -> list[GpuDevice]:
        return list(self._devices)

    def usage(self) -> list[GpuUsage]:
        with self._lock:
            self._refresh_processes()
            declared, error, readings = self._declared, self._file_error, self._live
        usages = []
        for device in self._devices:
            if error is not None:
                usages.append(GpuUsage(device.index, None, frozenset(), error=error))
                continue
            live = frozenset(pid for pid in declared.get(device.index, ()) if _is_alive(pid))
            reading = readings.get(device.index)
            memory = reading.memory_used_mib if reading is not None else None
            usages.append(GpuUsage(device.index, memory or 0, live))
        return usages

    def sample(self) -> list[GpuSample]:
        with self._lock:
            self._refresh_processes()
            readings, error = self._live, self._file_error
        if error is not None:  # nothing is known while the file is unreadable
            return [GpuSample(device.index) for device in self._devices]
        # GPUs the file gives no readings for idle at zero, as a fresh board would.
        return [
            readings.get(device.index)
            or GpuSample(device.index, utilization_percent=0.0, memory_used_mib=0)
            for device in self._devices
        ]

    def distance(self, a: int, b: int) -> int:
        try:
            return self._distances[a, b]
        except KeyError:
            raise ValueError(f"no simulated GPU pair ({a}, {b})") from None

    def make_device_nodes(self, directory: Path, record: Path) -> Nodes:
        """Give the simulated GPUs device nodes in `directory` (root only), those made
        before kept in `record`; what was made and found there. NodeError."""
        self.close()
        self._nodes = make_nodes(directory, (device.index for device in self._devices), record)
        return self._nodes

    def close(self) -> None:
        if self._nodes is not None:
            self._nodes.remove()
            self._nodes = None

    @staticmethod
    def _stat_key(path: Path) -> tuple[int, int, int] | None:
        try:
            status = path.stat()
        except OSError:
            return None
        return (status.st_mtime_ns, status.st_size, status.st_ino)

    def _refresh_processes(self) -> None:
        if self._processes_file is None:
            return
        key = self._stat_key(self._processes_file)
        if key is not None and key == self._file_key and self._file_error is None:
            return
        read_at_ns = time.time_ns()
        try:
            parsed = _read_fake_file(self._processes_file)
        except ValueError as exc:
            # Unreadable now (deleted, half written): every GPU counts as busy until the
            # file is good again, and the next call reads it afresh.
            self._file_error, self._file_key = str(exc), None
            return
        if len(parsed.devices) != len(self._devices):
            self._file_error = (
                f"{self._processes_file} now describes {len(parsed.devices)} GPUs, not "
                f"{len(self._devices)}: restart trainqd to change the inventory"
            )
            self._file_key = None
            return
        self._declared, self._file_error, self._file_key = parsed.processes, None, key
        self._live = parsed.live
        if key is not None and read_at_ns - key[0] < _RACY_WINDOW_NS:
            # File times advance in clock ticks (milliseconds, or seconds on some file
            # systems): a rewrite in the tick of the last write keeps the same mtime. Until
            # the file has been still for a while, read it every time rather than miss one.
            self._file_key = None
