"""The chaos soak's view of the processes of one trainqd (bench/chaos.py): which attempt
each belongs to, and which are its monitors and its monitor fork server.

A process belongs to attempt N of job J when it sits in that attempt's cgroup
(`job-J-N` under the trainqd's subtree), when its environment says so (TRAINQ_JOB_ID and
TRAINQ_ATTEMPT, with its SAGEMAKER_BASE_DIR under the state dir), or when its stderr is
that attempt's monitor.log (a monitor). Each test alone can be shed by a hostile job; the
soak's trainers shed none, so any one of them is enough to tie a process to its attempt.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

import psutil

from trainqd.monitor import cgroup
from trainqd.monitor.spawn import FORK_SERVER_FLAG

_MONITOR_LOG = re.compile(r"/jobs/(\d+)/attempts/(\d+)/monitor\.log$")


@dataclass(frozen=True)
class Proc:
    pid: int
    uid: int
    ppid: int
    cmdline: tuple[str, ...]
    job: int | None  # the attempt it belongs to, if any
    attempt: int | None
    monitor: bool  # its stderr is the attempt's monitor.log

    def describe(self) -> str:
        where = f"job {self.job} attempt {self.attempt}" if self.job is not None else "no job"
        kind = "monitor" if self.monitor else "process"
        return f"{kind} {self.pid} (uid {self.uid}, {where}): {' '.join(self.cmdline)[:120]}"


class ProcessView:
    """Scans /proc for what a trainqd with `state_dir` runs."""

    def __init__(self, state_dir: Path) -> None:
        self.jobs_dir = str(state_dir / "jobs")
        self._subtree = cgroup.subtree_name(self.jobs_dir)
        self._cgroup = re.compile(
            re.escape(self._subtree) + r"/" + cgroup.ATTEMPT_PREFIX + r"(\d+)-(\d+)"
        )

    def _by_cgroup(self, pid: int) -> tuple[int, int] | None:
        try:
            text = Path(f"/proc/{pid}/cgroup").read_text()
        except OSError:
            return None
        match = self._cgroup.search(text)
        return (int(match[1]), int(match[2])) if match else None

    def _by_env(self, proc: psutil.Process) -> tuple[int, int] | None:
        try:
            env = proc.environ()
        except (psutil.Error, OSError):
            return None
        if not env.get("SAGEMAKER_BASE_DIR", "").startswith(self.jobs_dir + "/"):
            return None
        try:
            return int(env["TRAINQ_JOB_ID"]), int(env["TRAINQ_ATTEMPT"])
        except (KeyError, ValueError):
            return None

    def _by_stderr(self, pid: int) -> tuple[int, int] | None:
        try:
            target = os.readlink(f"/proc/{pid}/fd/2")
        except OSError:
            return None
        if not target.startswith(self.jobs_dir + "/"):
            return None
        match = _MONITOR_LOG.search(target)
        return (int(match[1]), int(match[2])) if match else None

    def scan(self) -> list[Proc]:
        """Every live process (zombies left out) with the attempt it belongs to, if any."""
        found = []
        for proc in psutil.process_iter(["pid", "uids", "ppid", "cmdline", "status"]):
            info = proc.info
            if info["status"] == psutil.STATUS_ZOMBIE or info["uids"] is None:
                continue
            pid = int(info["pid"])
            stderr = self._by_stderr(pid)
            owner = stderr or self._by_cgroup(pid) or self._by_env(proc)
            found.append(
                Proc(
                    pid=pid,
                    uid=int(info["uids"].real),
                    ppid=int(info["ppid"] or 0),
                    cmdline=tuple(info["cmdline"] or ()),
                    job=owner[0] if owner else None,
                    attempt=owner[1] if owner else None,
                    monitor=stderr is not None,
                )
            )
        return found

    def monitors(self) -> list[Proc]:
        return [p for p in self.scan() if p.monitor]

    def fork_servers(self, trainqd_pid: int) -> list[Proc]:
        """The fork server: trainqd's child started with the fork-server flag (the monitors
        it forked carry the same command line, but each is its attempt's monitor)."""
        return [
            p
            for p in self.scan()
            if FORK_SERVER_FLAG in p.cmdline and p.ppid == trainqd_pid and not p.monitor
        ]

    def alive(self, pid: int) -> bool:
        with contextlib.suppress(psutil.Error):
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        return False
