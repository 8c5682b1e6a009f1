"""A trainqd whose simulated GPUs report utilization, memory and power from a file the test
rewrites, sampled often: what the tests of GPU use, idle jobs, metrics, reports and `top`
start from."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.support.daemon import Daemon, scratch_dir, supervised

SAMPLE_SECONDS = 0.2


def write_readings(path: Path, readings: Sequence[Mapping[str, float]]) -> None:
    """Give each simulated GPU its readings (`utilization`, `memory_used_mib`, ...)."""
    staged = path.with_suffix(".tmp")
    staged.write_text(json.dumps({"gpus": readings}))
    staged.replace(path)  # the daemon never reads a half-written file


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
