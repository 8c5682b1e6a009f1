"""The NVML backend on real NVIDIA hardware: inventory, live processes, topology.

Runs on a GPU machine (`python3 -m pytest tests/gpu -p no:cacheprovider`); on a host without
NVML the whole module reports itself skipped, since there is nothing here to check.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

pynvml = pytest.importorskip("pynvml", reason="nvidia-ml-py is not installed")
try:
    pynvml.nvmlInit()
    pynvml.nvmlShutdown()
except pynvml.NVMLError as _error:
    pytest.skip(f"NVML is not usable here: {_error}", allow_module_level=True)

from tests.support.waiting import wait_for  # noqa: E402 (once NVML is known to work)

from trainqd.gpus import GpuBackend, open_backend  # noqa: E402

pytestmark = pytest.mark.gpu

# A CUDA context that stays open until stdin closes, on the one GPU it is shown.
CUDA_HOLDER = (
    "import sys, torch; x = torch.zeros(1, device='cuda'); torch.cuda.synchronize(); "
    "print('ready', flush=True); sys.stdin.read()"
)


@pytest.fixture
def backend() -> Iterator[GpuBackend]:
    opened = open_backend("nvml")
    yield opened
    opened.close()


def nvidia_smi(*fields: str) -> list[list[str]]:
    result = subprocess.run(
        ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return [[cell.strip() for cell in line.split(",")] for line in result.stdout.splitlines()]


def test_auto_chooses_nvml() -> None:
    chosen = open_backend("auto")
    try:
        assert chosen.kind == "nvml"
        assert chosen.devices()
    finally:
        chosen.close()


def test_inventory_matches_nvidia_smi(backend: GpuBackend) -> None:
    rows = nvidia_smi("index", "uuid", "name", "memory.total", "pci.bus_id")
    devices = backend.devices()
    assert [device.index for device in devices] == [int(row[0]) for row in rows]
    for device, (_, uuid, name, memory, bus_id) in zip(devices, rows, strict=True):
        assert device.uuid == uuid
        assert device.name == name
        assert device.memory_total_mib == int(memory)
        assert device.pci_bus_id.upper() == bus_id.upper()


def test_usage_reads_every_gpu(backend: GpuBackend) -> None:
    usage = backend.usage()
    assert [entry.index for entry in usage] == [device.index for device in backend.devices()]
    for entry, device in zip(usage, backend.devices(), strict=True):
        assert entry.error is None
        assert entry.memory_used_mib is not None
        assert 0 <= entry.memory_used_mib <= device.memory_total_mib


def test_a_cuda_process_appears_in_usage_until_it_exits(backend: GpuBackend) -> None:
    target = backend.devices()[-1]
    environment = dict(
        os.environ, CUDA_DEVICE_ORDER="PCI_BUS_ID", CUDA_VISIBLE_DEVICES=str(target.index)
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", CUDA_HOLDER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=environment,
    )
    assert holder.stdin is not None
    assert holder.stdout is not None
    try:
        # torch's import and CUDA start-up take seconds on a cold machine.
        assert holder.stdout.readline() == b"ready\n"

        def pids_on_target() -> frozenset[int]:
            return next(u.pids for u in backend.usage() if u.index == target.index)

        wait_for(lambda: holder.pid in pids_on_target(), timeout=30, what="the CUDA process")
        entry = next(u for u in backend.usage() if u.index == target.index)
        assert entry.taken_by_others(held_by_trainq=False)
        assert not entry.taken_by_others(held_by_trainq=True)
        others = [u for u in backend.usage() if u.index != target.index]
        assert all(holder.pid not in u.pids for u in others)

        holder.stdin.close()
        assert holder.wait(timeout=60) == 0
        wait_for(lambda: holder.pid not in pids_on_target(), timeout=30, what="its exit")
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(timeout=30)
        holder.stdout.close()


def test_distance_is_symmetric_and_zero_only_on_the_diagonal(backend: GpuBackend) -> None:
    indices = [device.index for device in backend.devices()]
    for a in indices:
        for b in indices:
            assert backend.distance(a, b) == backend.distance(b, a)
            assert (backend.distance(a, b) == 0) == (a == b)
            assert backend.distance(a, b) <= 60
