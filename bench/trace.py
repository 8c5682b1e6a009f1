"""Replay a slice of the Alibaba GPU trace on trainq and on a real Slurm, in the same run.

    .venv/bin/python bench/trace.py            # 120 jobs, about 3 minutes per system
    .venv/bin/python bench/trace.py --quick    # 20 jobs, under 40 s in all

Needs root (the users are real accounts, made for the run and removed after it, and
slurm-local runs slurmctld and slurmd) and Debian's slurm-wlm and munge. The same jobs, at
the same moments after the first submit, go to `trainqd --gpus fake:8` (through its HTTP
API, each user's from a process of that user) and to `slurm-local` with 8 fake GPUs (with
`sbatch --uid`). Every job is `bench/trainers/trace.sh`, which sleeps for the task's scaled
run and stamps its start and end; the measures (`trace_metrics.py`) come from those stamps
and the submit times alone, the same way for both. bench/README.md defines each measure.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import math
import os
import re
import shutil
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trace_sample
from common import Daemon, load, machine, poll_until, running_daemon
from trace_metrics import (
    SIZES,
    Job,
    busy_while_waiting,
    fairness,
    makespan,
    size_of,
    waits_by_size,
)
from trace_sample import Scaling, Task
from trace_slurm import Slurm, running_slurm
from trace_users import Account, Agent, accounts

GPUS = 8
# What slurm-local's node declares; a GPU job takes one of them in Slurm, so CPU jobs have
# 56 at least, which is what trainq gets as CPU slots (where GPU jobs take none).
SLURM_CPUS = 64
CPU_SLOTS = SLURM_CPUS - GPUS
TRAINER = Path(__file__).resolve().parent / "trainers" / "trace.sh"
# The stop grace of a preempted job: the trainer saves its checkpoint and exits at once.
GRACE = 2.0

FULL = Scaling(
    start=10_740_000, count=120, duration_scale=200, arrival_scale=800, shortest=1, longest=40
)
QUICK = Scaling(
    start=10_740_000, count=20, duration_scale=1000, arrival_scale=5000, shortest=0.5, longest=4
)


@dataclass(frozen=True)
class Preemption:
    job: str  # the job that preempted
    decided: float  # when trainq stopped its first victim
    victims: int


@dataclass(frozen=True)
class Outcome:
    system: str
    jobs: list[Job]  # in the tasks' order
    preemptions: list[Preemption] | None  # None: the system does not preempt


# -- the replay ----------------------------------------------------------------------------


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
        Job(t.user, t.gpus, submitted[t.name], tuple(read_runs(stamps / t.name)[0])) for t in tasks
    ]


def stamp_dir(base: Path, system: str) -> Path:
    path = base / f"stamps-{system}"
    path.mkdir()
    path.chmod(0o1777)  # every user's trainer writes its own file here
    return path


def finish_timeout(tasks: list[Task]) -> float:
    work = sum(max(t.gpus, 1) * t.seconds for t in tasks)
    return 120 + 3 * work / GPUS


# -- trainq --------------------------------------------------------------------------------


# What the classes and preemption need of trainqd's configuration.
SHARING_KEYS = ("classes", "preempt_after_seconds", "min_runtime_before_preemption_seconds")


def classes_supported() -> bool:
    from trainqd.config import Config

    return all(key in Config.model_fields for key in SHARING_KEYS)


# The trace's qos as trainq classes: best-effort work may be preempted, latency-sensitive
# and guaranteed work may preempt it, and goes first (a job preempts only a lower class's);
# Burstable stays in the default class, between the two. Within a class fair share orders
# the users.
CLASS_OF_QOS = {"BE": "besteffort", "LS": "latency", "Guaranteed": "latency"}
CLASSES = """
[classes.default]

[classes.besteffort]
weight = -1
preemptible = true

[classes.latency]
weight = 1
may_preempt = true
"""


def trainq_config(scaling: Scaling, classes: bool) -> dict[str, Any]:
    """trainqd's settings: the defaults that are spans of time, compressed as the trace is
    (fair share's half-life of 7 days, preemption after 300 s of waiting, never of an
    attempt younger than 600 s)."""
    config: dict[str, Any] = {
        "cpu_slots": CPU_SLOTS,
        "default_stop_grace_seconds": GRACE,
        "fair_share_half_life_days": 7 / scaling.duration_scale,
    }
    if classes:
        config["preempt_after_seconds"] = 300 / scaling.duration_scale
        config["min_runtime_before_preemption_seconds"] = 600 / scaling.duration_scale
    return config


def trainq_spec(
    task: Task, trainer: Path, stamps: Path, classes: bool, minutes: bool
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": task.name,
        "gpus": task.gpus,
        "command": ["/bin/bash", str(trainer), str(stamps), str(task.seconds), task.name],
        # `minutes`: the same limits as Slurm's, whole minutes (see --minute-limits).
        "max_runtime_seconds": task.limit_minutes * 60 if minutes else task.limit,
        "max_retries": 0,
    }
    if classes and task.qos in CLASS_OF_QOS:
        spec["class"] = CLASS_OF_QOS[task.qos]
    return spec


def trainq_trouble(daemon: Daemon) -> str | None:
    with daemon.client() as client:
        for state in ("FAILED", "STOPPED"):
            jobs = client.json("GET", f"/v1/jobs?state={state}&limit=1000")["jobs"]
            if jobs:
                job = jobs[0]
                return (
                    f"job {job['name']} is {state}: {job['failure_reason'] or job['stop_reason']}"
                )
    return None


def preemptions(daemon: Daemon) -> list[Preemption]:
    """Who preempted whom and when, from trainq's own record: the events of its state
    database (read-only), where each victim's stop names the job it made room for."""
    db = sqlite3.connect(f"file:{daemon.state_dir / 'trainq.db'}?mode=ro", uri=True)
    try:
        names = dict(db.execute("SELECT id, name FROM jobs").fetchall())
        stops = db.execute(
            "SELECT time, reason FROM events WHERE to_state = 'STOPPING' AND reason LIKE ?"
            " ORDER BY id",
            ("preempted by job %",),
        ).fetchall()
    finally:
        db.close()
    found: dict[str, Preemption] = {}
    for when, reason in stops:
        match = re.match(r"preempted by job (\d+)", reason)
        if match is None:
            raise RuntimeError(f"cannot read a preemption's event: {reason!r}")
        name = names[int(match[1])]
        earlier = found.get(name)
        found[name] = Preemption(
            name,
            min(when, earlier.decided) if earlier else when,
            (earlier.victims if earlier else 0) + 1,
        )
    return list(found.values())


def warm_up(daemon: Daemon) -> None:
    """Run one job through first, as Slurm's side does (the first launch sets up what later
    ones reuse, such as the monitor fork server's page cache)."""
    with daemon.client() as client:
        job = client.submit({"name": "warm-up", "command": ["/bin/true"]})

        def ended() -> bool:
            return bool(client.job(job["id"])["state"] == "COMPLETED")

        poll_until(ended, timeout=60, interval=0.05, what="trainq's first job")


def run_trainq(
    tasks: list[Task],
    users: list[Account],
    base: Path,
    trainer: Path,
    scaling: Scaling,
    *,
    classes: bool = False,
    minutes: bool = False,
) -> Outcome:
    """trainq with fair share alone (one class), or with the trace's qos as classes."""
    system = "trainq, qos classes" if classes else "trainq"
    system += ", minute limits" if minutes else ""
    stamps = stamp_dir(base, system.replace(", ", "-").replace(" ", "-"))
    config = trainq_config(scaling, classes)
    with running_daemon(f"fake:{GPUS}", tables=CLASSES if classes else "", **config) as daemon:
        warm_up(daemon)
        agents = {a.name: Agent(a, daemon.socket) for a in users}
        try:
            submitted = replay(
                tasks,
                lambda t: agents[t.user].submit(trainq_spec(t, trainer, stamps, classes, minutes))[
                    0
                ],
            )
            wait_for_all(stamps, tasks, lambda: trainq_trouble(daemon), finish_timeout(tasks))
            preempted = preemptions(daemon) if classes else None
        finally:
            for agent in agents.values():
                agent.close()
    return Outcome(system, schedule(tasks, submitted, stamps), preempted)


# -- Slurm ---------------------------------------------------------------------------------


def slurm_trouble(slurm: Slurm, stamps: Path, tasks: list[Task]) -> str | None:
    if slurm.queued():
        return None
    # Nothing left in Slurm's queue: whatever has not stamped its end never will.
    left = unfinished(stamps, tasks)
    return f"Slurm has no job left, and {', '.join(left[:5])} never finished" if left else None


def run_slurm(
    tasks: list[Task], users: list[Account], base: Path, trainer: Path, scaling: Scaling
) -> Outcome:
    stamps = stamp_dir(base, "slurm")
    account = {a.name: a for a in users}
    with running_slurm(base / "slurm", GPUS, SLURM_CPUS) as slurm:
        submitted = replay(tasks, lambda t: slurm.submit(t, account[t.user], trainer, stamps))
        wait_for_all(
            stamps, tasks, lambda: slurm_trouble(slurm, stamps, tasks), finish_timeout(tasks)
        )
    return Outcome("Slurm", schedule(tasks, submitted, stamps), None)


# -- the report ----------------------------------------------------------------------------


def describe(tasks: list[Task], scaling: Scaling) -> list[str]:
    work = trace_sample.gpu_work(tasks)
    total = sum(work.values())
    sizes: dict[str, int] = {}
    for task in tasks:
        sizes[size_of(task.gpus)] = sizes.get(size_of(task.gpus), 0) + 1
    qos: dict[str, int] = {}
    for task in tasks:
        qos[task.qos] = qos.get(task.qos, 0) + 1
    shares = ", ".join(f"{u} {w / total:.0%}" for u, w in work.items())
    return [
        f"sample: {len(tasks)} tasks from creation time {scaling.start} of the trace "
        f"({', '.join(f'{n} {s}' for s, n in sizes.items())}; qos "
        f"{', '.join(f'{q} {n}' for q, n in qos.items())})",
        f"durations / {scaling.duration_scale:g} within [{scaling.shortest:g}, "
        f"{scaling.longest:g}] s; arrival gaps / {scaling.arrival_scale:g}: arrivals over "
        f"{tasks[-1].arrival:.1f} s, {total:.0f} GPU-seconds of work "
        f"({total / GPUS:.1f} s of all {GPUS} GPUs)",
        f"GPU work by user: {shares}",
    ]


def _p50_max(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} / {max(values):.2f}" if values else "none"


def rows(outcome: Outcome, names: list[str], window: float, heavy: str) -> dict[str, str]:
    jobs = outcome.jobs
    out = {
        "makespan, s": f"{makespan(jobs):.1f}",
        "GPU-busy fraction while GPU work waits": f"{busy_while_waiting(jobs, GPUS):.3f}",
    }
    waits = waits_by_size(jobs)
    for size in SIZES:
        if size in waits:
            w = waits[size]
            out[f"wait {size} (n={w.n}), mean / p95 s"] = f"{w.mean:.1f} / {w.p95:.1f}"
    gpu_jobs = [j for j in jobs if j.gpus]
    heavy_waits = [j.wait for j in gpu_jobs if j.user == heavy]
    light_waits = [j.wait for j in gpu_jobs if j.user != heavy]
    out["mean wait of GPU jobs, heavy user / light users, s"] = (
        f"{statistics.fmean(heavy_waits):.1f} / {statistics.fmean(light_waits):.1f}"
    )
    for span in (window / 3, window, window * 2):
        fair = fairness(jobs, GPUS, span)
        index = "n/a" if math.isnan(fair.index) else f"{fair.index:.3f}"
        out[f"Jain's index, {span:g} s windows (counted / all)"] = (
            f"{index} ({fair.windows} / {fair.of})"
        )
    if outcome.preemptions is None:
        out["jobs that preempted (victims)"] = "n/a"
        out["preempting submit to trainer running, p50 / max s"] = "n/a"
        out["preemption to trainer running, p50 / max s"] = "n/a"
    else:
        made = outcome.preemptions
        victims = sum(p.victims for p in made)
        out["jobs that preempted (victims)"] = f"{len(made)} ({victims})"
        by_name = {t: j for t, j in zip(names, jobs, strict=True)}
        started = [by_name[p.job].started for p in made]
        from_submit = [s - by_name[p.job].submitted for s, p in zip(started, made, strict=True)]
        from_decision = [s - p.decided for s, p in zip(started, made, strict=True)]
        out["preempting submit to trainer running, p50 / max s"] = _p50_max(from_submit)
        out["preemption to trainer running, p50 / max s"] = _p50_max(from_decision)
    return out


def report(outcomes: list[Outcome], names: list[str], window: float, heavy: str) -> None:
    tables = [rows(o, names, window, heavy) for o in outcomes]
    print(f"| measure | {' | '.join(o.system for o in outcomes)} |")
    print("|---|" + "---:|" * len(outcomes))
    for key in tables[0]:
        print(f"| {key} | {' | '.join(t.get(key, '') for t in tables)} |")


def dump(path: Path, tasks: list[Task], outcomes: list[Outcome]) -> None:
    """Every job's task and, for each system, its submit time and runs (to check by hand)."""
    record = {
        "tasks": [dataclasses.asdict(t) for t in tasks],
        **{o.system: [dataclasses.asdict(j) for j in o.jobs] for o in outcomes},
        "trainq preemptions": [
            dataclasses.asdict(p) for o in outcomes for p in o.preemptions or []
        ],
    }
    path.write_text(json.dumps(record, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="20 jobs, under 40 s in all")
    parser.add_argument("--count", type=int, help="how many tasks of the trace")
    parser.add_argument("--window", type=float, help="the fairness window, seconds")
    parser.add_argument("--heavy-share", type=float, default=0.65)
    parser.add_argument(
        "--only",
        choices=["trainq", "classes", "Slurm"],
        help="one run alone: trainq (fair share), trainq with the qos as classes, Slurm",
    )
    parser.add_argument(
        "--minute-limits",
        action="store_true",
        help="give trainq Slurm's time limits (whole minutes) instead of the seconds",
    )
    parser.add_argument("--dump", type=Path, help="write each system's schedule here (JSON)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        parser.error("needs root: it makes users and runs slurm-local")
    scaling = QUICK if args.quick else FULL
    if args.count:
        scaling = dataclasses.replace(scaling, count=args.count)
    window = args.window or (6.0 if args.quick else 30.0)

    print(f"# {machine()}; {load()}")
    with accounts() as users:
        heavy, light = users[0].name, [u.name for u in users[1:]]
        tasks = trace_sample.assign_users(
            trace_sample.sample(trace_sample.read(), scaling), heavy, light, args.heavy_share
        )
        for line in describe(tasks, scaling):
            print(f"# {line}")
        base = Path(tempfile.mkdtemp(prefix="tqtrace", dir="/tmp"))
        try:
            base.chmod(0o755)  # the users' trainers reach the trainer and the stamps
            trainer = base / "trace.sh"
            shutil.copy(TRAINER, trainer)
            trainer.chmod(0o755)
            outcomes = []
            minutes = args.minute_limits
            runs: dict[str, Callable[..., Outcome]] = {
                "trainq": functools.partial(run_trainq, minutes=minutes)
            }
            if classes_supported():
                runs["classes"] = functools.partial(run_trainq, classes=True, minutes=minutes)
            else:
                print("# this trainqd has no classes: no run with them, no preemption")
            runs["Slurm"] = run_slurm
            for system, run in runs.items():
                if args.only in (None, system):
                    began = time.monotonic()
                    outcomes.append(run(tasks, users, base, trainer, scaling))
                    print(f"# {system}: {time.monotonic() - began:.0f} s; {load()}")
        finally:
            shutil.rmtree(base, ignore_errors=True)
    report(outcomes, [t.name for t in tasks], window, heavy)
    if args.dump:
        dump(args.dump, tasks, outcomes)


if __name__ == "__main__":
    main()
