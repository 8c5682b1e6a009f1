"""Job states, their groups, and the one transition table (docs/architecture.md).

This module imports nothing from trainq or trainqd: the daemon's store, the scheduler and
the CLI's renderers all read the lifecycle from here, so it can never disagree with itself.

    PENDING -> RUNNING -> COMPLETED
                       -> FAILED
                       -> STOPPING -> STOPPED        (user stop, time limit)
                                   -> PENDING        (preempted: queued again)
                       -> PENDING                    (transient crash with retries left;
                                                      preemption; daemon restart)
    PENDING -> STOPPED                               (stopped before it ran)

How a job ended is data (attempt outcome, exit code, signal, reason), never more states.
"""

from __future__ import annotations

import enum


class JobState(enum.StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    STOPPING = "STOPPING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    STOPPED = "STOPPED"


# A job holds GPUs (or a CPU slot) exactly while it is in one of these states.
ACTIVE: frozenset[JobState] = frozenset({JobState.RUNNING, JobState.STOPPING})
# Ended jobs never change again.
TERMINAL: frozenset[JobState] = frozenset({JobState.COMPLETED, JobState.FAILED, JobState.STOPPED})
# Shown by `trainq ls` without --all.
UNFINISHED: frozenset[JobState] = frozenset(JobState) - TERMINAL

TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.PENDING: frozenset({JobState.RUNNING, JobState.STOPPED}),
    JobState.RUNNING: frozenset(
        {
            JobState.COMPLETED,
            JobState.FAILED,
            JobState.STOPPING,
            # The monitor enforces the time limit itself, so a job whose limit passed while
            # trainqd was down is found already stopped.
            JobState.STOPPED,
            JobState.PENDING,
        }
    ),
    JobState.STOPPING: frozenset(
        {
            JobState.STOPPED,
            # A trainer may finish (or crash) in its grace period: the exit it reports wins,
            # so a job that completed is never reported as stopped.
            JobState.COMPLETED,
            JobState.FAILED,
            # Preempted: stopped to make room for a higher class's job, queued again.
            JobState.PENDING,
        }
    ),
    JobState.COMPLETED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.STOPPED: frozenset(),
}


def sources_of(target: JobState) -> frozenset[JobState]:
    """Every state from which `target` may be entered: the guard of a store update."""
    return frozenset(src for src, dsts in TRANSITIONS.items() if target in dsts)


class TransitionError(Exception):
    """A state change that the table does not allow."""

    def __init__(self, current: JobState, target: JobState) -> None:
        super().__init__(f"a {current} job cannot become {target}")
        self.current = current
        self.target = target


def check_transition(current: JobState, target: JobState) -> None:
    if target not in TRANSITIONS[current]:
        raise TransitionError(current, target)
