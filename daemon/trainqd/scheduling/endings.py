"""An attempt's end: make sure nothing of it lives on, then record how it ended (the record
is trainq.core.outcomes'; the monitor concludes it in monitor/outcome.py).

Called by the watcher when a monitor exits, by the launcher when an attempt could not start,
and by reconcile for attempts that ended while no trainqd ran. How an end is judged (retry,
fail, stop) is `outcomes.judge_end`; this module applies it to the store.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

import anyio
import structlog

from trainq.core.errors import DiskFull, InvalidSpec
from trainq.core.outcomes import REASON_CHARS, ExitRecord, Outcome
from trainq.core.states import TransitionError
from trainqd.attempts import engine
from trainqd.attempts.jobdir import JobDirs
from trainqd.attempts.leftovers import end_attempt_cgroup, kill_attempt
from trainqd.observe.profiling import mark
from trainqd.scheduling import sampling
from trainqd.scheduling.outcomes import judge_end
from trainqd.scheduling.unrecorded import Backlog
from trainqd.store import AttemptRow, JobRow, Store

log = structlog.get_logger("trainqd.endings")


def container_of(
    job: JobRow, attempt: int, default_engine: engine.EngineName | None, instance: str
) -> tuple[str, str] | None:
    """(engine path, container name) of a container attempt; None for a subprocess."""
    if job.spec.image is None:
        return None
    try:
        eng = engine.find_engine(job.spec.engine, default_engine)
    except InvalidSpec:  # the engine went away: nothing of the attempt can be left in it
        return None
    return eng.path, engine.container_name(instance, job.id, attempt)


class AttemptEnds:
    def __init__(
        self,
        *,
        store: Store,
        dirs: JobDirs,
        sampler: sampling.Sampler,
        unrecorded: Backlog,
        deadlines: dict[int, float],
        default_engine: engine.EngineName | None,
        instance: str,
        changed: Callable[[], None],
        on_ended: Callable[[JobRow, AttemptRow, float], None] | None = None,
    ) -> None:
        """`on_ended(job, attempt, ended_at)`: told of each recorded end (fair share's
        usage, policy.py)."""
        self._on_ended = on_ended
        self._store = store
        self._dirs = dirs
        self._sampler = sampler
        self._unrecorded = unrecorded
        self._deadlines = deadlines
        self._default_engine = default_engine
        self._instance = instance
        self._changed = changed

    async def ended(
        self, job_id: int, number: int, record: ExitRecord | None, *, forced: bool = False
    ) -> None:
        """A watched monitor exited (the watcher's `on_end`). `forced`: trainqd killed it,
        its end overdue (watcher.py), so the attempt is cleaned up as a lost one's, and
        the job's events say why."""
        job = self._store.get(job_id)
        await self.clean_up(job, number, None if forced else record)
        mark("cgroup removed", job_id)
        if forced and record is not None and record.reason is not None:
            try:
                self._store.note(job_id, time.time(), record.reason)
            except DiskFull:  # the attempt's own reason says it too
                log.warning("disk full: why trainqd ended an attempt is not noted", job_id=job_id)
        self.record(job_id, number, record)

    async def clean_up(self, job: JobRow, number: int, record: ExitRecord | None) -> None:
        """Make sure nothing of an ended attempt lives on. Killing and reading /proc and
        cgroups can block, so it runs on a worker thread, never on the event loop."""
        ml_root = str(self._dirs.ml_root(job.id))
        if record is None or record.outcome == Outcome.LOST:
            # The monitor died without a word (killed, crashed) or left a record that cannot
            # be trusted: what it supervised may live on, and must be gone before the job runs
            # again on those GPUs.
            container = container_of(job, number, self._default_engine, self._instance)
            await anyio.to_thread.run_sync(kill_attempt, ml_root, job.id, number, container)
        else:
            # The monitor has ended the cgroup itself, unless it could not (monitor/cgroup.py):
            # nothing of the attempt may outlive it, and its cgroup is root's to remove.
            await anyio.to_thread.run_sync(end_attempt_cgroup, ml_root, job.id, number)

    def start_failed(self, job_id: int, number: int, began: float, reason: str) -> None:
        """An attempt that never got to run its trainer, for `reason`."""
        self.record(
            job_id,
            number,
            ExitRecord(
                job_id,
                number,
                Outcome.START_FAILED,
                began,
                time.time(),
                reason=reason[:REASON_CHARS],
            ),
        )

    def record(self, job_id: int, number: int, record: ExitRecord | None) -> None:
        """Write the attempt's end and the job's next state; a full disk keeps it for later."""
        now = time.time()
        self._deadlines.pop(job_id, None)
        job = self._store.get(job_id)
        attempts = self._store.attempts([job_id])[job_id]
        result = judge_end(job, [a for a in attempts if a.number < number], record, now)
        try:
            self._store.end_attempt(
                job_id,
                number,
                result.target,
                now,
                result.ending,
                attempt_started=result.started_at,
                attempt_ended=result.ended_at,
                retried=result.retried,
                event_reason=result.event_reason,
                changes=result.changes,
                opt_ml=None if record is None else record.opt_ml,
                nodes=() if record is None else record.nodes,
            )
        except TransitionError as exc:
            self._unrecorded.recorded(job_id)
            log.exception("attempt end not applied", job_id=job_id, attempt=number, error=str(exc))
            return
        except DiskFull:
            # Kept and written again later; meanwhile the job stays RUNNING in the database,
            # so it keeps its GPUs and is not launched again (unrecorded.py).
            log.warning("disk full: an attempt's end is kept to record later", job_id=job_id)
            self._unrecorded.keep(job_id, number, record, now)
            return
        self._unrecorded.recorded(job_id)
        mark("end committed", job_id)
        sampling.keep_summary(self._store, self._sampler, job_id, number)
        if self._on_ended is not None:
            for attempt in attempts:
                if attempt.number == number:
                    begun = attempt.started_at if result.started_at is None else result.started_at
                    self._on_ended(job, replace(attempt, started_at=begun), result.ended_at)
        log.info(
            "attempt ended",
            job_id=job_id,
            attempt=number,
            outcome=result.outcome,
            exit_code=result.exit_code,
            state=str(result.target),
        )
        self._changed()
