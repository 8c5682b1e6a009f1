"""Each user's recent use of the workstation, decayed with a half-life, as fair share orders
the queue by it (planner.py) and `trainq users` shows it (docs/architecture.md, "Sharing").

Usage is slot-seconds: a GPU job's attempt adds its GPUs times the seconds it ran, a CPU
job's attempt its CPU slots (one per node) times them, each second weighted
2^(-age / half-life), so a GPU-hour used one half-life ago counts as half of one used now.
GPU and CPU-slot usage are kept apart, as the planner's two pools are.

The sums are kept in memory, per user, as of one reference time: moving the reference on
multiplies every sum by the same factor, and an ended attempt adds the integral of its
weighted seconds. trainqd seeds them at start-up from the attempts that ended in the last
SEED_HALF_LIVES half-lives (one query; older ones weigh under 0.1 % of their time), adds
each attempt as it ends, and counts running attempts up to now when asked, so nothing here
grows with the number of jobs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from trainq.core.states import JobState
from trainq.core.wire import UserShare

SEED_HALF_LIVES = 10
LN2 = math.log(2)


@dataclass(frozen=True)
class Used:
    """Slot-seconds of one attempt: `gpus` GPUs (0: `slots` CPU slots, one per node of a
    job of several CPU nodes) from `started` to `ended`."""

    uid: int
    user: str
    gpus: int
    started: float
    ended: float
    slots: int = 1

    @property
    def width(self) -> int:
        return self.gpus or max(1, self.slots)


@dataclass(frozen=True)
class Usage:
    """Decayed slot-seconds per uid as of `at`."""

    at: float
    gpu: dict[int, float]
    cpu: dict[int, float]
    names: dict[int, str]


class FairShare:
    def __init__(self, half_life_days: float) -> None:
        self.half_life = half_life_days * 86400.0
        self._at = 0.0
        self._gpu: dict[int, float] = {}
        self._cpu: dict[int, float] = {}
        self.names: dict[int, str] = {}

    @property
    def enabled(self) -> bool:
        return self.half_life > 0

    def seed_since(self, now: float) -> float:
        """The oldest attempt end worth reading at start-up."""
        return now - SEED_HALF_LIVES * self.half_life

    def _advance(self, to: float) -> None:
        if to <= self._at:
            return
        # Nothing is kept before the first reference time (sums are empty then).
        factor = self._decay(to - self._at) if self._at else 0.0
        for sums in (self._gpu, self._cpu):
            for uid in sums:
                sums[uid] *= factor
        self._at = to

    def _weighted(self, started: float, ended: float, at: float) -> float:
        """The integral of 2^(-(at - s) / half-life) over [started, ended], ended <= at."""
        if ended <= started:
            return 0.0
        scale = self.half_life / LN2
        return scale * (self._decay(at - ended) - self._decay(at - started))

    def _decay(self, age: float) -> float:
        """The weight of a second `age` seconds old: 2^(-age / half-life)."""
        return math.exp(-LN2 * age / self.half_life)

    def add(self, used: Used) -> None:
        """An ended attempt."""
        if not self.enabled:
            return
        self._advance(max(used.ended, self._at))
        self.names[used.uid] = used.user
        sums = self._gpu if used.gpus else self._cpu
        amount = used.width * self._weighted(used.started, used.ended, self._at)
        sums[used.uid] = sums.get(used.uid, 0.0) + amount

    def seed(self, ended: Iterable[Used], now: float) -> None:
        if not self.enabled:
            return
        self._advance(now)
        for used in ended:
            self.add(used)

    def usage(self, running: Sequence[Used], now: float) -> Usage:
        """Every user's usage at `now`, counting `running` attempts (ended = now) so far."""
        if not self.enabled:
            return Usage(now, {}, {}, dict(self.names))
        self._advance(now)
        gpu, cpu = dict(self._gpu), dict(self._cpu)
        names = dict(self.names)
        for used in running:
            names[used.uid] = used.user
            sums = gpu if used.gpus else cpu
            amount = used.width * self._weighted(used.started, min(used.ended, now), now)
            sums[used.uid] = sums.get(used.uid, 0.0) + amount
        return Usage(now, gpu, cpu, names)


@dataclass(frozen=True)
class Load:
    """A user's unfinished job, as `trainq users` counts it."""

    uid: int
    user: str
    state: JobState
    gpus: int


def user_shares(usage: Usage, jobs: Iterable[Load]) -> list[UserShare]:
    """Each user with usage or unfinished jobs: decayed GPU-hours and CPU-slot-hours, their
    share of all users' GPU-hours, and their running and waiting jobs and GPUs."""
    rows: dict[int, dict[str, int]] = {}
    names = dict(usage.names)
    for job in jobs:
        names[job.uid] = job.user
        row = rows.setdefault(job.uid, {"rj": 0, "rg": 0, "wj": 0, "wg": 0})
        if job.state == JobState.PENDING:
            row["wj"] += 1
            row["wg"] += job.gpus
        else:
            row["rj"] += 1
            row["rg"] += job.gpus
    total = sum(usage.gpu.values())
    shares = []
    for uid in sorted(set(rows) | set(usage.gpu) | set(usage.cpu), key=lambda u: names.get(u, "")):
        row = rows.get(uid, {"rj": 0, "rg": 0, "wj": 0, "wg": 0})
        gpu = usage.gpu.get(uid, 0.0)
        shares.append(
            UserShare(
                user=names.get(uid, str(uid)),
                uid=uid,
                gpu_hours=gpu / 3600.0,
                cpu_slot_hours=usage.cpu.get(uid, 0.0) / 3600.0,
                share=gpu / total if total > 0 else 0.0,
                running_jobs=row["rj"],
                running_gpus=row["rg"],
                waiting_jobs=row["wj"],
                waiting_gpus=row["wg"],
            )
        )
    return shares
