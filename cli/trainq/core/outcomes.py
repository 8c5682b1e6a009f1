"""How an attempt ended: one list, spoken by the monitor, trainqd and the wire.

Standard library only, so the monitor (which imports nothing else) can use it. These are
data about an attempt, not job states (those are in `trainq.core.states`).
"""

from enum import StrEnum


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
