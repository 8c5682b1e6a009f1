"""What `trainq wait` and `submit --wait` show while they wait, on a terminal only.

Each state change of the job becomes a line on stderr (`job 7: PENDING -> RUNNING (attempt
1)`), and a live line below them says where the job is now: its place in the queue and why it
waits, then its runtime and GPU use, read again every couple of seconds. Output that is not a
terminal (scripts, pipes, CI) gets none of it: only the one line at the end, as before.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from trainq.core.errors import TrainqError
from trainq.humanize import job_runtime
from trainq.inert import inert

if TYPE_CHECKING:
    from trainq.client.api import Api
    from trainq.context import Context

REFRESH_SECONDS = 2.0
_CLEAR_LINE = "\r\x1b[K"


def live_line(job: Mapping[str, Any], queue: list[Mapping[str, Any]], now: datetime) -> str:
    """The job's situation in one line."""
    state = job.get("state")
    if state == "PENDING":
        order = [j["id"] for j in queue]
        place = "queued"
        if job["id"] in order:
            place = f"{order.index(job['id']) + 1} of {len(order)} in the queue"
        return f"job {job['id']} {place}: {job.get('pending_reason') or 'queued'}"
    use = ""
    if job.get("gpu_util") is not None:
        use = f", GPUs {job['gpu_util']:.0f}%"
        if job.get("gpu_memory_used_mib") is not None:
            use += f" {job['gpu_memory_used_mib'] / 1024:.1f} GiB"
        if job.get("gpu_idle_since"):
            use += " (idle)"
    return f"job {job['id']} {state}, {job_runtime(job, now)}{use}"


class Progress:
    """The lines on a terminal; every method is a no-op when stderr is not one."""

    def __init__(self, ctx: Context, client: Api, job_id: int) -> None:
        self.ctx, self.client, self.job_id = ctx, client, job_id
        self.enabled = _is_tty(ctx.stderr)
        self._lock = threading.Lock()
        self._live = ""
        self._done = threading.Event()
        if self.enabled:
            threading.Thread(target=self._refresh, daemon=True).start()

    def event(self, event: Mapping[str, Any]) -> None:
        """A state change (or an idle flag) of the job, as a lasting line."""
        if not self.enabled or event.get("from_state") is None:
            return
        before, after, reason = event.get("from_state"), event.get("to_state"), event.get("reason")
        change = f"{before} -> {after}" if before != after else str(after)
        self._write(f"job {self.job_id}: {change}" + (f" ({reason})" if reason else ""), True)

    def close(self) -> None:
        self._done.set()
        if self.enabled:
            with self._lock:
                if self._live:
                    self.ctx.stderr.write(_CLEAR_LINE)
                    self.ctx.stderr.flush()
                self._live = ""

    def _write(self, line: str, lasting: bool) -> None:
        with self._lock:
            if self._done.is_set():
                return
            stream = self.ctx.stderr
            line = inert(line)
            stream.write(_CLEAR_LINE + (f"trainq: {line}\n" if lasting else line))
            if lasting and self._live:
                stream.write(self._live)  # the live line stays below the lasting ones
            if not lasting:
                self._live = line
            stream.flush()

    def _refresh(self) -> None:
        delay = 0.0
        while not self._done.wait(delay):
            delay = REFRESH_SECONDS
            try:
                job = self.client.get_job(self.job_id)
                queue: list[Mapping[str, Any]] = []
                if job.get("state") == "PENDING":
                    listed = self.client.all_jobs(state="PENDING")
                    queue = sorted(listed, key=lambda j: (-j["priority"], j["id"]))
            except TrainqError:
                continue  # the wait itself reports a lost daemon
            width = _columns(self.ctx.stderr) - 1
            self._write(live_line(job, queue, datetime.now(UTC))[:width], False)


def _is_tty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _columns(stream: Any) -> int:
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (OSError, AttributeError, ValueError):
        return 80
