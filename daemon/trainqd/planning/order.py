"""The order of the queue (planner.py): an admin's boost, the class's weight, a job that
running jobs were just preempted for, the owner's fair-share usage, the owner's own
priority, submit time, id; and the usage a started or
running job charges its owner while a plan is built, so that users' jobs interleave."""

from __future__ import annotations

import heapq
from collections.abc import Collection, Iterable, Iterator, Sequence

from trainqd.planning.records import OrderKey, QueuedJob, RunningJob

# How far ahead a running (or just started) job's use counts in its owner's usage: enough
# that a user's next job sorts behind other users' after one of theirs starts, and short
# enough that a job with a long time limit does not count as used before it runs.
LOOKAHEAD = 3600.0


def queue_order(job: QueuedJob, usage: float = 0.0) -> OrderKey:
    """The sort key of a queued job whose owner has used `usage` (in its pool)."""
    return (-job.boost, -job.weight, -job.claiming, usage, -job.priority, job.submitted_at, job.id)


def expected_use(slots: int, runtime_limit: float | None) -> float:
    """What a job about to start counts in its owner's usage (slot-seconds)."""
    return slots * min(LOOKAHEAD, LOOKAHEAD if runtime_limit is None else runtime_limit)


def committed(job: RunningJob, now: float) -> float:
    """What a running job will still use of its LOOKAHEAD (slot-seconds)."""
    elapsed = 0.0 if job.attempt_started is None else max(0.0, now - job.attempt_started)
    left = LOOKAHEAD - elapsed
    if job.expected_end is not None:
        left = min(left, job.expected_end - now)
    return max(1, len(job.gpus) or job.slots) * max(0.0, left)


Lane = tuple[int, bool]  # (owner uid, a GPU job): whose usage orders the job


class QueueOrder:
    """The queue in order, as a k-way merge of each lane's jobs (sorted by their own key)
    on the lanes' usage, which `charge` raises while the plan is built. Without fair share
    (`usage` None) it is the queue sorted once."""

    def __init__(self, queue: Sequence[QueuedJob], usage: dict[Lane, float] | None) -> None:
        self.usage = usage
        if usage is None:
            self._sorted = sorted(queue, key=queue_order)
            return
        # Each lane's jobs with their keys less the usage, the first last (popped first).
        lanes: dict[Lane, list[tuple[tuple[int, int, int, int, float, int], QueuedJob]]] = {}
        for job in queue:
            key = (-job.boost, -job.weight, -job.claiming, -job.priority, job.submitted_at, job.id)
            lanes.setdefault((job.owner_uid, job.gpus > 0), []).append((key, job))
        for jobs in lanes.values():
            jobs.sort(reverse=True)  # keys are unique (the id): jobs are never compared
        self._lanes = lanes
        self._heap = [self._entry(lane) for lane in self._lanes]
        heapq.heapify(self._heap)

    def _entry(self, lane: Lane) -> tuple[OrderKey, Lane]:
        """The lane's next job's queue_order key, with the lane's usage now."""
        assert self.usage is not None
        (boost, weight, claiming, priority, submitted, job_id), _ = self._lanes[lane][-1]
        usage = self.usage.get(lane, 0.0)
        return (boost, weight, claiming, usage, priority, submitted, job_id), lane

    def used(self, job: QueuedJob) -> float:
        return 0.0 if self.usage is None else self.usage.get((job.owner_uid, job.gpus > 0), 0.0)

    def charge(self, job: QueuedJob, amount: float) -> None:
        if self.usage is not None:
            lane = (job.owner_uid, job.gpus > 0)
            self.usage[lane] = self.usage.get(lane, 0.0) + amount

    def __iter__(self) -> Iterator[QueuedJob]:
        if self.usage is None:
            yield from self._sorted
            return
        heap = self._heap
        while heap:
            lane = heap[0][1]
            jobs = self._lanes[lane]
            yield jobs.pop()[1]
            # After the consumer has charged the job's owner, if it did.
            if jobs:
                heapq.heapreplace(heap, self._entry(lane))
            else:
                heapq.heappop(heap)


class ClaimantsAfterHead:
    """`ordered`, without the jobs of `started`, and with `claimants` (jobs with a backfill
    claim, QueuedJob.backfill_claim) right after the head: the consumer sets `head_found`
    once the last job it was given became the head. A claimant reached while there is no
    head yet comes in its turn."""

    def __init__(
        self,
        ordered: Iterable[QueuedJob],
        claimants: Sequence[QueuedJob],
        started: Collection[int] = (),
    ) -> None:
        self._ordered = ordered
        self._waiting = sorted(claimants, key=queue_order)
        self._given = set(started)
        self.head_found = False

    def __iter__(self) -> Iterator[QueuedJob]:
        if not self._waiting and not self._given:
            yield from self._ordered
            return
        for job in self._ordered:
            if job.id not in self._given:
                self._given.add(job.id)
                yield job
            if self._waiting and self.head_found:
                for claimant in self._waiting:
                    if claimant.id not in self._given:
                        self._given.add(claimant.id)
                        yield claimant
                self._waiting = []
