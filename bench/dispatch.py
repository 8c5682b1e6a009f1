"""Dispatch gap (one job's trainer exits -> the next queued job's trainer runs) and
submit-to-start on an idle daemon, from the trainers' own clocks, against a plain Python
loop starting the same trainer and against task-spooler (`tsp`) running it.

    .venv/bin/python bench/dispatch.py [--jobs 150] [--holds 0.25,0] [--idle 40]

The trainer is bench/trainers/stamp.sh: bash appending `$EPOCHREALTIME` as its first and its
last act (bash is up in ~1-2 ms; a `python3 -S -I` trainer would add ~10 ms of its own to
every number), running HOLD seconds in between. The daemon has one fake GPU and every job
asks for it, so each job waits for the previous one.

- gap: a long job holds the GPU while `--jobs` jobs are queued, then it is stopped and the
  queue drains by itself, with no request arriving meanwhile; gap = start(n+1) - end(n).
  Once per HOLD in `--holds`: jobs that run a while (the usual case: whatever trainqd does
  in the background after a start is done by the time the job ends) and jobs that end at
  once (a burst of tiny jobs: the next start competes with the aftermath of the last).
  Baseline: `subprocess.run` of the same trainer in a loop, gap measured the same way (half
  the runs before the first queue drains, half after the last, so drift hits both).
- tsp (Debian's task-spooler: a single-user queue, no confinement), in the same run: a
  server of its own with one slot, the same jobs queued behind a 0.5 s holder, the gap
  measured the same way; and `tsp` called on an idle server -> the first stamp.
- submit-to-start: on an idle daemon, the clock just before POST /v1/jobs is sent -> the
  trainer's first stamp. Submissions arrive one every `--idle-period` seconds, each after
  the previous job completed. Baseline: the clock just before `subprocess.run` -> the stamp.

Each gap is also cut into its parts from the logs: the monitor's (monitor.log, ms stamps)
and trainqd's (its JSON log, us stamps); see `GAP_PARTS`. trainqd logs 'started' only once
its bookkeeping after the handover is done (and the next spare monitor is forked), often
after the trainer is already running: that span is shown beside the parts, not among them.
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import shutil
import subprocess
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from common import (
    STAMP_TRAINER,
    Client,
    Daemon,
    Summary,
    count_lines,
    hold_the_gpu,
    load,
    machine,
    poll_until,
    ratio,
    read_stamps,
    running_daemon,
    stamps_by_job,
)

TSP = shutil.which("tsp") or "tsp"  # Debian's task-spooler (apt-get install task-spooler)
MONITOR_LINE = re.compile(r"^(\S+Z) (.*)$")
# The parts of a gap, in order; each runs from the previous point to its own.
GAP_PARTS = (
    ("reaped", "monitor reaps the trainer (monitor.log 'trainer exited')"),
    ("recorded", "monitor ends the tree, writes exit.json ('exit record')"),
    ("settled", "monitor exits, trainqd settles the attempt ('attempt ended')"),
    ("launched", "trainqd plans, hands the next monitor its launch, which spawns the trainer"),
    ("stamped", "the trainer's exec and bash's start, to its first stamp"),
)


def iso_seconds(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def monitor_times(daemon: Daemon, job_id: int) -> dict[str, float]:
    """When the monitor of the job's first attempt said what, from its monitor.log."""
    log = daemon.state_dir / "jobs" / str(job_id) / "attempts" / "1" / "monitor.log"
    said: dict[str, float] = {}
    for line in log.read_text().splitlines():
        match = MONITOR_LINE.match(line)
        if match is None:
            continue
        when, what = iso_seconds(match[1]), match[2]
        for prefix, key in (
            ("trainer started", "launched"),
            ("trainer exited", "reaped"),
            ("exit record", "recorded"),
        ):
            if what.startswith(prefix):
                said[key] = when
    return said


def daemon_times(daemon: Daemon) -> dict[tuple[int, str], float]:
    """(job id, 'spawned' | 'settled') -> when trainqd logged it."""
    times: dict[tuple[int, str], float] = {}
    for event in daemon.log_events():
        key = {"started": "spawned", "attempt ended": "settled"}.get(event.get("event", ""))
        if key and "job_id" in event:
            times[(event["job_id"], key)] = iso_seconds(event["timestamp"])
    return times


def stamp_job(name: str, stamps: Path, hold: float = 0) -> dict[str, object]:
    return {"name": name, "gpus": 1, "command": [str(STAMP_TRAINER), str(stamps), str(hold)]}


# -- the baseline ----------------------------------------------------------------------------


def baseline_loop(stamps: Path, prefix: str, runs: int) -> tuple[list[float], list[float]]:
    """Gaps between back-to-back runs, and each run's call -> first stamp."""
    called: dict[str, float] = {}
    for n in range(runs):
        name = f"{prefix}{n:04d}"
        called[name] = time.time()
        subprocess.run([str(STAMP_TRAINER), str(stamps), "0", name], check=True)
    by_job = stamps_by_job(read_stamps(stamps))
    names = sorted(called)
    gaps = [by_job[b]["start"] - by_job[a]["end"] for a, b in itertools.pairwise(names)]
    starts = [by_job[name]["start"] - called[name] for name in names]
    return gaps, starts


# -- the second baseline: task-spooler -------------------------------------------------------


class TaskSpooler:
    """A `tsp` server of its own (socket and output files in `home`), one slot: Debian's
    task-spooler, a single-user queue with no confinement, measured the same way."""

    def __init__(self, home: Path) -> None:
        home.mkdir(exist_ok=True)
        self.env = {**os.environ, "TS_SOCKET": str(home / "socket"), "TMPDIR": str(home)}
        self.env.update(TS_SLOTS="1", TS_MAXFINISHED="100000")
        self.tsp("-S", "1")

    def tsp(self, *args: str) -> str:
        done = subprocess.run([TSP, *args], env=self.env, capture_output=True, check=True)
        return done.stdout.decode().strip()

    def submit(self, stamps: Path, hold: float, name: str) -> str:
        return self.tsp("-n", str(STAMP_TRAINER), str(stamps), f"{hold:g}", name)

    def close(self) -> None:
        subprocess.run([TSP, "-K"], env=self.env, capture_output=True, check=False)


def tsp_gaps(
    spooler: TaskSpooler, stamps: Path, prefix: str, jobs: int, hold: float
) -> list[float]:
    """The same drain as trainq's: jobs queued behind a holder, run back to back."""
    spooler.tsp("-n", "/bin/sleep", "0.5")
    names = [f"{prefix}{n:04d}" for n in range(jobs)]
    for name in names:
        spooler.submit(stamps, hold, name)
    limit = 30 + jobs * (2.0 + hold)
    poll_until(lambda: count_lines(stamps) >= 2 * jobs, limit, 0.2, "tsp's queue to drain")
    by_job = stamps_by_job(read_stamps(stamps))
    return [by_job[b]["start"] - by_job[a]["end"] for a, b in itertools.pairwise(names)]


def tsp_starts(spooler: TaskSpooler, stamps: Path, runs: int, period: float) -> list[float]:
    """`tsp` called -> the first stamp, one job at a time on an idle server."""
    sent: dict[str, float] = {}
    next_at = time.monotonic()
    for n in range(runs):
        time.sleep(max(0.0, next_at - time.monotonic()))  # the arrival schedule
        next_at = time.monotonic() + period
        name = f"t{n:04d}"
        sent[name] = time.time()
        spooler.submit(stamps, 0, name)
        done = 2 * (n + 1)

        def stamped(done: int = done) -> bool:
            return count_lines(stamps) >= done

        poll_until(stamped, timeout=30, interval=0.01, what=f"tsp's job {name}")
    by_job = stamps_by_job(read_stamps(stamps))
    return [by_job[name]["start"] - sent[name] for name in sent]


# -- the gap ---------------------------------------------------------------------------------


def drain_queue(
    client: Client, stamps: Path, prefix: str, jobs: int, hold: float
) -> dict[str, int]:
    """Queue `jobs` stamping jobs behind a GPU holder, stop it, wait for the queue to drain;
    the name -> job id of each."""
    holder = hold_the_gpu(client)
    ids = {}
    for n in range(jobs):
        name = f"{prefix}{n:04d}"
        ids[name] = int(client.submit(stamp_job(name, stamps, hold))["id"])
    client.stop(holder)
    last = ids[max(ids)]

    def drained() -> bool:
        return count_lines(stamps) >= 2 * jobs and client.job(last)["state"] == "COMPLETED"

    limit = 30 + jobs * (2.0 + hold)
    poll_until(drained, timeout=limit, interval=0.2, what="the queue to drain")
    return ids


def gap_parts(daemon: Daemon, ids: dict[str, int], stamps: Path) -> dict[str, list[float]]:
    """For each consecutive pair, the gap and its parts (seconds), keyed by GAP_PARTS."""
    by_job = stamps_by_job(read_stamps(stamps))
    logged = daemon_times(daemon)
    parts: dict[str, list[float]] = {"gap": [], "bookkeeping": []}
    parts.update({key: [] for key, _ in GAP_PARTS})
    names = sorted(ids)
    for before, after in itertools.pairwise(names):
        ended, started = by_job[before]["end"], by_job[after]["start"]
        first, second = monitor_times(daemon, ids[before]), monitor_times(daemon, ids[after])
        settled = logged[(ids[before], "settled")]
        points = [ended, first["reaped"], first["recorded"], settled, second["launched"], started]
        parts["gap"].append(started - ended)
        parts["bookkeeping"].append(logged[(ids[after], "spawned")] - settled)
        for (key, _), (a, b) in zip(GAP_PARTS, itertools.pairwise(points), strict=True):
            parts[key].append(b - a)
    return parts


# -- submit to start ---------------------------------------------------------------------------


def idle_starts(
    daemon: Daemon, client: Client, stamps: Path, runs: int, period: float
) -> dict[str, list[float]]:
    """POST -> first stamp, one job at a time on an idle daemon, with its parts."""
    out: dict[str, list[float]] = {"total": [], "answered": [], "spawned": [], "launched": []}
    submitted = []
    sent: dict[str, float] = {}
    answered: dict[str, float] = {}
    next_at = time.monotonic()
    for n in range(runs):
        # The arrival schedule, not a wait for something: one submission per period.
        time.sleep(max(0.0, next_at - time.monotonic()))
        next_at = time.monotonic() + period
        name = f"i{n:04d}"
        sent[name] = time.time()
        job_id = int(client.submit(stamp_job(name, stamps))["id"])
        answered[name] = time.time()
        submitted.append((name, job_id))
        done = 2 * (n + 1)

        def finished(job_id: int = job_id, done: int = done) -> bool:
            return count_lines(stamps) >= done and client.job(job_id)["state"] == "COMPLETED"

        poll_until(finished, timeout=30, interval=0.01, what=f"job {name} to complete")
    by_job = stamps_by_job(read_stamps(stamps))
    logged = daemon_times(daemon)
    for name, job_id in submitted:
        spawned = logged[(job_id, "spawned")]
        out["total"].append(by_job[name]["start"] - sent[name])
        out["answered"].append(answered[name] - sent[name])
        out["spawned"].append(spawned - sent[name])
        out["launched"].append(monitor_times(daemon, job_id)["launched"] - spawned)
    return out


# -- the report --------------------------------------------------------------------------------


def row(label: str, values: Sequence[float], *baselines: Summary) -> str:
    s = Summary.of(values)
    versus = " | ".join(ratio(s.median, b.median) for b in baselines) or " |"
    return f"| {label} | {s.median * 1e3:.2f} | {s.p99 * 1e3:.2f} | {s.mean * 1e3:.2f} | {versus} |"


HEADER = "| p50 ms | p99 ms | mean ms | vs subprocess.run | vs tsp |\n|---|---|---|---|---|---|"


def gap_table(
    hold: float, jobs: int, parts: dict[str, list[float]], base: Summary, tsp: Summary
) -> None:
    gaps = parts["gap"]
    quarter = len(gaps) // 4
    print(f"\n| dispatch gap, jobs running {hold:g} s {HEADER}")
    print(row(f"trainq, {jobs} jobs draining", gaps, base, tsp))
    print(row(f"&nbsp; first quarter (~{jobs * 7 // 8} pending)", gaps[:quarter], base, tsp))
    print(row(f"&nbsp; last quarter (~{jobs // 8} pending)", gaps[-quarter:], base, tsp))
    for key, what in GAP_PARTS:
        print(row(f"&nbsp; {key}: {what}", parts[key]))
    beside = "(beside: 'attempt ended' -> 'started', all of trainqd's start work)"
    print(row(beside, parts["bookkeeping"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=150, help="jobs in each draining queue")
    parser.add_argument("--holds", default="0.25,0", help="seconds each job runs, per queue")
    parser.add_argument("--idle", type=int, default=40, help="submit-to-start runs")
    parser.add_argument("--idle-period", type=float, default=0.5, help="seconds between them")
    parser.add_argument("--source", type=Path, help="run trainqd from this copy of the tree")
    args = parser.parse_args()
    if shutil.which("tsp") is None:
        parser.error("no tsp on the PATH: apt-get install task-spooler (the second baseline)")
    holds = [float(h) for h in args.holds.split(",")]
    print(machine())
    print(load())
    print("trainqd as", "root (every confinement on)" if os.geteuid() == 0 else "a personal daemon")
    with running_daemon("fake:1", args.source) as daemon, daemon.client() as client:
        work = daemon.base
        spooler = TaskSpooler(work / "tsp")
        try:
            base_gaps, base_starts = baseline_loop(work / "base-a", "a", args.jobs // 2)
            tsp_drained = {
                hold: tsp_gaps(spooler, work / f"tsp-{n}", f"t{n}-", args.jobs, hold)
                for n, hold in enumerate(holds)
            }
            drained = []
            for n, hold in enumerate(holds):
                stamps = work / f"queue-{n}"
                ids = drain_queue(client, stamps, f"q{n}-", args.jobs, hold)
                drained.append((hold, ids, stamps))
            more_gaps, more_starts = baseline_loop(work / "base-b", "b", args.jobs // 2)
            tsp_idle = tsp_starts(spooler, work / "tsp-idle", args.idle, args.idle_period)
            idle = idle_starts(daemon, client, work / "idle", args.idle, args.idle_period)
        finally:
            spooler.close()
        parts = [(hold, gap_parts(daemon, ids, stamps)) for hold, ids, stamps in drained]
    base_gaps += more_gaps
    base_starts += more_starts
    gap_base = Summary.of(base_gaps)
    print("\n| baseline | p50 ms | p99 ms | mean ms | | |")
    print("|---|---|---|---|---|---|")
    print(row("gap: subprocess.run of the trainer, back to back", base_gaps))
    print(row("start: subprocess.run called -> first stamp", base_starts))
    for hold, gaps in tsp_drained.items():
        print(row(f"gap: tsp, {args.jobs} jobs of {hold:g} s queued, one slot", gaps))
    print(row("start: `tsp` called on an idle server -> first stamp", tsp_idle))
    for hold, hold_parts in parts:
        gap_table(hold, args.jobs, hold_parts, gap_base, Summary.of(tsp_drained[hold]))
    print(f"\n| submit-to-start, idle daemon {HEADER}")
    start_bases = Summary.of(base_starts), Summary.of(tsp_idle)
    print(row("POST /v1/jobs sent -> first stamp", idle["total"], *start_bases))
    print(row("&nbsp; POST answered (201 received)", idle["answered"]))
    print(row("&nbsp; POST sent -> trainqd logs 'started'", idle["spawned"]))
    print(row("&nbsp; 'started' -> monitor logs 'trainer started'", idle["launched"]))
    print(load())


if __name__ == "__main__":
    main()
