"""The simulated GPUs' file with real processes declared on it (a GPU is someone else's only
while its process lives), and the NVML backend, which a fresh interpreter shows is not
imported until chosen."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.waiting import wait_for
from tests.support.watching import gpus_in_use, write_gpu_file
from trainqd.gpus.fake import FakeGpuBackend


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=5)


def start_sleeper(started: list[subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(["sleep", "60"])
    started.append(process)
    return process


# --- fake:/path/gpus.json -----------------------------------------------------------------


def test_a_declared_pid_blocks_its_gpu_only_while_alive(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    dead = start_sleeper(processes)
    dead.kill()
    dead.wait()
    alive = start_sleeper(processes)
    path = tmp_path / "gpus.json"
    write_gpu_file(path, {"count": 4, "processes": {"1": [alive.pid, dead.pid]}})
    backend = FakeGpuBackend.from_file(path)

    usage = backend.usage()
    assert usage[1].pids == {alive.pid}
    assert usage[1].taken_by_others(held_by_trainq=False)
    assert not usage[1].taken_by_others(held_by_trainq=True)
    assert not any(u.pids for u in usage if u.index != 1)

    alive.kill()  # not reaped yet: a zombie holds no GPU
    wait_for(lambda: not gpus_in_use(backend), timeout=5, what="GPU 1 to be free")
    alive.wait()
    assert not gpus_in_use(backend)


def test_the_file_is_read_again_when_it_changes(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    path = tmp_path / "gpus.json"
    write_gpu_file(path, {"count": 4})
    backend = FakeGpuBackend.from_file(path)
    assert not gpus_in_use(backend)

    sleeper = start_sleeper(processes)
    write_gpu_file(path, {"count": 4, "processes": {"2": [sleeper.pid]}})
    assert gpus_in_use(backend) == {2: {sleeper.pid}}

    # Rewritten in place, same size, within the same clock tick: still noticed.
    path.write_text(json.dumps({"count": 4, "processes": {"3": [sleeper.pid]}}))
    assert gpus_in_use(backend) == {3: {sleeper.pid}}

    write_gpu_file(path, {"count": 4, "processes": {}})
    assert not gpus_in_use(backend)


# --- NVML on a host without the NVIDIA driver ---------------------------------------------


def test_the_nvml_backend_never_imports_pynvml_until_chosen() -> None:
    probe = (
        "import sys; from trainqd.gpus import open_backend; open_backend('fake:2'); "
        "open_backend('none'); print('pynvml' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=30
    )
    assert result.stdout.strip() == "False"


# --- the NVML backend's own logic, over a stand-in for the driver library -----------------
# This host has no NVIDIA driver, so the library calls are answered by a small table; the
# real pynvml module provides the constants and the error classes.
