"""One dispatch cut into its steps: from a job's trainer exiting to the next queued job's
trainer running, as each side marked it with TRAINQ_PROFILE=1 (trainqd's `profile` log
events, the monitors' `profile` lines in monitor.log; both cost nothing when it is off).

    .venv/bin/python bench/profile_dispatch.py [--jobs 60] [--hold 0] [--source TREE]

Run as root for a root trainqd (cgroup per attempt, device program, mount namespace, the
/opt/ml bind, the hosts file, the drop to the owner); as an ordinary user
(`runuser -u nobody -- ...`) for a personal daemon. Each row is the median time from the
step before it to its own mark; rows a dispatch did not pass through are left out of it.
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
from pathlib import Path

from common import STAMP_TRAINER, Daemon, Summary, load, machine, read_stamps, running_daemon
from common import stamps_by_job as by_name
from dispatch import drain_queue, iso_seconds

PROFILE_LINE = re.compile(r"^\S+Z profile (\d+\.\d+) (.*)$")
# The path between two jobs, in order: (whose mark, the step's name, what it covers).
# "prev"/"next": the monitor of the job ending/starting; "d:": trainqd, for that job.
STEPS = (
    ("prev", "trainer reaped", "the monitor's pidfd fires, waitid reaps the trainer"),
    ("prev", "tree killed", "what is left of the tree: SIGTERM, SIGKILL, reaped"),
    ("prev", "tree ended", "the attempt's cgroup: the monitor leaves, cgroup.kill, waits (root)"),
    ("prev", "exit record written", "relay drained, exit.json into its reserve: fsync x2"),
    ("prev", "exit", "the monitor's last words and _exit"),
    ("d:prev", "monitor exit seen", "trainqd's pidfd readable, its event loop wakes"),
    ("d:prev", "exit record read", "reap the monitor, read and check exit.json"),
    ("d:prev", "cgroup removed", "trainqd removes what is left of the cgroup (thread)"),
    ("d:prev", "end committed", "judge the end; one SQLite transaction (fsync)"),
    ("d:next", "launching", "GPU-use summary, 'attempt ended', planning the next start"),
    ("d:next", "attempt recorded", "the attempt begins: one SQLite transaction (fsync)"),
    ("d:next", "directories made", "the attempt's directories and records"),
    ("d:next", "launch built", "look_up and build_launch, env file"),
    ("next", "forked", "the launch memfd to the fork server, which forks; setsid, dup2"),
    ("next", "launch read", "the launch read and parsed"),
    ("next", "cgroup entered", "mkdir of the attempt's cgroup, the monitor moved in (root)"),
    ("next", "monitor info written", "monitor.json beside the stop file (not fsynced)"),
    ("next", "job view made", "mount namespace, /etc/hosts and /opt/ml binds"),
    ("next", "devices confined", "the eBPF device program loaded and attached"),
    ("next", "privileges dropped", "rlimit, setgroups/setgid/setuid to the owner"),
    ("next", "ml root prepared", "the ml root's directories and config files, as the owner"),
    ("next", "record space reserved", "the exit record's reserve written: fsync"),
    ("next", "outputs opened", "stdout, stderr, timeline; the relay's pipes"),
    ("next", "trainer spawned", "chdir, posix_spawn of the trainer"),
    ("stamp", "first stamp", "exec of bash, its start, its first stamp"),
)


def monitor_marks(daemon: Daemon, job_id: int) -> dict[str, float]:
    log = daemon.state_dir / "jobs" / str(job_id) / "attempts" / "1" / "monitor.log"
    marks = {}
    for line in log.read_text().splitlines():
        if (match := PROFILE_LINE.match(line)) is not None:
            marks[match[2]] = float(match[1])
    return marks


def daemon_marks(daemon: Daemon) -> dict[tuple[int, str], float]:
    marks = {}
    for event in daemon.log_events():
        if event.get("event") == "profile":
            marks[(event["job_id"], event["step"])] = iso_seconds(event["timestamp"])
    return marks


def profile(daemon: Daemon, ids: dict[str, int], stamps: Path) -> dict[str, list[float]]:
    """Per step, the time from the previous step's mark to its own, for every pair."""
    stamped = by_name(read_stamps(stamps))
    logged = daemon_marks(daemon)
    steps: dict[str, list[float]] = {name: [] for _, name, _ in STEPS}
    steps["gap"] = []
    for before, after in itertools.pairwise(sorted(ids)):
        prev_id, next_id = ids[before], ids[after]
        sources = {
            "prev": monitor_marks(daemon, prev_id),
            "next": monitor_marks(daemon, next_id),
            "d:prev": {s: t for (j, s), t in logged.items() if j == prev_id},
            "d:next": {s: t for (j, s), t in logged.items() if j == next_id},
            "stamp": {"first stamp": stamped[after]["start"]},
        }
        last = stamped[before]["end"]
        for whose, name, _ in STEPS:
            when = sources[whose].get(name)
            if when is None:
                continue
            steps[name].append(when - last)
            last = when
        steps["gap"].append(stamped[after]["start"] - stamped[before]["end"])
    return steps


def report(title: str, steps: dict[str, list[float]]) -> None:
    print(f"\n| {title} | p50 ms | mean ms | what |")
    print("|---|---|---|---|")
    total = 0.0
    for _, name, what in STEPS:
        if not steps[name]:
            continue
        s = Summary.of(steps[name])
        total += s.median
        print(f"| {name} | {s.median * 1e3:.2f} | {s.mean * 1e3:.2f} | {what} |")
    gap = Summary.of(steps["gap"])
    print(
        f"| **gap** (sum of the medians {total * 1e3:.2f}) | **{gap.median * 1e3:.2f}** | "
        f"{gap.mean * 1e3:.2f} | the trainer's last stamp -> the next one's first |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=60, help="jobs in the draining queue")
    parser.add_argument("--holds", default="0.25,0", help="seconds each job runs, per queue")
    parser.add_argument("--source", type=Path, help="run trainqd from this copy of the tree")
    args = parser.parse_args()
    os.environ["TRAINQ_PROFILE"] = "1"
    who = "root trainqd" if os.geteuid() == 0 else "personal trainqd"
    print(machine())
    print(load())
    results = []
    with running_daemon("fake:1", args.source) as daemon, daemon.client() as client:
        for n, hold in enumerate(float(h) for h in args.holds.split(",")):
            stamps = daemon.base / f"queue-{n}"
            ids = drain_queue(client, stamps, f"q{n}-", args.jobs, hold)
            results.append((hold, profile(daemon, ids, stamps)))
    for hold, steps in results:
        report(f"{who}, jobs of {hold:g} s ({args.jobs})", steps)
    print(load())
    assert STAMP_TRAINER.exists()


if __name__ == "__main__":
    main()
