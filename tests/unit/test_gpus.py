"""GPU backends: the simulated inventory and its file, spec errors, and NVML on a host without
the NVIDIA driver (this one, and CI). tests/gpu/ checks NVML on real hardware."""

from __future__ import annotations

import ctypes
import re
import types
from pathlib import Path
from typing import Any

import pynvml
import pytest

from tests.support.watching import write_gpu_file
from trainqd.gpus import GpuBackendError, GpuUsage, NoGpuBackend, open_backend
from trainqd.gpus.base import DISTANCE_NVLINK, DISTANCE_PCIE_SWITCH
from trainqd.gpus.fake import FAKE_GPU_NAME, FakeGpuBackend
from trainqd.gpus.nvml import NvmlBackend, _canonical_bus_id, _text

UUID_FORMAT = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
BUS_ID_FORMAT = re.compile(r"^[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-7]$")


# --- fake:N -------------------------------------------------------------------------------


def test_fake_inventory_looks_like_a_real_server() -> None:
    backend = open_backend("fake:8")
    assert backend.kind == "fake"
    devices = backend.devices()
    assert [device.index for device in devices] == list(range(8))
    assert all(UUID_FORMAT.match(device.uuid) for device in devices)
    assert len({device.uuid for device in devices}) == 8
    assert all(BUS_ID_FORMAT.match(device.pci_bus_id) for device in devices)
    assert len({device.pci_bus_id for device in devices}) == 8
    assert all("simulated" in device.name for device in devices)
    assert all(device.memory_total_mib == 81559 for device in devices)


def test_fake_uuids_are_stable_across_opens_and_sizes() -> None:
    assert open_backend("fake:2").devices() == open_backend("fake:2").devices()
    eight = [device.uuid for device in open_backend("fake:8").devices()]
    assert eight[:4] == [device.uuid for device in open_backend("fake:4").devices()]


def test_fake_topology_pairs_switches_and_numa_nodes() -> None:
    backend = open_backend("fake:8")
    assert backend.distance(3, 3) == 0
    assert backend.distance(0, 1) == backend.distance(6, 7) == 20
    assert backend.distance(0, 3) == backend.distance(4, 6) == 50
    assert backend.distance(0, 4) == backend.distance(3, 7) == 60
    for a in range(8):
        for b in range(8):
            assert backend.distance(a, b) == backend.distance(b, a)
            assert (backend.distance(a, b) == 0) == (a == b)
    with pytest.raises(ValueError, match="no simulated GPU"):
        backend.distance(0, 8)


def test_fake_with_an_odd_count_keeps_pairs_inside_numa_nodes() -> None:
    backend = open_backend("fake:5")
    assert backend.distance(0, 1) == backend.distance(2, 3) == 20
    assert backend.distance(0, 3) == 50
    assert backend.distance(3, 4) == backend.distance(1, 4) == 60


def test_fake_gpus_start_free() -> None:
    usage = open_backend("fake:3").usage()
    assert usage == [GpuUsage(index, 0, frozenset()) for index in range(3)]


def test_fake_accepts_one_and_sixty_four() -> None:
    assert len(open_backend("fake:1").devices()) == 1
    assert len(open_backend(" fake:64 ").devices()) == 64


# --- fake:/path/gpus.json -----------------------------------------------------------------


def test_fake_file_gives_names_memory_and_distances(tmp_path: Path) -> None:
    path = tmp_path / "gpus.json"
    write_gpu_file(
        path,
        {
            "gpus": [
                {"name": "lab card A", "memory_total_mib": 24576},
                {"name": "lab card B", "uuid": "GPU-11111111-2222-3333-4444-555555555555"},
                {"pci_bus_id": "00000000:C1:00.0"},
            ],
            "distance": [[0, 5, 30], [5, 0, 30], [30, 30, 0]],
        },
    )
    backend = open_backend(f"fake:{path}")
    devices = backend.devices()
    assert [device.name for device in devices] == ["lab card A", "lab card B", FAKE_GPU_NAME]
    assert devices[0].memory_total_mib == 24576
    assert devices[1].uuid == "GPU-11111111-2222-3333-4444-555555555555"
    assert devices[2].pci_bus_id == "00000000:C1:00.0"
    assert backend.distance(0, 1) == 5
    assert backend.distance(2, 1) == 30


def test_fake_file_with_count_only_uses_the_server_layout(tmp_path: Path) -> None:
    path = tmp_path / "gpus.json"
    write_gpu_file(path, {"count": 4})
    backend = open_backend(f"fake:{path}")
    assert backend.devices() == open_backend("fake:4").devices()
    assert backend.distance(2, 3) == DISTANCE_PCIE_SWITCH


def test_a_broken_file_makes_every_gpu_busy_until_it_is_fixed(tmp_path: Path) -> None:
    path = tmp_path / "gpus.json"
    write_gpu_file(path, {"count": 2})
    backend = FakeGpuBackend.from_file(path)
    assert not any(usage.error for usage in backend.usage())

    path.write_text('{"count": 2, "processes": ')
    usage = backend.usage()
    assert all(u.error and "not valid JSON" in u.error for u in usage)
    assert all(u.taken_by_others(held_by_trainq=False) for u in usage)

    path.unlink()
    assert all(u.error and "cannot read" in u.error for u in backend.usage())

    write_gpu_file(path, {"count": 3})
    assert all(u.error and "restart trainqd" in u.error for u in backend.usage())

    write_gpu_file(path, {"count": 2})
    assert backend.usage() == [GpuUsage(0, 0, frozenset()), GpuUsage(1, 0, frozenset())]


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ([1, 2], "must hold a JSON object"),
        ({}, 'give "count" or a "gpus" list'),
        ({"count": 2, "colour": "red"}, "unknown key 'colour'"),
        ({"count": 0}, '"count" must be a whole number from 1 to 64'),
        ({"count": 65}, '"count" must be a whole number from 1 to 64'),
        ({"count": True}, '"count" must be a whole number'),
        ({"count": 2, "gpus": [{}]}, '"gpus" must be a list of 2 objects'),
        ({"gpus": [{"memory_total_mib": -1}]}, "memory_total_mib must be a positive"),
        ({"gpus": [{"name": ""}]}, "name must be a non-empty string"),
        ({"gpus": [{"speed": 3}]}, "unknown key 'speed'"),
        ({"gpus": [{"uuid": "GPU-a"}, {"uuid": "GPU-a"}]}, "two GPUs have the same uuid"),
        ({"count": 2, "distance": [[0, 1]]}, '"distance" must be a 2 x 2 list'),
        ({"count": 2, "distance": [[0, 1], [2, 0]]}, "not symmetric at [0][1]"),
        ({"count": 2, "distance": [[1, 1], [1, 1]]}, '"distance"[0][0] must be 0'),
        ({"count": 2, "distance": [[0, 0], [0, 0]]}, "must be positive"),
        ({"count": 2, "processes": {"2": [1]}}, "'2' is not a GPU index (0 to 1)"),
        ({"count": 2, "processes": {"x": [1]}}, "'x' is not a GPU index"),
        ({"count": 2, "processes": {"0": [0]}}, "must be a list of process ids"),
        ({"count": 2, "processes": [1]}, '"processes" must be an object'),
    ],
)
def test_bad_fake_files_say_what_is_wrong_in_one_line(
    tmp_path: Path, document: object, message: str
) -> None:
    path = tmp_path / "gpus.json"
    write_gpu_file(path, document)
    with pytest.raises(GpuBackendError) as caught:
        open_backend(f"fake:{path}")
    assert str(caught.value).startswith(f"--gpus fake:{path}: {path}")
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_file_that_is_not_json(tmp_path: Path) -> None:
    path = tmp_path / "gpus.json"
    path.write_text("count = 2\n")
    with pytest.raises(GpuBackendError, match="is not valid JSON") as caught:
        open_backend(f"fake:{path}")
    assert "\n" not in str(caught.value)


# --- specs --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "expected auto, nvml, none, fake:N or fake:/path/to/gpus.json"),
        ("gpu", "--gpus 'gpu': expected auto, nvml, none, fake:N"),
        ("fake", "--gpus 'fake': expected"),
        ("fake:", "--gpus 'fake:': expected"),
        ("fake:-2", "--gpus 'fake:-2': expected"),
        ("fake:eight", "--gpus 'fake:eight': expected"),
        ("fake:0", "--gpus fake:0: the number of simulated GPUs must be from 1 to 64, not 0"),
        ("fake:65", "must be from 1 to 64, not 65"),
        ("fake:/nonexistent/gpus.json", "cannot read /nonexistent/gpus.json: No such file"),
        ("fake:missing.json", "cannot read missing.json: No such file"),
    ],
)
def test_bad_specs_give_one_line(spec: str, message: str) -> None:
    with pytest.raises(GpuBackendError) as caught:
        open_backend(spec)
    assert message in caught.value.message
    assert "\n" not in caught.value.message


def test_none_has_no_gpus() -> None:
    backend = open_backend("none")
    assert backend.kind == "none"
    assert backend.devices() == [] == backend.usage()
    with pytest.raises(ValueError, match="no GPUs"):
        backend.distance(0, 0)
    backend.close()


# --- NVML on a host without the NVIDIA driver ---------------------------------------------


def nvml_library_is_absent() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return True
    return False


def test_nvml_explains_why_it_is_unavailable() -> None:
    assert nvml_library_is_absent(), "this test expects a host without the NVIDIA driver"
    with pytest.raises(GpuBackendError) as caught:
        open_backend("nvml")
    message = caught.value.message
    assert message.startswith("--gpus nvml: NVML is not available: libnvidia-ml.so.1: ")
    assert "cannot open shared object file" in message
    assert "\n" not in message


def test_auto_falls_back_to_no_gpus_and_says_why() -> None:
    assert nvml_library_is_absent(), "this test expects a host without the NVIDIA driver"
    backend = open_backend("auto")
    assert isinstance(backend, NoGpuBackend)
    assert backend.kind == "none"
    assert backend.reason is not None
    assert "libnvidia-ml.so.1" in backend.reason


# --- the NVML backend's own logic, over a stand-in for the driver library -----------------
# This host has no NVIDIA driver, so the library calls are answered by a small table; the
# real pynvml module provides the constants and the error classes.


class DriverTable:
    """What libnvidia-ml would answer for a 4-GPU box: GPUs 0-1 NVLinked directly, GPUs 2-3
    each linked to an NVSwitch, GPU 3's process list failing."""

    def __init__(self, *, names_as_bytes: bool) -> None:
        self.encode = (lambda s: s.encode()) if names_as_bytes else (lambda s: s)
        self.bus_ids = [f"00000000:{bus:02X}:00.0" for bus in (0x18, 0x2A, 0x9A, 0xAB)]
        self.shut_down = 0

    def module(self) -> Any:
        namespace = types.SimpleNamespace(**{n: getattr(pynvml, n) for n in dir(pynvml)})
        for name in dir(self):
            if name.startswith("nvml"):
                setattr(namespace, name, getattr(self, name))
        return namespace

    def nvmlDeviceGetCount(self) -> int:
        return 4

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetUUID(self, handle: int) -> Any:
        return self.encode(f"GPU-0000000{handle}-0000-0000-0000-000000000000")

    def nvmlDeviceGetName(self, handle: int) -> Any:
        return self.encode("NVIDIA H100 80GB HBM3")

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        return types.SimpleNamespace(total=81559 * 1024 * 1024, used=(handle + 1) * 1024 * 1024)

    def nvmlDeviceGetPciInfo(self, handle: int) -> Any:
        return types.SimpleNamespace(busId=self.encode(self.bus_ids[handle]))

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[Any]:
        if handle == 3:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return [types.SimpleNamespace(pid=1000 + handle)]

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: int) -> list[Any]:
        if handle == 1:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return [types.SimpleNamespace(pid=1000 + handle), types.SimpleNamespace(pid=7)]

    def nvmlDeviceGetTopologyCommonAncestor(self, a: int, b: int) -> int:
        if {a, b} == {1, 2}:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return pynvml.NVML_TOPOLOGY_SINGLE if a // 2 == b // 2 else pynvml.NVML_TOPOLOGY_SYSTEM

    def nvmlDeviceGetNvLinkState(self, handle: int, link: int) -> int:
        if link >= 2:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return pynvml.NVML_FEATURE_ENABLED if link == 0 else pynvml.NVML_FEATURE_DISABLED

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: int, link: int) -> int:
        return pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH if handle >= 2 else 0

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: int, link: int) -> Any:
        # busIdLegacy spelling, lower case: the backend must still match it.
        peer = {0: 1, 1: 0}[handle]
        return types.SimpleNamespace(busId=self.encode(self.bus_ids[peer][4:].lower()))

    def nvmlShutdown(self) -> None:
        self.shut_down += 1


@pytest.mark.parametrize("names_as_bytes", [True, False])
def test_nvml_inventory_and_topology(names_as_bytes: bool) -> None:
    table = DriverTable(names_as_bytes=names_as_bytes)
    backend = NvmlBackend(table.module())
    devices = backend.devices()
    assert [d.index for d in devices] == [0, 1, 2, 3]
    assert devices[1].uuid == "GPU-00000001-0000-0000-0000-000000000000"
    assert devices[0].name == "NVIDIA H100 80GB HBM3"
    assert devices[2].memory_total_mib == 81559
    assert devices[3].pci_bus_id == "00000000:AB:00.0"
    assert backend.distance(0, 1) == DISTANCE_NVLINK  # direct link
    assert backend.distance(3, 2) == DISTANCE_NVLINK  # both on the NVSwitch fabric
    assert backend.distance(0, 2) == 60  # SYSTEM
    assert backend.distance(1, 2) == 60  # topology unknown: assumed far
    assert backend.distance(2, 2) == 0
    with pytest.raises(ValueError, match="no GPU pair"):
        backend.distance(0, 4)
    backend.close()
    backend.close()
    assert table.shut_down == 1


def test_nvml_usage_reports_a_failing_gpu_as_busy() -> None:
    backend = NvmlBackend(DriverTable(names_as_bytes=False).module())
    usage = backend.usage()
    assert usage[0] == GpuUsage(0, 1, frozenset({1000, 7}))
    assert usage[1] == GpuUsage(1, 2, frozenset({1001}))  # no graphics on this board
    assert usage[3].error is not None
    assert "GPU 3" in usage[3].error
    assert "GPU is lost" in usage[3].error
    assert usage[3].taken_by_others(held_by_trainq=False)


def test_nvml_text_and_bus_id_helpers() -> None:
    assert _text(b"NVIDIA A100") == _text("NVIDIA A100") == "NVIDIA A100"
    assert _canonical_bus_id("0000:1a:00.0") == _canonical_bus_id("00000000:1A:00.0")
    assert _canonical_bus_id("00000001:1A:00.0") != _canonical_bus_id("00000000:1A:00.0")


def test_a_gpu_is_someone_elses_only_while_no_job_of_trainq_holds_it() -> None:
    busy = GpuUsage(0, 100, frozenset({10, 11}))
    assert busy.taken_by_others(held_by_trainq=False)
    assert not busy.taken_by_others(held_by_trainq=True)
    assert not GpuUsage(0, 0, frozenset()).taken_by_others(held_by_trainq=False)
    unreadable = GpuUsage(0, None, frozenset(), error="GPU is lost")
    assert unreadable.taken_by_others(held_by_trainq=False)
