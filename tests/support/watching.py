"""Simulated GPUs driven by a test: their file (trainqd/gpus/fake.py's format), rewritten at
once, and a trainqd whose GPUs report utilization, memory and power from it, sampled often:
what the tests of GPU use, idle jobs, metrics, reports and `top` start from."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.support.daemon import Daemon, scratch_dir, supervised
from trainqd.gpus.fake import FakeGpuBackend

SAMPLE_SECONDS = 0.2


def write_gpu_file(path: Path, document: Mapping[str, Any]) -> None:
    """Replace the simulated GPUs' file at once, as an operator's tool should: the reader
    never sees half a file."""
    staged = path.with_suffix(".tmp")
    staged.write_text(json.dumps(document))
    staged.replace(path)


def write_readings(path: Path, readings: Sequence[Mapping[str, float]]) -> None:
    """Give each simulated GPU its readings (`utilization`, `memory_used_mib`, ...)."""
    write_gpu_file(path, {"gpus": readings})


def gpus_in_use(backend: FakeGpuBackend) -> dict[int, frozenset[int]]:
    """The pids the file declares on each GPU, of the GPUs someone else uses."""
    return {usage.index: usage.pids for usage in backend.usage() if usage.pids}


@contextlib.contextmanager
def watched_daemon(
    readings: Sequence[Mapping[str, float]], **config: Any
) -> Iterator[tuple[Daemon, Path]]:
    base = scratch_dir()
    gpus_file = base / "gpus.json"
    write_readings(gpus_file, readings)
    settings = {"gpu_sample_seconds": SAMPLE_SECONDS, "default_stop_grace_seconds": 5, **config}
    with supervised(Daemon(base, gpus=f"fake:{gpus_file}", config=settings), remove=base) as d:
        yield d, gpus_file
