"""`trainq top`: a full-screen live view of the workstation: its GPUs (utilization, memory,
who holds each, idle flags), the running jobs (owner, runtime, GPU use) and the queue (order,
and why each job waits).

The jobs are read again when the event stream (GET /v1/events) says something changed, not
in a loop; GPU readings, which change without events, are refreshed every few seconds with
the cheap GET /v1/gpus and GET /v1/jobs of unfinished jobs. Keys are read from the terminal in
cbreak mode: `q` (or Ctrl-C) quits. The layout fits an 80-column terminal.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import sys
import termios
import threading
import time
import tty
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from trainq.client.api import Api
from trainq.client.transport import iter_lines
from trainq.context import Context
from trainq.core.errors import TrainqError
from trainq.humanize import job_runtime, shorten
from trainq.inert import inert_data

GPU_REFRESH_SECONDS = 2.0
KEY_POLL_SECONDS = 0.1
BAR_CELLS = 10


@contextlib.contextmanager
def cbreak(fd: int) -> Iterator[None]:
    """Keys arrive one at a time and unechoed; the terminal is put back however we leave."""
    if not os.isatty(fd):
        yield
        return
    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def _bar(percent: float | None) -> Text:
    if percent is None:
        return Text("?".ljust(BAR_CELLS + 5), style="dim")
    filled = round(max(0.0, min(100.0, percent)) / 100 * BAR_CELLS)
    style = "red" if percent < 5 else "yellow" if percent < 50 else "green"
    return Text.assemble(
        ("█" * filled, style), ("·" * (BAR_CELLS - filled), "dim"), f" {percent:3.0f}%"
    )


def _gib(mib: float | None) -> str:
    return "-" if mib is None else f"{mib / 1024:.1f}G"


def _idle(job: Mapping[str, Any] | None) -> Text:
    if job is not None and job.get("gpu_idle_since"):
        return Text("IDLE", style="bold red")
    return Text("")


def gpu_table(gpus: Sequence[Mapping[str, Any]], jobs: Mapping[int, Mapping[str, Any]]) -> Table:
    table = Table(title="GPUs", title_justify="left", box=None, pad_edge=False, expand=False)
    for name in ("GPU", "UTIL", "MEMORY", "POWER", "JOB", "USER", ""):
        table.add_column(name, no_wrap=True)
    for gpu in gpus:
        job = jobs.get(gpu["job_id"]) if gpu.get("job_id") is not None else None
        if job is not None:
            holder, user = str(job["id"]), job["owner"]["user"]
        elif gpu.get("foreign_pids"):
            holder, user = "other", f"pid {gpu['foreign_pids'][0]}"
        else:
            holder, user = "free", ""
        power = gpu.get("power_watts")
        table.add_row(
            str(gpu["index"]),
            _bar(gpu.get("utilization_percent")),
            f"{_gib(gpu.get('memory_used_mib'))}/{_gib(gpu['memory_total_mib'])}",
            "-" if power is None else f"{power:.0f}W",
            holder,
            shorten(user, 12),
            _idle(job),
        )
    return table


def running_table(jobs: Sequence[Mapping[str, Any]], now: datetime) -> Table:
    table = Table(title="Running", title_justify="left", box=None, pad_edge=False)
    for name in ("ID", "USER", "NAME", "GPUS", "RUNTIME", "UTIL", "MEM", ""):
        table.add_column(name, no_wrap=True)
    for job in jobs:
        table.add_row(
            str(job["id"]),
            shorten(job["owner"]["user"], 10),
            shorten(job["name"], 16),
            ",".join(map(str, job["gpus"])) or "cpu",
            job_runtime(job, now),
            _bar(job.get("gpu_util")) if job["gpus"] else Text("-"),
            _gib(job.get("gpu_memory_used_mib")),
            _idle(job),
        )
    return table


def queue_table(jobs: Sequence[Mapping[str, Any]], width: int) -> Table:
    table = Table(title="Queue", title_justify="left", box=None, pad_edge=False)
    for name in ("#", "ID", "USER", "GPUS", "PRIO"):
        table.add_column(name, no_wrap=True)
    table.add_column(
        "WAITING FOR", no_wrap=True, overflow="ellipsis", max_width=max(16, width - 40)
    )
    for position, job in enumerate(jobs, 1):
        table.add_row(
            str(position),
            str(job["id"]),
            shorten(job["owner"]["user"], 10),
            str(job["spec"]["gpus"]),
            str(job["priority"]),
            job.get("pending_reason") or "queued",
        )
    return table


def screen(
    gpus: Sequence[Mapping[str, Any]], jobs: Sequence[Mapping[str, Any]], now: datetime, width: int
) -> Group:
    """The whole view from the daemon's answers."""
    by_id = {job["id"]: job for job in jobs}
    running = [j for j in jobs if j["state"] in ("RUNNING", "STOPPING")]
    # The order the queue is served in: priority, then submission.
    queued = sorted(
        (j for j in jobs if j["state"] == "PENDING"), key=lambda j: (-j["priority"], j["id"])
    )
    idle = sum(1 for j in running if j.get("gpu_idle_since"))
    held = sum(1 for g in gpus if g.get("job_id") is not None)
    head = Text.assemble(
        ("trainq top", "bold"),
        f"  {now.astimezone():%H:%M:%S}  GPUs {held}/{len(gpus)} held  "
        f"running {len(running)}  queued {len(queued)}",
        (f"  idle {idle}" if idle else "", "bold red"),
        ("   q quits", "dim"),
    )
    return Group(
        head, gpu_table(gpus, by_id), running_table(running, now), queue_table(queued, width)
    )


class _Changes:
    """Set by the event-stream reader whenever trainqd reports a change."""

    def __init__(self) -> None:
        self.flag = threading.Event()
        self.problem: str | None = None

    def follow(self, client: Api) -> None:
        """Read the event stream until the process ends; a lost stream is retried."""
        while True:
            try:
                with client.get_events() as chunks:
                    for _ in iter_lines(chunks):
                        self.flag.set()
                self.problem = "trainqd closed the event stream"
            except TrainqError as exc:
                self.problem = exc.message
            self.flag.set()
            time.sleep(1.0)


def _fetch(client: Api) -> tuple[list[Any], list[Any]]:
    gpus = client.get_gpus()
    # The user's text drawn inert and never read as markup (`trainq.inert`).
    return inert_data(gpus["gpus"]), inert_data(client.all_jobs())


def _key_pressed(fd: int, timeout: float) -> bytes:
    ready, _, _ = select.select([fd], [], [], timeout)
    if not ready:
        return b""
    return os.read(fd, 32) or b"q"  # end of input: nobody is left to press q


def run(ctx: Context, args: argparse.Namespace) -> int:
    client = ctx.client()
    gpus, jobs = _fetch(client)  # an unreachable daemon is one line and exit 7, before drawing
    changes = _Changes()
    threading.Thread(target=changes.follow, args=(ctx.client(),), daemon=True).start()
    console = Console(markup=False, emoji=False, highlight=False)
    stdin = sys.stdin.fileno()
    with cbreak(stdin), Live(console=console, screen=True, auto_refresh=False) as live:
        next_refresh = 0.0
        while True:
            now = time.monotonic()
            if changes.flag.is_set() or now >= next_refresh:
                changes.flag.clear()
                with contextlib.suppress(TrainqError):  # shown stale until trainqd answers
                    gpus, jobs = _fetch(client)
                next_refresh = now + GPU_REFRESH_SECONDS
                view = screen(gpus, jobs, datetime.now(UTC), console.width)
                live.update(view, refresh=True)
            if b"q" in _key_pressed(stdin, KEY_POLL_SECONDS).lower():
                return 0
