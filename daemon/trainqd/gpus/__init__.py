"""GPU inventories: pick one from the `--gpus` setting (docs/architecture.md).

    auto                  NVML when it initialises and sees a GPU, else none (never fails)
    nvml                  NVML, or a one-line GpuBackendError saying why not
    none                  no GPUs: CPU jobs only
    fake:N                N simulated GPUs (1 to 64) laid out like a two-socket server
    fake:/path/gpus.json  simulated GPUs described by a file (see fake.py)

The NVML backend is imported when chosen, so a host without NVIDIA hardware never loads
pynvml.
"""

from __future__ import annotations

from pathlib import Path

from trainqd.gpus.base import (
    BackendKind,
    GpuBackend,
    GpuBackendError,
    GpuDevice,
    GpuSample,
    GpuUsage,
    NoGpuBackend,
)
from trainqd.gpus.fake import FakeGpuBackend

__all__ = [
    "BackendKind",
    "GpuBackend",
    "GpuBackendError",
    "GpuDevice",
    "GpuSample",
    "GpuUsage",
    "NoGpuBackend",
    "open_backend",
]

_EXPECTED = "expected auto, nvml, none, fake:N or fake:/path/to/gpus.json"


def open_backend(spec: str) -> GpuBackend:
    """The GPU backend `spec` names; GpuBackendError with one line when it cannot be had."""
    text = spec.strip()
    keyword = text.lower()
    if keyword == "none":
        return NoGpuBackend()
    if keyword == "auto":
        return _open_auto()
    if keyword == "nvml":
        return _open_nvml(spec)
    if keyword.startswith("fake:"):
        return _open_fake(spec, text[len("fake:") :])
    raise GpuBackendError(f"--gpus {spec!r}: {_EXPECTED}")


def _open_auto() -> GpuBackend:
    from trainqd.gpus.nvml import open_nvml  # noqa: PLC0415 (see the module docstring)

    try:
        backend = open_nvml()
    except GpuBackendError as exc:
        return NoGpuBackend(reason=exc.message)
    if not backend.devices():
        backend.close()
        return NoGpuBackend(reason="NVML sees no GPU on this host")
    return backend


def _open_nvml(spec: str) -> GpuBackend:
    from trainqd.gpus.nvml import open_nvml  # noqa: PLC0415 (see the module docstring)

    try:
        backend = open_nvml()
    except GpuBackendError as exc:
        raise GpuBackendError(f"--gpus {spec}: {exc.message}") from None
    if not backend.devices():
        problems = "; ".join(backend.unreadable.values()) or "it sees no GPU on this host"
        backend.close()
        raise GpuBackendError(f"--gpus {spec}: NVML has no usable GPU: {problems}")
    return backend


def _open_fake(spec: str, argument: str) -> GpuBackend:
    if "/" not in argument and not argument.endswith(".json") and not argument.isdigit():
        raise GpuBackendError(f"--gpus {spec!r}: {_EXPECTED}")
    try:
        if argument.isdigit():
            return FakeGpuBackend.with_count(int(argument))
        return FakeGpuBackend.from_file(Path(argument).expanduser())
    except GpuBackendError as exc:
        raise GpuBackendError(f"--gpus {spec}: {exc.message}") from None
