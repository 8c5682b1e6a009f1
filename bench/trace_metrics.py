"""The trace benchmark's measures, computed from a finished schedule (pure functions).

A schedule is one `Job` per submitted job: its user, GPUs (0: a CPU job), when it was
submitted and the intervals its trainer ran (several when it was preempted and resumed),
all on one clock. `bench/README.md` (the trace section) defines each measure in words;
`tests/unit/test_trace_metrics.py` checks them on schedules worked out by hand.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from common import percentile

SIZES = ("1 GPU", "2-4 GPUs", "8 GPUs", "CPU")


@dataclass(frozen=True)
class Job:
    user: str
    gpus: int
    submitted: float
    runs: tuple[tuple[float, float], ...]  # (start, end) of each attempt's trainer
    work: float = 0.0  # seconds of work its task needs (what the runs add up to, unpreempted)

    @property
    def started(self) -> float:
        return self.runs[0][0]

    def start_after(self, t: float) -> float:
        """The first trainer start at or after `t` (a job preempted before it preempted
        others ran before it made room for itself)."""
        return min(start for start, _ in self.runs if start >= t)

    @property
    def ended(self) -> float:
        return self.runs[-1][1]

    @property
    def wait(self) -> float:
        """From the submit to the trainer's first start."""
        return self.started - self.submitted

    def running_at(self, t: float) -> bool:
        return any(start <= t < end for start, end in self.runs)

    def waiting_at(self, t: float) -> bool:
        """Submitted, not running and not yet done: queued first, or again after preemption."""
        return self.submitted <= t < self.ended and not self.running_at(t)

    def gpu_seconds_in(self, a: float, b: float) -> float:
        return self.gpus * sum(max(0.0, min(end, b) - max(start, a)) for start, end in self.runs)

    def alive_seconds_in(self, a: float, b: float) -> float:
        """How much of [a, b) the job was submitted and not yet done: wanting its GPUs."""
        return max(0.0, min(self.ended, b) - max(self.submitted, a))


def size_of(gpus: int) -> str:
    if gpus == 0:
        return "CPU"
    if gpus == 1:
        return "1 GPU"
    return "8 GPUs" if gpus >= 8 else "2-4 GPUs"


def makespan(jobs: Sequence[Job]) -> float:
    """From the first submit to the last trainer's end."""
    return max(j.ended for j in jobs) - min(j.submitted for j in jobs)


def _segments(
    jobs: Sequence[Job], a: float = -math.inf, b: float = math.inf
) -> list[tuple[float, float]]:
    """[a, b) cut at every moment when a job's state changes: within each piece every job is
    in one state throughout, so a state read at its midpoint holds for all of it."""
    changes = {j.submitted for j in jobs} | {t for j in jobs for run in j.runs for t in run}
    points = sorted({p for p in changes if a < p < b} | ({a, b} - {-math.inf, math.inf}))
    return list(itertools.pairwise(points))


def busy_while_waiting(jobs: Sequence[Job], gpus: int) -> float:
    """GPU-seconds used / GPU-seconds available, over the time when at least one GPU job
    waits (NaN if none ever waits)."""
    gpu_jobs = [j for j in jobs if j.gpus > 0]
    used = offered = 0.0
    for a, b in _segments(gpu_jobs):
        mid = (a + b) / 2
        if any(j.waiting_at(mid) for j in gpu_jobs):
            offered += gpus * (b - a)
            used += (b - a) * sum(j.gpus for j in gpu_jobs if j.running_at(mid))
    return used / offered if offered else math.nan


@dataclass(frozen=True)
class Waits:
    n: int
    mean: float
    p95: float


def waits_by_size(jobs: Iterable[Job]) -> dict[str, Waits]:
    """Mean and p95 (nearest rank) of the wait, for each size that occurs."""
    grouped: dict[str, list[float]] = {}
    for job in jobs:
        grouped.setdefault(size_of(job.gpus), []).append(job.wait)
    return {
        size: Waits(len(w), statistics.fmean(w), percentile(w, 95))
        for size in SIZES
        if (w := grouped.get(size))
    }


def jain(values: Sequence[float]) -> float:
    """Jain's index: (sum x)^2 / (n * sum x^2); 1 when all equal, 1/n when one has it all."""
    squares = sum(x * x for x in values)
    return sum(values) ** 2 / (len(values) * squares) if squares else 1.0


def water_fill(demands: dict[str, float], capacity: float) -> dict[str, float]:
    """Max-min fair shares of `capacity`: nobody gets more than they want, and what someone
    does not want is split equally among the others."""
    shares: dict[str, float] = {}
    left = capacity
    pending = sorted(demands, key=lambda u: demands[u])
    while pending:
        level = left / len(pending)
        user = pending[0]
        if demands[user] <= level:
            shares[user] = demands[user]
            left -= demands[user]
            pending.pop(0)
        else:
            for user in pending:
                shares[user] = level
            break
    return shares


@dataclass(frozen=True)
class Fairness:
    index: float  # mean over the windows counted; NaN if none
    windows: int  # windows with two or more users with backlog
    of: int  # windows in all


def window_fairness(
    jobs: Sequence[Job], a: float, b: float, gpus: int, *, pooled: bool = False
) -> float | None:
    """Jain's index over the users with backlog in [a, b) (a GPU job of theirs waited at
    some moment of it), of each one's GPU-seconds there divided by their fair share of the
    window's GPU-seconds. None with fewer than two such users.

    A user's fair share is, at each moment, the max-min share of the GPUs given what every
    user's submitted, unfinished jobs could use then, summed over the window: GPUs that
    only one user wanted for a while are theirs for that while. `pooled`: the window's
    demand is pooled instead (each user's GPU-seconds wanted anywhere in the window, shared
    out once), which counts those GPUs against that user as if others had wanted them."""
    gpu_jobs = [j for j in jobs if j.gpus > 0 and j.alive_seconds_in(a, b) > 0]
    pieces = _segments(gpu_jobs, a, b)
    backlog = {j.user for j in gpu_jobs for x, y in pieces if j.waiting_at((x + y) / 2)}
    if len(backlog) < 2:
        return None
    got: dict[str, float] = {}
    for job in gpu_jobs:
        got[job.user] = got.get(job.user, 0.0) + job.gpu_seconds_in(a, b)
    fair: dict[str, float] = {}
    if pooled:
        demand: dict[str, float] = {}
        for job in gpu_jobs:
            demand[job.user] = demand.get(job.user, 0.0) + job.gpus * job.alive_seconds_in(a, b)
        fair = water_fill(demand, gpus * (b - a))
    else:
        for x, y in pieces:
            wanted: dict[str, float] = {}
            for job in gpu_jobs:
                if job.alive_seconds_in(x, y) > 0:
                    wanted[job.user] = wanted.get(job.user, 0.0) + job.gpus
            for user, share in water_fill(wanted, gpus).items():
                fair[user] = fair.get(user, 0.0) + share * (y - x)
    return jain([got[u] / fair[u] for u in sorted(backlog)])


def fairness(jobs: Sequence[Job], gpus: int, window: float, *, pooled: bool = False) -> Fairness:
    """`window_fairness` over consecutive windows from the first submit to the last end."""
    start = min(j.submitted for j in jobs)
    count = max(1, math.ceil(makespan(jobs) / window))
    edges = [start + i * window for i in range(count + 1)]
    found = [window_fairness(jobs, a, b, gpus, pooled=pooled) for a, b in itertools.pairwise(edges)]
    counted = [f for f in found if f is not None]
    return Fairness(statistics.fmean(counted) if counted else math.nan, len(counted), count)


def lost_to_preemption(jobs: Iterable[Job]) -> float:
    """GPU-seconds that preempted jobs ran beyond their work: the work done since a victim's
    last checkpoint, done again after it resumed (and each restart's own start-up)."""
    return sum(
        j.gpus * max(0.0, sum(end - start for start, end in j.runs) - j.work)
        for j in jobs
        if len(j.runs) > 1
    )


@dataclass(frozen=True)
class Preemption:
    job: str  # the job that preempted
    decided: float  # when its first victim was stopped
    victims: int


def inferred_preemptions(
    names: Sequence[str], jobs: Sequence[Job], may_preempt: Sequence[bool]
) -> list[Preemption]:
    """Who preempted whom, for a system that does not say (Slurm): each stop of a victim's
    trainer before its work was done (every run but its last) is put down to the job that
    may preempt, was waiting then, and started first after it."""
    found: dict[str, Preemption] = {}
    for victim in jobs:
        for _, stopped in victim.runs[:-1]:
            waiting = [
                (job.start_after(stopped), name)
                for name, job, may in zip(names, jobs, may_preempt, strict=True)
                if may and job.gpus and job.waiting_at(stopped) and job.ended > stopped
                and any(start >= stopped for start, _ in job.runs)
            ]  # fmt: skip
            if not waiting:
                continue
            name = min(waiting)[1]
            earlier = found.get(name)
            found[name] = Preemption(
                name,
                min(stopped, earlier.decided) if earlier else stopped,
                (earlier.victims if earlier else 0) + 1,
            )
    return sorted(found.values(), key=lambda p: p.decided)
