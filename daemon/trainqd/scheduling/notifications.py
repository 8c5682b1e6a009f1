"""Telling a job's owner that it ended: its own `--notify` command and, where the
administrator set a `mail_command`, mail for `--mail END,FAIL` (Slurm's --mail-type).

A task follows the event rows (as the metrics do) and, for each job that reached an end
state, starts the commands beside everything else: a notification never delays or changes
the job's end. Each runs as the job's owner (`notify_child.py` drops to them before it
execs, as the path check and the monitor do; never as root for anyone else), in its own
session, for at most `notify_timeout_seconds` (then its session is killed), its output
discarded; a failure is logged and nothing more. At most `PARALLEL` run at once, so that a
sweep ending together forks a few at a time. Jobs that ended while trainqd was down are not
announced twice: the follower starts from the last event stored at start-up.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess

import anyio
import structlog

from trainq.core.errors import NotFound
from trainq.core.states import TERMINAL
from trainqd.access.identity import account
from trainqd.children import module_child
from trainqd.config import Config
from trainqd.scheduling.events import ChangeNotifier
from trainqd.scheduling.notify_child import REQUEST
from trainqd.scheduling.outcomes import ended_by_time_limit
from trainqd.store import Store
from trainqd.store.rows import JobRow

log = structlog.get_logger("trainqd.notifications")

PARALLEL = 4
_CHILD = module_child("scheduling.notify_child")
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


def job_facts(job: JobRow, exit_code: int | None) -> dict[str, str]:
    """The TRAINQ_JOB_* variables a notification gets."""
    state = "TIMEOUT" if ended_by_time_limit(job) else str(job.state)
    return {
        "TRAINQ_JOB_ID": str(job.id),
        "TRAINQ_JOB_NAME": job.display_name,
        "TRAINQ_JOB_STATE": state,
        "TRAINQ_JOB_EXIT_STATUS": "" if exit_code is None else str(exit_code),
        "TRAINQ_JOB_REASON": job.failure_reason or job.stop_reason or "",
    }


def mail_message(job: JobRow, facts: dict[str, str]) -> str:
    state, reason = facts["TRAINQ_JOB_STATE"], facts["TRAINQ_JOB_REASON"]
    lines = [
        f"To: {job.owner.user}",
        f"Subject: trainq job {job.id} ({job.display_name}) {state}",
        "",
        f"trainq job {job.id} ({job.display_name}) of {job.owner.user} ended {state}.",
    ]
    if facts["TRAINQ_JOB_EXIT_STATUS"]:
        lines.append(f"Exit status: {facts['TRAINQ_JOB_EXIT_STATUS']}")
    if reason:
        lines.append(f"Reason: {reason}")
    return "\n".join(lines) + "\n"


def wants_mail(job: JobRow) -> bool:
    return "END" in job.spec.mail or ("FAIL" in job.spec.mail and str(job.state) == "FAILED")


class Notifications:
    def __init__(self, store: Store, notifier: ChangeNotifier, config: Config) -> None:
        self._store = store
        self._notifier = notifier
        self._mail_command = config.mail_command
        self._timeout = config.notify_timeout_seconds
        self._last_event = store.last_event_id()
        self._limiter = anyio.CapacityLimiter(PARALLEL)

    async def run(self) -> None:
        """Follow the events for as long as trainqd runs."""
        async with anyio.create_task_group() as tg:
            while True:
                changed = self._notifier.changed()
                while self._follow(tg):
                    await anyio.lowlevel.checkpoint()
                await changed.wait()

    def _follow(self, tg: anyio.abc.TaskGroup) -> bool:
        events = self._store.events_since(self._last_event, limit=1000)
        for event in events:
            self._last_event = event.id
            if event.to_state not in TERMINAL or event.from_state == event.to_state:
                continue
            try:
                job = self._store.get(event.job_id)
            except NotFound:
                continue
            if job.spec.notify is None and not job.spec.mail:
                continue
            attempts = self._store.attempts([job.id])[job.id]
            facts = job_facts(job, attempts[-1].exit_code if attempts else None)
            if job.spec.notify is not None:
                tg.start_soon(self._run, job, list(job.spec.notify), facts, None, "notify")
            if self._mail_command is not None and wants_mail(job):
                message = mail_message(job, facts)
                tg.start_soon(self._run, job, list(self._mail_command), facts, message, "mail")
        return bool(events)

    async def _run(
        self, job: JobRow, argv: list[str], facts: dict[str, str], stdin: str | None, what: str
    ) -> None:
        async with self._limiter:
            try:
                status = await self._as_owner(job, argv, facts, stdin)
            except Exception as exc:  # logged, never more: the job has ended regardless
                log.warning(f"{what} failed", job_id=job.id, error=str(exc))
                return
        if status is None:
            log.warning(f"{what} timed out and was killed", job_id=job.id, after=self._timeout)
        elif status != 0:
            log.warning(f"{what} failed", job_id=job.id, exit_status=status)
        else:
            log.info(f"{what} sent", job_id=job.id)

    async def _as_owner(
        self, job: JobRow, argv: list[str], facts: dict[str, str], stdin: str | None
    ) -> int | None:
        """The command's exit status, or None if it ran out of time (then killed)."""
        acct = account(job.owner.uid)
        env = {
            "PATH": DEFAULT_PATH,
            **job.spec.environment,
            "HOME": acct.home,
            "USER": acct.user,
            "LOGNAME": acct.user,
            **facts,
        }
        request = {
            "uid": acct.uid,
            "gid": acct.gid,
            "groups": list(acct.groups),
            "argv": argv,
            "env": env,
            "cwd": job.spec.working_dir,
        }
        process = await anyio.open_process(
            _CHILD,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={REQUEST: json.dumps(request), "LANG": "C.UTF-8"},
            cwd="/",
            start_new_session=True,
        )
        try:
            with anyio.move_on_after(self._timeout):
                if stdin is not None and process.stdin is not None:
                    with contextlib.suppress(anyio.BrokenResourceError, OSError):
                        await process.stdin.send(stdin.encode())
                    await process.stdin.aclose()
                return await process.wait()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
            return None
        finally:
            await process.aclose()
