"""How an attempt ended: the one record of it, spoken by the monitor, trainqd and the wire.

The monitor concludes an `Ending` (`trainqd.monitor.outcome`) and writes it as an
`ExitRecord` (`trainqd.monitor.records`, which also reads one back as hostile input);
trainqd judges the job's next state from it (`trainqd.scheduling.outcomes.judge_end`) and
records it (`trainqd.scheduling.endings`). On disk and in the database an outcome is its
text value (`Outcome("lost") is Outcome.LOST`), so records and rows written before this
enum read back unchanged.

Standard library only, so the monitor (which imports nothing else) can use it. These are
data about an attempt, not job states (those are in `trainq.core.states`).
"""

from dataclasses import dataclass
from enum import StrEnum

REASON_CHARS = 1024  # SageMaker returns the first 1024 characters of the failure file


class Outcome(StrEnum):
    EXITED = "exited"  # the trainer exited by itself; exit_code says how
    SIGNALED = "signaled"  # the trainer died of a signal trainq did not send
    STOPPED = "stopped"  # trainq stopped it on request
    TIMED_OUT = "timed_out"  # trainq stopped it at its time limit
    INTERRUPTED = "interrupted"  # the host shut down under it (SIGTERM to its monitor)
    START_FAILED = "start_failed"  # the trainer could not be started
    ENGINE_ERROR = "engine_error"  # the container engine failed before or around the trainer
    FEEDER_FAILED = "feeder_failed"  # a Pipe mode channel could not be fed (unreadable data)
    OOM_KILLED = "oom_killed"  # the kernel's out-of-memory killer ended it
    LOST = "lost"  # its monitor vanished without a record (reboot); retried from checkpoint
    PREEMPTED = "preempted"  # stopped to make room for a higher class's job; queued again


OUTCOMES = frozenset(o.value for o in Outcome)


@dataclass(frozen=True, slots=True)
class Ending:
    """How an attempt ended, less the times: what the monitor puts in its exit record, and
    what trainqd reads back from one (or, with none, `Outcome.LOST`) to judge the job's
    next step."""

    outcome: Outcome
    exit_code: int | None = None
    signal: int | None = None
    reason: str | None = None


@dataclass(frozen=True)
class NodeEnd:
    """How one node of a job of several nodes ended the attempt: its last run's outcome and
    exit status or signal, and how many runs of it came before (restart = "node")."""

    name: str
    outcome: Outcome
    exit_code: int | None = None
    signal: int | None = None
    restarts: int = 0


@dataclass(frozen=True)
class ExitRecord:
    """An attempt's end as its monitor writes it (`<attempt dir>/exit.json`, one JSON
    object of these fields)."""

    job_id: int
    attempt: int
    outcome: Outcome
    started_at: float | None
    ended_at: float
    exit_code: int | None = None
    signal: int | None = None
    reason: str | None = None  # failure file's first 1024 chars, stderr's tail, or what failed
    # A subprocess job: whether its trainer found its ml root at /opt/ml (False: only
    # through SAGEMAKER_BASE_DIR, see privileges.py). None where it does not apply.
    opt_ml: bool | None = None
    # A job of several nodes: each node's end, in rank order. Absent from the records of a
    # job of one node and of older monitors; older trainqds read past it.
    nodes: tuple[NodeEnd, ...] = ()

    @property
    def ending(self) -> Ending:
        return Ending(self.outcome, self.exit_code, self.signal, self.reason)
