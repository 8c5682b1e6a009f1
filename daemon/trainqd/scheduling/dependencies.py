"""Jobs that wait for others to end (the spec's `after`, trainq.core.dependencies): at
submit, that each job or group named exists; before each plan, which pending jobs may be
planned, why the others wait, and which can never start (they end STOPPED, saying why).

A dependency names jobs that existed when it was submitted, and a change (`trainq update`)
cannot add one, so every dependency points at an older job: no cycle can form.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from trainq.core.dependencies import Status, judge
from trainq.core.dependencies import parse as parse_dependency
from trainq.core.errors import InvalidSpec
from trainq.core.reasons import WaitReason, own_reason
from trainq.core.spec import JobSpec
from trainqd.store import Store
from trainqd.store.rows import JobRow

NEVER_MET = "dependency can no longer be met: "


@dataclass
class Sorted:
    ready: list[JobRow] = field(default_factory=list)  # no dependency left unmet
    waiting: dict[int, WaitReason] = field(default_factory=dict)
    never: list[tuple[JobRow, str]] = field(default_factory=list)  # (job, why)


def check_named(specs: Sequence[JobSpec], store: Store) -> None:
    """Every job and group the specs depend on exists (every user sees that a job exists,
    docs/security.md, so this says no more than `trainq show` would)."""
    seen: set[str] = set()
    for spec in specs:
        for text in spec.after:
            if text in seen:
                continue
            seen.add(text)
            dependency = parse_dependency(text)
            if not store.states_named(dependency.job_id, dependency.group):
                raise InvalidSpec(f"after: no {dependency.what()}")


def sort_pending(pending: Sequence[JobRow], store: Store, now: float) -> Sorted:
    """The pending jobs the planner may consider, and the others with their reasons. The
    states of each job or group named are read once per call."""
    result = Sorted()
    states: dict[tuple[int, bool], list[str]] = {}
    for job in pending:
        if not job.spec.after or job.attempt_count > 0:  # met once: ended jobs stay ended
            result.ready.append(job)
            continue
        first_unmet: str | None = None
        never: str | None = None
        for text in job.spec.after:
            dependency = parse_dependency(text)
            key = (dependency.job_id, dependency.group)
            if key not in states:
                states[key] = store.states_named(*key)
            status, why = judge(dependency, states[key])
            if status is Status.NEVER:
                never = why
                break
            if status is Status.WAITING and first_unmet is None:
                first_unmet = text
        if never is not None:
            result.never.append((job, never))
        elif first_unmet is not None:
            waits = own_reason(job.held_by, job.not_before, now, unmet=first_unmet)
            assert waits is not None  # it has an unmet dependency at least
            result.waiting[job.id] = waits
        else:
            result.ready.append(job)
    return result
