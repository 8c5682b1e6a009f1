"""Clean up after an attempt whose monitor vanished (DESIGN §5: no orphan survives a job).

Without its monitor, an attempt's processes are found by the variables every one of them
inherits (TRAINQ_JOB_DIR, TRAINQ_JOB_ID and TRAINQ_ATTEMPT in the initial environment, which
/proc keeps; the job's directory tells this daemon's job 1 from another daemon's on the same
host), and its container by the name trainqd gave it. Both are killed before the job is tried
again, so the retry never shares its GPUs with the attempt it replaces.
"""

from __future__ import annotations

import contextlib
import subprocess
import time

import psutil
import structlog

from trainqd.monitor.procfs import read_stat

log = structlog.get_logger("trainqd.leftovers")


def attempt_processes(ml_root: str, job_id: int, attempt: int) -> list[psutil.Process]:
    marks = {
        "TRAINQ_JOB_DIR": ml_root,
        "TRAINQ_JOB_ID": str(job_id),
        "TRAINQ_ATTEMPT": str(attempt),
    }
    found = []
    for proc in psutil.process_iter():
        try:
            env = proc.environ()
        except (psutil.Error, OSError):
            continue
        if all(env.get(k) == v for k, v in marks.items()):
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
    if container is not None:
        engine_path, name = container
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            subprocess.run(
                [engine_path, "rm", "--force", name],
                capture_output=True,
                timeout=60,
                check=False,
            )
    if procs:
        log.warning(
            "killed leftovers of a lost attempt",
            job_id=job_id,
            attempt=attempt,
            processes=len(procs),
        )
    return len(procs)


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
