"""The trace benchmark on trainq: `trainqd --gpus fake:8` started as the other benchmarks
start it (`common.running_daemon`), each user's jobs submitted through the HTTP API by a
process of that user: with fair share alone, with fair share and preemption between users
(`Mode.SHARE`), or with the trace's qos as classes."""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from common import Daemon, poll_until, running_daemon
from trace_metrics import Preemption
from trace_replay import (
    CPU_SLOTS,
    GPUS,
    Outcome,
    finish_timeout,
    replay,
    schedule,
    stamp_dir,
    wait_for_all,
)
from trace_sample import Scaling, Task
from trace_users import Account, Agent

# The stop grace of a preempted job: the trainer saves its checkpoint and exits at once.
GRACE = 2.0


class Mode(StrEnum):
    FAIR = "trainq"  # fair share alone, one class, nothing preempted
    SHARE = "share"  # fair share, and a user over their share yields GPUs to one under it
    CLASSES = "classes"  # the trace's qos as classes, lower ones preempted


# The trace's qos as trainq classes: best-effort work may be preempted, latency-sensitive
# and guaranteed work may preempt it, and goes first (a job preempts only a lower class's);
# Burstable stays in the default class, between the two. Within a class fair share orders
# the users.
CLASS_OF_QOS = {"BE": "besteffort", "LS": "latency", "Guaranteed": "latency"}


@dataclass(frozen=True)
class Setup:
    label: str  # the system's name in the table
    tables: str = ""  # trainqd's [classes.*] tables
    preempts: bool = False  # preemption's spans of time, compressed as the trace is


SETUPS = {
    Mode.FAIR: Setup("trainq"),
    # One class whose jobs may preempt each other, for fair share only.
    Mode.SHARE: Setup(
        "trainq, share preemption",
        """
[classes.default]
preemptible = true
may_preempt = true
""",
        preempts=True,
    ),
    Mode.CLASSES: Setup(
        "trainq, qos classes",
        """
[classes.default]

[classes.besteffort]
weight = -1
preemptible = true

[classes.latency]
weight = 1
may_preempt = true
""",
        preempts=True,
    ),
}


def trainq_config(scaling: Scaling, mode: Mode) -> dict[str, Any]:
    """trainqd's settings: the defaults that are spans of time, compressed as the trace is
    (fair share's half-life of 7 days, preemption after 300 s of waiting, never of an
    attempt younger than 600 s)."""
    config: dict[str, Any] = {
        "cpu_slots": CPU_SLOTS,
        "default_stop_grace_seconds": GRACE,
        "fair_share_half_life_days": 7 / scaling.duration_scale,
    }
    if SETUPS[mode].preempts:
        config["preempt_after_seconds"] = 300 / scaling.duration_scale
        config["min_runtime_before_preemption_seconds"] = 600 / scaling.duration_scale
    if mode == Mode.SHARE:
        config["preempt_for_fair_share"] = True
    return config


def supported(mode: Mode, scaling: Scaling) -> bool:
    """Whether this trainqd knows every setting the mode uses (an older tree may not)."""
    from trainqd.config import Config

    keys = set(trainq_config(scaling, mode)) | ({"classes"} if SETUPS[mode].tables else set())
    return keys <= set(Config.model_fields)


def trainq_spec(
    task: Task, trainer: Path, stamps: Path, mode: Mode, minutes: bool
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": task.name,
        "gpus": task.gpus,
        "command": ["/bin/bash", str(trainer), str(stamps), str(task.seconds), task.name],
        # `minutes`: the same limits as Slurm's, whole minutes (see --minute-limits).
        "max_runtime_seconds": task.limit_minutes * 60 if minutes else task.limit,
        "max_retries": 0,
    }
    if mode == Mode.CLASSES and task.qos in CLASS_OF_QOS:
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
    mode: Mode = Mode.FAIR,
    minutes: bool = False,
) -> Outcome:
    """trainq in one of its sharing modes (Mode)."""
    system = SETUPS[mode].label + (", minute limits" if minutes else "")
    stamps = stamp_dir(base, system.replace(", ", "-").replace(" ", "-"))
    config = trainq_config(scaling, mode)
    with running_daemon(f"fake:{GPUS}", tables=SETUPS[mode].tables, **config) as daemon:
        warm_up(daemon)
        agents = {a.name: Agent(a, daemon.socket) for a in users}
        try:
            submitted = replay(
                tasks,
                lambda t: agents[t.user].submit(trainq_spec(t, trainer, stamps, mode, minutes))[0],
            )
            wait_for_all(stamps, tasks, lambda: trainq_trouble(daemon), finish_timeout(tasks))
            preempted = preemptions(daemon) if mode != Mode.FAIR else None
        finally:
            for agent in agents.values():
                agent.close()
    return Outcome(system, schedule(tasks, submitted, stamps), preempted)
