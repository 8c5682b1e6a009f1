"""The trace benchmark's replay, the same for every system: submit each task at its moment,
wait until every trainer has stamped the end of its work, and read the schedule back from
the stamps (`bench/trainers/trace.sh`)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from common import poll_until
from trace_metrics import Job, Preemption
from trace_sample import Task

GPUS = 8
# What slurm-local's node declares; a GPU job takes one of them in Slurm, so CPU jobs have
# 56 at least, which is what trainq gets as CPU slots (where GPU jobs take none).
SLURM_CPUS = 64
CPU_SLOTS = SLURM_CPUS - GPUS


@dataclass(frozen=True)
class Outcome:
    system: str
    jobs: list[Job]  # in the tasks' order
    preemptions: list[Preemption] | None  # None: the system does not preempt


def replay(tasks: list[Task], submit: Callable[[Task], float]) -> dict[str, float]:
    """Submit each task at its arrival after the first; when each submission began."""
    began = time.monotonic()
    at = {}
    for task in tasks:
        # Pacing the arrivals, not polling for a condition.
        time.sleep(max(0.0, began + task.arrival - time.monotonic()))
        at[task.name] = submit(task)
    return at


def read_runs(path: Path) -> tuple[list[tuple[float, float]], bool]:
    """The trainer's runs from its stamp file, and whether its work is done."""
    runs: list[tuple[float, float]] = []
    start = None
    done = False
    with contextlib.suppress(FileNotFoundError):
        for line in path.read_text().splitlines():
            if len(line.split()) != 2:
                continue  # a stamp being written: whole at the next read
            what, micros = line.split()
            when = int(micros) / 1e6
            if what == "start":
                start = when
            elif start is not None:
                runs.append((start, when))
                start, done = None, what == "end"
    return runs, done


def unfinished(stamps: Path, tasks: list[Task]) -> list[str]:
    return [t.name for t in tasks if not read_runs(stamps / t.name)[1]]


def wait_for_all(
    stamps: Path, tasks: list[Task], trouble: Callable[[], str | None], timeout: float
) -> None:
    def finished() -> bool:
        left = unfinished(stamps, tasks)
        if left and (problem := trouble()):
            raise RuntimeError(f"{len(left)} jobs will not finish: {problem}")
        return not left

    poll_until(finished, timeout=timeout, interval=0.5, what="every job to finish")


def schedule(tasks: list[Task], submitted: dict[str, float], stamps: Path) -> list[Job]:
    return [
        Job(t.user, t.gpus, submitted[t.name], tuple(read_runs(stamps / t.name)[0]), t.seconds)
        for t in tasks
    ]


def stamp_dir(base: Path, system: str) -> Path:
    path = base / f"stamps-{system}"
    path.mkdir()
    path.chmod(0o1777)  # every user's trainer writes its own file here
    return path


def finish_timeout(tasks: list[Task]) -> float:
    work = sum(max(t.gpus, 1) * t.seconds for t in tasks)
    return 120 + 3 * work / GPUS
