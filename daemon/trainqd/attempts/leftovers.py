"""Clean up after an attempt whose monitor vanished: no process outlives its job.

Without its monitor, an attempt's processes are found by its cgroup (monitor/cgroup.py),
which no process of the job can leave, whatever it did to its session, parentage or
environment. Where cgroups are not to be had, by the variables every one of them inherits
(TRAINQ_JOB_DIR, TRAINQ_JOB_ID and TRAINQ_ATTEMPT in the initial environment, which /proc
keeps; the job's directory tells this daemon's job 1 from another daemon's on the same
host): a process that cleared its environment and left the tree escapes that search, which
is why the cgroup comes first. Its container is found by the name trainqd gave it. All are
killed before the job is tried again, so the retry never shares its GPUs with the attempt it
replaces.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time

import psutil
import structlog

from trainqd.monitor import cgroup, enginewall, netns
from trainqd.monitor.container import remove_argv_of, run_bounded
from trainqd.monitor.mounts import release as release_mounts
from trainqd.monitor.procfs import read_stat

log = structlog.get_logger("trainqd.leftovers")

CGROUP_KILL_WAIT = 30.0
ENGINE_RM_TIMEOUT = 60.0


def end_attempt_cgroup(ml_root: str, job_id: int, attempt: int) -> int:
    """Kill whatever is left in an ended attempt's cgroup and remove it; how many processes
    were still there. A no-op where there is no such cgroup (no root, no v2 tree)."""
    try:
        path = cgroup.attempt_path(ml_root, job_id, attempt)
    except cgroup.Unavailable:
        return 0
    left = cgroup.members(path)
    if left:
        survivors = cgroup.kill(path, CGROUP_KILL_WAIT)
        if survivors:
            log.error(
                "processes of an ended attempt would not die",
                job_id=job_id,
                attempt=attempt,
                pids=survivors,
            )
    cgroup.remove(path)
    return len(left)


def attempt_processes(ml_root: str, job_id: int, attempt: int) -> list[psutil.Process]:
    marks = {
        "TRAINQ_JOB_ID": str(job_id),
        "TRAINQ_ATTEMPT": str(attempt),
    }
    # A job of several nodes: each node's processes name its own ml root (jobdir.py).
    nodes = os.path.join(os.path.dirname(ml_root), "nodes") + "/"
    found = []
    for proc in psutil.process_iter():
        try:
            env = proc.environ()
        except (psutil.Error, OSError):
            continue
        where = env.get("TRAINQ_JOB_DIR", "")
        ours = where == ml_root or (where.startswith(nodes) and "/" not in where[len(nodes) :])
        if ours and all(env.get(k) == v for k, v in marks.items()):
            found.append(proc)
    return found


def kill_attempt(ml_root: str, job_id: int, attempt: int, container: tuple[str, str] | None) -> int:
    """Kill what is left of an attempt, and remove its container (engine path, name) if it
    ran in one; returns how many processes were killed."""
    procs = attempt_processes(ml_root, job_id, attempt)
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    # Gone or a zombie: either way it holds no GPU and runs no code. (An orphan's zombie is
    # its new parent's to reap, which may never happen if that is a lax init.)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(_running(p.pid) for p in procs):
        time.sleep(0.01)
    attempt_dir = os.path.join(os.path.dirname(ml_root), "attempts", str(attempt))
    nodes = _node_names(attempt_dir)  # a job of several nodes: a container, binds each
    if container is not None and os.geteuid() == 0:
        # The binds its vanished monitor made for the engine (monitor/mounts.py).
        for where in [attempt_dir, *(os.path.join(attempt_dir, "nodes", n) for n in nodes)]:
            for problem in release_mounts(where):
                log.warning("stale mount of a lost attempt", job_id=job_id, problem=problem)
    if container is not None:
        engine_path, name = container
        names = [f"{name}-{node}" for node in nodes] if nodes else [name]
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            run_bounded(
                [*remove_argv_of(engine_path, names[0]), *names[1:]], None, ENGINE_RM_TIMEOUT
            )
        if nodes:  # and the gang's network of the engine's, named as its container would be
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                argv = [engine_path, "network", "rm", "--force", name]
                run_bounded(argv, None, ENGINE_RM_TIMEOUT)
            enginewall.remove(name)  # and the firewall that kept the host's users off it
    # Last, once the engine has stopped the container: the cgroup holds the engine's own
    # helpers (podman's conmon), without which it could not stop it cleanly.
    in_cgroup = end_attempt_cgroup(ml_root, job_id, attempt)
    if os.geteuid() == 0:  # a job of several nodes' bridge (monitor/netns.py), if left
        netns.remove(netns.bridge_name(cgroup.jobs_dir_of(ml_root), job_id, attempt))
    if procs or in_cgroup:
        log.warning(
            "killed leftovers of a lost attempt",
            job_id=job_id,
            attempt=attempt,
            processes=len(procs) + in_cgroup,
        )
    return len(procs) + in_cgroup


def _node_names(attempt_dir: str) -> list[str]:
    """The nodes of an attempt of a job of several nodes (jobdir.py), else none."""
    try:
        return sorted(n for n in os.listdir(os.path.join(attempt_dir, "nodes")) if n.isascii())
    except OSError:
        return []


def _running(pid: int) -> bool:
    stat = read_stat(pid)
    return stat is not None and stat.alive


def job_of_process(pid: int, jobs_dir: str) -> int | None:
    """The job of this daemon (its jobs under `jobs_dir`) a process belongs to, by the
    variables it inherited."""
    try:
        env = psutil.Process(pid).environ()
    except (psutil.Error, OSError):
        return None
    value, where = env.get("TRAINQ_JOB_ID", ""), env.get("TRAINQ_JOB_DIR", "")
    if not value.isdigit() or not where.startswith(jobs_dir.rstrip("/") + "/"):
        return None
    return int(value)
