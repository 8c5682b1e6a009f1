"""A real trainqd on real NVIDIA GPUs: jobs that run CUDA code on the GPU they were given.

What the fake GPUs cannot show: the GPU a trainer's CUDA sees is the one trainqd assigned
(by UUID, through `CUDA_VISIBLE_DEVICES` and `CUDA_DEVICE_ORDER`), trainqd's sampling sees the
job's own memory and utilization on it, a job given no GPU gets no CUDA device (and, under a
root trainqd, cannot open the GPU's device node), and a GPU that a process trainq did not start
holds is not handed out until that process is gone.

Runs on a GPU machine with torch, httpx, nvidia-ml-py and trainq's own dependencies
(`python3 -m pytest tests/gpu -p no:cacheprovider`); skipped without NVML, like test_nvml.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

pynvml = pytest.importorskip("pynvml", reason="nvidia-ml-py is not installed")
try:
    pynvml.nvmlInit()
    pynvml.nvmlShutdown()
except pynvml.NVMLError as _error:
    pytest.skip(f"NVML is not usable here: {_error}", allow_module_level=True)

pytestmark = pytest.mark.gpu

REPOSITORY = Path(__file__).resolve().parents[2]
TRAINER = Path(__file__).with_name("cuda_trainer.py")
T = TypeVar("T")


def wait_until(check: Callable[[], T | None], timeout: float, what: str) -> T:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


class GpuDaemon:
    """trainqd on `--gpus nvml`, run from this checkout by the interpreter that has torch."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.socket = base / "s"
        path = os.pathsep.join(
            [str(REPOSITORY / "daemon"), str(REPOSITORY / "cli"), os.environ.get("PYTHONPATH", "")]
        )
        self.env = {**os.environ, "PYTHONPATH": path}
        (base / "trainqd.toml").write_text("gpu_sample_seconds = 1\n")
        log = (base / "trainqd.log").open("ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "trainqd",
                "--socket",
                str(self.socket),
                "--state-dir",
                str(base / "state"),
                "--gpus",
                "nvml",
                "--config",
                str(base / "trainqd.toml"),
            ],
            stdout=log,
            stderr=log,
            env=self.env,
            start_new_session=True,
        )
        log.close()
        wait_until(self._answers, 60, f"trainqd to answer ({self.log()})")

    def log(self) -> str:
        return (self.base / "trainqd.log").read_text(errors="replace")[-4000:]

    def _answers(self) -> bool:
        assert self.proc.poll() is None, f"trainqd exited: {self.log()}"
        # A bare connect first: httpx leaks its socket when a connection is refused.
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            try:
                probe.connect(str(self.socket))
            except OSError:
                return False
        return self.get("/v1/health").status_code == 200

    def client(self) -> httpx.Client:
        transport = httpx.HTTPTransport(uds=str(self.socket))
        return httpx.Client(transport=transport, base_url="http://trainq", timeout=30)

    def get(self, path: str) -> httpx.Response:
        with self.client() as c:
            return c.get(path)

    def submit(self, **spec: Any) -> int:
        with self.client() as c:
            response = c.post("/v1/jobs", json=spec)
        assert response.status_code == 201, response.text
        return int(response.json()["id"])

    def job(self, job_id: int) -> dict[str, Any]:
        response = self.get(f"/v1/jobs/{job_id}")
        assert response.status_code == 200, response.text
        job: dict[str, Any] = response.json()
        return job

    def ended(self, job_id: int, timeout: float = 180) -> dict[str, Any]:
        def done() -> dict[str, Any] | None:
            job = self.job(job_id)
            return job if job["state"] in {"COMPLETED", "FAILED", "STOPPED"} else None

        return wait_until(done, timeout, f"job {job_id} to end")

    def output(self, job: dict[str, Any]) -> dict[str, Any]:
        """What the trainer wrote about the CUDA it saw (its model directory)."""
        seen = Path(job["job_dir"]) / "model" / "cuda.json"
        assert seen.is_file(), f"no {seen}: {self.logs(job['id'])}"
        result: dict[str, Any] = json.loads(seen.read_text())
        return result

    def logs(self, job_id: int) -> str:
        text: str = self.get(f"/v1/jobs/{job_id}/logs").text
        return text[-4000:]

    def close(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def daemon() -> Iterator[GpuDaemon]:
    base = Path(tempfile.mkdtemp(prefix="tqgpu", dir="/tmp"))
    os.chmod(base, 0o755)  # noqa: S103 (a job's owner must reach its job directory)
    started = GpuDaemon(base)
    try:
        yield started
    finally:
        started.close()


def cuda_job(seconds: float = 0, **spec: Any) -> dict[str, Any]:
    return {"command": [sys.executable, str(TRAINER), str(seconds)], "max_retries": 0, **spec}


def nvml_uuids() -> list[str]:
    pynvml.nvmlInit()
    try:
        return [
            pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))
            for i in range(pynvml.nvmlDeviceGetCount())
        ]
    finally:
        pynvml.nvmlShutdown()


def test_the_trainer_computes_on_the_gpu_it_was_given(daemon: GpuDaemon) -> None:
    job = daemon.ended(daemon.submit(name="on-gpu", **cuda_job(gpus=1)))
    assert job["state"] == "COMPLETED", daemon.logs(job["id"])
    seen = daemon.output(job)
    assert seen["device_count"] == 1
    assert seen["product_ok"], seen
    # The device CUDA computed on is the one trainqd assigned and recorded.
    [index] = job["attempts"][-1]["gpus"]
    uuid = {g["index"]: g["uuid"] for g in daemon.get("/v1/gpus").json()["gpus"]}[index]
    assert seen["uuid"] == uuid, (uuid, seen)
    assert uuid == nvml_uuids()[index]
    assert seen["env"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


def test_sampling_sees_the_jobs_memory_and_work(daemon: GpuDaemon) -> None:
    job_id = daemon.submit(name="busy", **cuda_job(seconds=40, gpus=1))

    def sampled() -> dict[str, Any] | None:
        job = daemon.job(job_id)
        assert job["state"] in {"PENDING", "RUNNING"}, daemon.logs(job_id)
        used = job.get("gpu_memory_used_mib") or 0
        util = job.get("gpu_util") or 0
        return job if job["state"] == "RUNNING" and used >= 1024 and util > 0 else None

    running = wait_until(sampled, 90, "a sample with the job's 2 GiB and its work")
    gpus = daemon.get("/v1/gpus").json()["gpus"]
    held = [g for g in gpus if g["job_id"] == job_id]
    assert [g["index"] for g in held] == running["gpus"]
    assert held[0]["memory_used_mib"] >= 1024
    with daemon.client() as c:
        assert c.post(f"/v1/jobs/{job_id}/stop", json={}).status_code in {200, 202}
    stopped = daemon.ended(job_id)
    assert stopped["state"] == "STOPPED"
    assert stopped["attempts"][-1]["gpu_memory_peak_mib"] >= 1024, stopped["attempts"]


def test_a_job_without_gpus_gets_no_cuda_device(daemon: GpuDaemon) -> None:
    job = daemon.ended(daemon.submit(name="no-gpu", **cuda_job(gpus=0)))
    assert job["state"] == "COMPLETED", daemon.logs(job["id"])
    seen = daemon.output(job)
    assert seen["device_count"] == 0, seen
    if os.geteuid() == 0:
        # A root trainqd confines the job to no GPU: the node itself is refused, so a trainer
        # that ignores CUDA_VISIBLE_DEVICES still cannot reach the card.
        assert seen["device_node"] == "refused", seen


def test_a_gpu_held_by_a_foreign_process_is_not_handed_out(daemon: GpuDaemon) -> None:
    if len(nvml_uuids()) != 1:
        pytest.skip("written for a machine of one GPU")
    with subprocess.Popen(
        [sys.executable, str(TRAINER), "hold"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as holder:
        assert holder.stdin is not None
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "ready"

        def foreign_seen() -> bool:
            gpus = daemon.get("/v1/gpus").json()["gpus"]
            return holder.pid in gpus[0]["foreign_pids"]

        wait_until(foreign_seen, 30, "trainqd to see the foreign CUDA process")
        job_id = daemon.submit(name="waits", **cuda_job(gpus=1))
        reason = wait_until(
            lambda: daemon.job(job_id).get("pending_reason"), 30, "the job's reason to wait"
        )
        assert daemon.job(job_id)["state"] == "PENDING", reason
        print(f"job {job_id} waits: {reason}")
        holder.stdin.close()
        holder.wait(30)
    job = daemon.ended(job_id)
    assert job["state"] == "COMPLETED", daemon.logs(job_id)
