"""The trace benchmark's baseline: a real Slurm on this machine, started with the shared
`slurm-local` tool (slurmctld, slurmd and munge under a scratch directory, fake GPUs,
sched/backfill, priority/basic: first come, first served), jobs submitted with `sbatch`
as their users (root may submit as anyone with --uid)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from common import poll_until
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
from trace_users import Account

SLURM_LOCAL = Path(__file__).resolve().parents[2] / "shared" / "tools" / "slurm-local"


def _free_port_pair() -> int:
    """A port P with P and P + 1 free (slurmctld's and slurmd's)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        with socket.socket() as s, contextlib.suppress(OSError):
            s.bind(("127.0.0.1", port + 1))
            return port
    raise RuntimeError("no two free consecutive ports")


class Slurm:
    def __init__(self, base: Path, gpus: int, cpus: int) -> None:
        self.base = base
        self.tool_env = {
            **os.environ,
            "BASE": str(base),
            "GPUS": str(gpus),
            "CPUS": str(cpus),
            "PORT0": str(_free_port_pair()),
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

    def submit(self, task: Task, account: Account, trainer: Path, stamps: Path) -> float:
        """sbatch the task as `account`; when the submission began."""
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
            "--export=NONE",
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
        for name in ("run/slurmctld.pid", "run/slurmd.pid", "munge/munged.pid"):
            with contextlib.suppress(FileNotFoundError, ValueError):
                pids.append(int((self.base / name).read_text()))
        return pids

    def stop(self) -> None:
        """Stop the daemons and wait (bounded) until they are gone."""
        pids = self._pids()
        self._tool("stop")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in pids):
            time.sleep(0.1)


@contextlib.contextmanager
def running_slurm(base: Path, gpus: int, cpus: int) -> Iterator[Slurm]:
    slurm = Slurm(base, gpus, cpus)
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
