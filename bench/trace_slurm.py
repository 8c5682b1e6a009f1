"""The trace benchmark's baselines: a real Slurm on this machine, started with the
repository's `scripts/slurm-local` (slurmctld, slurmd and munge under a scratch directory,
fake GPUs), jobs submitted with `sbatch` as their users (root may submit as anyone with
--uid). Three setups (SlurmMode): first come, first served (priority/basic); multifactor
fair share (slurm-local's accounting mode: MariaDB, slurmdbd, backfill every second); and
the same with the trace's qos as QOS tiers that preempt (PreemptMode=REQUEUE, a grace)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from common import poll_until
from trace_metrics import inferred_preemptions
from trace_replay import (
    GPUS,
    SLURM_CPUS,
    Outcome,
    finish_timeout,
    replay,
    schedule,
    stamp_dir,
    unfinished,
    wait_for_all,
)
from trace_sample import Scaling, Task
from trace_trainq import CLASS_OF_QOS, GRACE
from trace_users import Account

SLURM_LOCAL = Path(__file__).resolve().parents[1] / "scripts" / "slurm-local"
# trainq's classes as Slurm QOS tiers: besteffort may be preempted (low), latency may
# preempt it (high); the default class is Slurm's default QOS (normal).
QOS_OF_CLASS = {"besteffort": "low", "latency": "high"}
# A requeued job may start again cred_expire + 1 s after its end; 5 is Slurm's minimum.
CRED_EXPIRE = 5


class SlurmMode(StrEnum):
    FCFS = "Slurm"  # priority/basic: first come, first served
    MULTIFACTOR = "slurm-mf"  # multifactor fair share, one QOS
    QOS = "slurm-qos"  # multifactor fair share, the qos as preempting QOS tiers


@dataclass(frozen=True)
class SlurmSetup:
    label: str  # the system's name in the table
    accounting: bool
    preempts: bool


SLURM_SETUPS = {
    SlurmMode.FCFS: SlurmSetup("Slurm FCFS", accounting=False, preempts=False),
    SlurmMode.MULTIFACTOR: SlurmSetup("Slurm multifactor", accounting=True, preempts=False),
    SlurmMode.QOS: SlurmSetup("Slurm multifactor, QOS preemption", accounting=True, preempts=True),
}


def qos_of(task: Task) -> str:
    return QOS_OF_CLASS.get(CLASS_OF_QOS.get(task.qos, ""), "normal")


def _free_ports(count: int) -> int:
    """A port P with P .. P + count - 1 free (slurmctld, slurmd, slurmdbd, mysqld)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port + count > 65536:
            continue
        with contextlib.ExitStack() as held:
            try:
                for n in range(1, count):
                    s = held.enter_context(socket.socket())
                    s.bind(("127.0.0.1", port + n))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no {count} free consecutive ports")


class Slurm:
    def __init__(
        self, base: Path, gpus: int, cpus: int, accounting: dict[str, str] | None = None
    ) -> None:
        self.base = base
        self.tool_env = {
            **os.environ,
            "BASE": str(base),
            "GPUS": str(gpus),
            "CPUS": str(cpus),
            "PORT0": str(_free_ports(4 if accounting else 2)),
            **({"ACCOUNTING": "1", **accounting} if accounting else {}),
        }
        self.env = {**os.environ, "SLURM_CONF": str(base / "slurm.conf")}

    def _tool(self, action: str) -> None:
        done = subprocess.run(
            [str(SLURM_LOCAL), action],
            env=self.tool_env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"slurm-local {action} failed: {done.stdout}{done.stderr}")

    def start(self) -> None:
        self._tool("start")

    def submit(
        self,
        task: Task,
        account: Account,
        trainer: Path,
        stamps: Path,
        preempts: bool = False,
    ) -> float:
        """sbatch the task as `account`; when the submission began. `preempts`: in its QOS
        tier, told of a preemption's grace (the batch shell is the trainer, and B:TERM sends
        it the SIGTERM), with a place for its checkpoint as trainq gives one. `@0`: without
        it the same signal also comes 60 s before the time limit, i.e. at once for the
        trace's 1-minute jobs, which would then stop and be queued again for nothing."""
        env = ["--export=NONE"]
        if preempts:
            home = self.base / "jobs" / task.name
            (home / "checkpoints").mkdir(parents=True)
            for path in (home, home / "checkpoints"):
                os.chown(path, account.uid, account.gid)
            env = [
                f"--export=SAGEMAKER_BASE_DIR={home}",
                f"--qos={qos_of(task)}",
                "--signal=B:TERM@0",
            ]
        argv = [
            "sbatch",
            "--parsable",
            f"--uid={account.name}",
            f"--gid={account.gid}",
            f"--job-name={task.name}",
            f"--time={task.limit_minutes}",
            "--ntasks=1",
            "--cpus-per-task=1",
            "--output=/dev/null",
            "--chdir=/",
            *env,
            *([f"--gres=gpu:{task.gpus}"] if task.gpus else []),
            str(trainer),
            str(stamps),
            str(task.seconds),
            task.name,
        ]
        began = time.time()
        done = subprocess.run(argv, env=self.env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"sbatch {task.name}: {done.stderr.strip()}")
        return began

    def warm_up(self) -> None:
        """Run one job through first: just after it starts, Slurm takes seconds to schedule
        the first job it is given, and the replay should not measure that."""
        subprocess.run(
            ["sbatch", "--output=/dev/null", "--chdir=/", "--wrap=true"],
            env=self.env,
            capture_output=True,
            check=True,
        )
        poll_until(lambda: not self.queued(), timeout=60, interval=0.1, what="Slurm's first job")

    def queued(self) -> list[str]:
        """`JOBID STATE REASON` of every job Slurm still has."""
        done = subprocess.run(
            ["squeue", "-h", "-o", "%i %T %r"],
            env=self.env,
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout.split("\n")[:-1]

    def cancel_all(self) -> None:
        ids = [line.split()[0] for line in self.queued()]
        if ids:
            subprocess.run(["scancel", *ids], env=self.env, capture_output=True, check=False)

    def _pids(self) -> list[int]:
        pids = []
        for name in ("slurmctld", "slurmd", "slurmdbd", "mysqld", "munged"):
            with contextlib.suppress(FileNotFoundError, ValueError):
                pids.append(int((self.base / "run" / f"{name}.pid").read_text()))
        return pids

    def stop(self) -> None:
        """Stop the daemons and wait (bounded) until they are gone."""
        pids = self._pids()
        self._tool("stop")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in pids):
            time.sleep(0.1)


@contextlib.contextmanager
def running_slurm(
    base: Path, gpus: int, cpus: int, accounting: dict[str, str] | None = None
) -> Iterator[Slurm]:
    slurm = Slurm(base, gpus, cpus, accounting)
    try:
        slurm.start()
        slurm.warm_up()
        yield slurm
    finally:
        with contextlib.suppress(Exception):
            slurm.cancel_all()
        slurm.stop()


def slurm_trouble(slurm: Slurm, stamps: Path, tasks: list[Task]) -> str | None:
    if slurm.queued():
        return None
    # Nothing left in Slurm's queue: whatever has not stamped its end never will.
    left = unfinished(stamps, tasks)
    return f"Slurm has no job left, and {', '.join(left[:5])} never finished" if left else None


def accounting_for(mode: SlurmMode, users: list[Account], scaling: Scaling) -> dict[str, str]:
    """slurm-local's accounting knobs: every user shares one account equally; fair share's
    half-life of 7 days compressed as the trace is (Slurm counts it in whole minutes); the
    preemption grace is trainq's stop grace."""
    half_life = max(1, round(7 * 24 * 60 / scaling.duration_scale))
    return {
        "USERS": " ".join(a.name for a in users),
        "HALF_LIFE": str(half_life),
        "GRACE_TIME": str(round(GRACE)) if mode == SlurmMode.QOS else "0",
        "CRED_EXPIRE": str(CRED_EXPIRE),
    }


def run_slurm(
    tasks: list[Task],
    users: list[Account],
    base: Path,
    trainer: Path,
    scaling: Scaling,
    *,
    mode: SlurmMode = SlurmMode.FCFS,
) -> Outcome:
    setup = SLURM_SETUPS[mode]
    stamps = stamp_dir(base, mode.value)
    account = {a.name: a for a in users}
    accounting = accounting_for(mode, users, scaling) if setup.accounting else None
    with running_slurm(base / mode.value, GPUS, SLURM_CPUS, accounting) as slurm:
        submitted = replay(
            tasks,
            lambda t: slurm.submit(t, account[t.user], trainer, stamps, setup.preempts),
        )
        wait_for_all(
            stamps, tasks, lambda: slurm_trouble(slurm, stamps, tasks), finish_timeout(tasks)
        )
    jobs = schedule(tasks, submitted, stamps)
    preempted = None
    if setup.preempts:
        may = [qos_of(t) == "high" for t in tasks]
        preempted = inferred_preemptions([t.name for t in tasks], jobs, may)
    return Outcome(setup.label, jobs, preempted)
