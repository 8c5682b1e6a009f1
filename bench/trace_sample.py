"""The jobs the trace benchmark replays: a contiguous slice of the Alibaba GPU trace
(Weng et al., "Beware of Fragmentation", USENIX ATC 2023), scaled down in time and shared
out between one heavy user and a few light ones (pure, apart from reading the file).

Only tasks that ran are taken (the trace's `Pending` ones have no scheduled time). A task's
work is its run in the trace (deletion - scheduled), divided by the duration scale and kept
within [shortest, longest]: the trace's tail runs for weeks. Arrivals keep the trace's
gaps between creation times, divided by the arrival scale: a larger factor than the
durations', since the trace comes from a cluster of thousands of GPUs and its arrival rate
would leave eight of them mostly idle.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, replace
from pathlib import Path

# The trace's first 400 tasks that ran from creation time 10,740,000 s on (bench/data/README.md).
TRACE = Path(__file__).resolve().parent / "data" / "alibaba-gpu-v2023-slice.csv"


@dataclass(frozen=True)
class Task:
    name: str  # the job's name in both systems
    pod: str  # the trace's task
    gpus: int  # 0: a CPU job; a fraction of a GPU asks for a whole one
    qos: str  # LS, BE, Burstable or Guaranteed
    arrival: float  # seconds after the first submit
    seconds: float  # how long its trainer works
    user: str = ""

    @property
    def limit(self) -> int:
        """The time limit its submitter gives, in seconds: the run and half again, plus 5 s
        (a user's estimate has room to spare; both schedulers' backfill plans with it)."""
        return math.ceil(self.seconds * 1.5) + 5

    @property
    def limit_minutes(self) -> int:
        """The limit as Slurm takes it: whole minutes, rounded up."""
        return max(1, math.ceil(self.limit / 60))


@dataclass(frozen=True)
class Scaling:
    start: int  # the trace's creation time from which tasks are taken
    count: int
    duration_scale: float
    arrival_scale: float
    shortest: float
    longest: float


def read(path: Path = TRACE) -> list[dict[str, str]]:
    """The tasks that ran, in creation order."""
    with path.open(newline="") as f:
        rows = [row for row in csv.DictReader(f) if row["scheduled_time"]]
    return sorted(rows, key=lambda row: (int(row["creation_time"]), row["name"]))


def sample(rows: list[dict[str, str]], scaling: Scaling) -> list[Task]:
    taken = [row for row in rows if int(row["creation_time"]) >= scaling.start][: scaling.count]
    if len(taken) < scaling.count:
        raise ValueError(f"the trace has only {len(taken)} tasks from {scaling.start}")
    first = int(taken[0]["creation_time"])
    tasks = []
    for i, row in enumerate(taken):
        ran = int(row["deletion_time"]) - int(row["scheduled_time"])
        seconds = min(max(ran / scaling.duration_scale, scaling.shortest), scaling.longest)
        tasks.append(
            Task(
                name=f"trace-{i:03d}",
                pod=row["name"],
                gpus=int(row["num_gpu"]),
                qos=row["qos"],
                arrival=(int(row["creation_time"]) - first) / scaling.arrival_scale,
                seconds=round(seconds, 3),
            )
        )
    return tasks


def assign_users(tasks: list[Task], heavy: str, light: list[str], share: float) -> list[Task]:
    """In arrival order, each GPU job goes to the heavy user while their part of the
    GPU-seconds so far is under `share`, else to the light user with the least so far; CPU
    jobs go the same way by their seconds. Deterministic: no seed to report."""
    work = {user: 0.0 for user in [heavy, *light]}
    cpu = dict.fromkeys(work, 0.0)
    out = []
    for task in tasks:
        tally = work if task.gpus else cpu
        size = task.seconds * max(task.gpus, 1)
        total = sum(tally.values()) + size
        if tally[heavy] + size <= share * total or tally[heavy] < share * (total - size):
            user = heavy
        else:
            user = min(light, key=lambda u: (tally[u], light.index(u)))
        tally[user] += size
        out.append(replace(task, user=user))
    return out


def gpu_work(tasks: list[Task]) -> dict[str, float]:
    """GPU-seconds submitted, by user."""
    work: dict[str, float] = {}
    for task in tasks:
        work[task.user] = work.get(task.user, 0.0) + task.gpus * task.seconds
    return work
