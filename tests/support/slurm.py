"""What the Slurm tests share: the test's single-host Slurm (the repository's
`scripts/slurm-local`: slurmctld, slurmd and munge under a scratch directory, fake GPUs, its
own ports), a real trainqd handing its jobs to it, and where it keeps the Slurm job of each
attempt."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.daemon import Daemon, running_daemon
from tests.support.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
SLURM_LOCAL = REPO / "scripts" / "slurm-local"
GPUS = 2  # on each node
# Slurm nodes on the one host (slurm-local's NODES): partition main, the default, is the
# first alone, as a one-node Slurm; partition NODES_PARTITION is all of them.
NODES = 2
NODES_PARTITION = "nodes"
SLURM_PORTS = 5
START_TIMEOUT = 90


@dataclass(frozen=True)
class Slurm:
    base: Path
    env: dict[str, str]

    def run(self, *argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(argv),
            env=self.env,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def job_fields(self, job_id: str) -> dict[str, str]:
        """`scontrol show job` as a dict ({} once Slurm has forgotten the job)."""
        shown = self.run("scontrol", "show", "job", "-o", job_id)
        fields: dict[str, str] = {}
        for word in shown.stdout.split():
            key, sep, value = word.partition("=")
            if sep:
                fields.setdefault(key, value)
        return fields


def free_port_pair() -> int:
    """A port P with P..P+4 free: slurmctld, the first slurmd, slurm-local's accounting
    ports (unused here) and the second node's slurmd (P + 2 + 2)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port: int = s.getsockname()[1]
        if port + SLURM_PORTS > 65535:
            continue
        if all(_free(port + offset) for offset in range(1, SLURM_PORTS)):
            return port
    raise RuntimeError(f"no {SLURM_PORTS} free consecutive ports")


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


POLL = 0.2  # slurm_poll_seconds: Slurm's answers are followed this often


@contextlib.contextmanager
def slurm_trainqd(
    slurm: Slurm, env: dict[str, str] | None = None, **config: Any
) -> Iterator[Daemon]:
    """A real trainqd whose back end is the test's Slurm, with no GPUs of its own."""
    settings = {
        "backend": "slurm",
        "slurm_poll_seconds": POLL,
        "default_stop_grace_seconds": 5,
        **config,
    }
    env = {"SLURM_CONF": slurm.env["SLURM_CONF"], **(env or {})}
    with running_daemon(gpus="none", config=settings, env=env) as d:
        try:
            yield d
        finally:  # nothing a failed test handed over holds Slurm's GPUs for the next one
            handed = [
                json.loads(p.read_text())["slurm_job_id"]
                for p in d.state_dir.glob("jobs/*/attempts/*.slurm")
            ]
            if handed:
                slurm.run("scancel", *map(str, handed))


def slurm_job_of(daemon: Daemon, job_id: int, attempt: int = 1) -> str:
    """The Slurm job trainqd handed the attempt to, from its own record."""
    record = daemon.state_dir / "jobs" / str(job_id) / "attempts" / f"{attempt}.slurm"
    found: bool = wait_for(record.exists, timeout=10, interval=0.05, what="the hand-off to Slurm")
    assert found
    return str(json.loads(record.read_text())["slurm_job_id"])
