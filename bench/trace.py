"""Replay a slice of the Alibaba GPU trace on trainq and on a real Slurm, in the same run.

    .venv/bin/python bench/trace.py            # 120 jobs, about 3 minutes per run
    .venv/bin/python bench/trace.py --quick    # 20 jobs, about 2 minutes in all

Needs root (the users are real accounts, made for the run and removed after it, and
scripts/slurm-local runs slurmctld and slurmd) and Debian's slurm-wlm and munge, and for
the multifactor runs slurmdbd and mariadb-server. The same jobs (trace_sample.py), at the
same moments after the first submit (trace_replay.py), go to `trainqd --gpus fake:8`
(trace_trainq.py: through its HTTP API, each user's from a process of that user) and to
`scripts/slurm-local` with 8 fake GPUs (trace_slurm.py: `sbatch --uid`), three ways.
Every job is `bench/trainers/trace.sh`, which sleeps for the task's scaled run and stamps
its start and end; the measures (trace_metrics.py) come from those stamps and the submit
times alone, the same way for both. bench/README.md defines each measure.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import trace_sample
from common import load, machine
from trace_metrics import (
    SIZES,
    busy_while_waiting,
    fairness,
    lost_to_preemption,
    makespan,
    size_of,
    waits_by_size,
)
from trace_replay import GPUS, Outcome
from trace_sample import Scaling, Task
from trace_slurm import SlurmMode, run_slurm
from trace_trainq import Mode, run_trainq, supported
from trace_users import accounts

TRAINER = Path(__file__).resolve().parent / "trainers" / "trace.sh"
# 120 tasks, their work / 200 (1-40 s), their arrivals / 800: about 3 minutes a run.
FULL = Scaling(
    start=10_740_000, count=120, duration_scale=200, arrival_scale=800, shortest=1, longest=40
)
QUICK = Scaling(
    start=10_740_000, count=20, duration_scale=1000, arrival_scale=5000, shortest=0.5, longest=4
)


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


def _listed(values: list[float]) -> str:
    """A few values each (a handful of preemptions in a run), else p50 / max."""
    if not values:
        return "none"
    if len(values) <= 6:
        return ", ".join(f"{v:.2f}" for v in sorted(values))
    return f"p50 {statistics.median(values):.2f}, max {max(values):.2f}"


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
    for span, pooled in ((window / 3, False), (window, False), (window * 2, False), (window, True)):
        fair = fairness(jobs, GPUS, span, pooled=pooled)
        index = "n/a" if math.isnan(fair.index) else f"{fair.index:.3f}"
        demand = ", demand pooled over the window" if pooled else ""
        out[f"Jain's index, {span:g} s windows{demand} (counted / all)"] = (
            f"{index} ({fair.windows} / {fair.of})"
        )
    if outcome.preemptions is None:
        out["jobs that preempted (victims)"] = "n/a"
        out["preempting submit to trainer running, s"] = "n/a"
        out["preemption to trainer running, s"] = "n/a"
        out["GPU-seconds lost to preemption"] = "n/a"
    else:
        made = outcome.preemptions
        victims = sum(p.victims for p in made)
        out["jobs that preempted (victims)"] = f"{len(made)} ({victims})"
        by_name = {t: j for t, j in zip(names, jobs, strict=True)}
        started = [by_name[p.job].start_after(p.decided) for p in made]
        from_submit = [s - by_name[p.job].submitted for s, p in zip(started, made, strict=True)]
        from_decision = [s - p.decided for s, p in zip(started, made, strict=True)]
        out["preempting submit to trainer running, s"] = _listed(from_submit)
        out["preemption to trainer running, s"] = _listed(from_decision)
        out["GPU-seconds lost to preemption"] = f"{lost_to_preemption(jobs):.2f}"
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
        **{
            f"{o.system} preemptions": [dataclasses.asdict(p) for p in o.preemptions]
            for o in outcomes
            if o.preemptions is not None
        },
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
        choices=[*(m.value for m in Mode), *(m.value for m in SlurmMode)],
        help="one run alone: trainq (fair share), share (with preemption between users),"
        " classes (the qos as classes), Slurm (first come, first served), slurm-mf"
        " (multifactor fair share), slurm-qos (the same, the qos as preempting QOS tiers)",
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
            runs: dict[str, Callable[..., Outcome]] = {}
            for mode in Mode:
                if supported(mode, scaling):
                    runs[mode] = functools.partial(run_trainq, mode=mode, minutes=minutes)
                else:
                    print(f"# this trainqd cannot run the {mode} mode: left out")
            for slurm_mode in SlurmMode:
                runs[slurm_mode] = functools.partial(run_slurm, mode=slurm_mode)
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
