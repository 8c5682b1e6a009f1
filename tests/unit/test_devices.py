from __future__ import annotations

from pathlib import Path

import pytest

from trainqd.monitor import devices


def test_simulated_gpus_are_numbered_by_index(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(devices, "DRIVER_GPUS", "/nonexistent/driver/gpus")
    env = {"TRAINQ_GPUS": "1,3", "TRAINQ_GPU_UUIDS": "GPU-a,GPU-b"}
    assert devices.job_minors(env) == {1, 3}
    assert devices.job_minors({"TRAINQ_GPUS": "", "TRAINQ_GPU_UUIDS": ""}) == set()


def test_real_gpus_take_the_drivers_minor_by_uuid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for bus, uuid, minor in [("0000:3b:00.0", "GPU-a", 2), ("0000:af:00.0", "GPU-b", 0)]:
        (tmp_path / bus).mkdir()
        (tmp_path / bus / "information").write_text(
            f"Model: \t\t NVIDIA A100\nIRQ:   \t\t 77\nGPU UUID: \t {uuid}\n"
            f"Video BIOS: \t 92.00.19.00.01\nBus Type: \t PCIe\nDevice Minor: \t {minor}\n"
        )
    monkeypatch.setattr(devices, "DRIVER_GPUS", str(tmp_path))
    # NVML index 0 is the GPU whose node is /dev/nvidia2: the minor, not the index, counts.
    assert devices.job_minors({"TRAINQ_GPUS": "0", "TRAINQ_GPU_UUIDS": "GPU-a"}) == {2}
    with pytest.raises(LookupError, match="GPU-c"):
        devices.job_minors({"TRAINQ_GPUS": "0", "TRAINQ_GPU_UUIDS": "GPU-c"})
