"""Which running jobs a waiting job preempts (planner.py decides when it may): the least
work lost, as few as make its room, of lower classes or, for fair share, of users who keep
at least as many GPUs as its owner will hold."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from trainqd.planning.records import QueuedJob, RunningJob, Sharing


def choose_victims(
    job: QueuedJob,
    *,
    free: int,
    running: Sequence[RunningJob],
    usable: set[int],
    sharing: Sharing,
    now: float,
    spared_users: set[int],
    held: Mapping[int, int] | None = None,
    only_share: bool = False,
) -> list[RunningJob] | None:
    """The running jobs to preempt so that `job` can start, losing the least work; None
    when no such set exists. GPUs of jobs already stopping count first.

    Victims are of a lower rank (boost, weight); with `held` (each user's GPUs, as
    `Sharing.share_preemption` asks), also of the job's own rank, as long as their owner
    keeps at least the GPUs the job's owner will hold: taking from a user who would then
    hold fewer would only turn the unfairness around, and the victim's owner could never
    take them back under the same rule, so two users never preempt each other in turn.
    `only_share`: jobs of the own rank alone (a job behind the head, which only fair share
    may make room for)."""
    coming = free + sum(len(set(r.gpus) & usable) for r in running if r.stopping)
    if coming >= job.gpus:
        return []
    rank = (job.boost, job.weight)
    # What each other user may lose to fair share: down to the job's owner's GPUs then.
    spare: dict[int, int] = {}
    if held is not None:
        after = held.get(job.owner_uid, 0) + job.gpus
        spare = {uid: n - after for uid, n in held.items() if uid != job.owner_uid}

    def allowed(r: RunningJob) -> bool:
        own_rank = (r.boost, r.weight)
        lower = own_rank < rank and not only_share
        return lower or (own_rank == rank and spare.get(r.owner_uid, 0) > 0)

    candidates = [
        r
        for r in running
        if r.preemptible
        and not r.stopping
        and r.gpus
        and allowed(r)
        and r.owner_uid not in spared_users
        and r.attempt_started is not None
        and now - r.attempt_started >= sharing.min_runtime
        and set(r.gpus) & usable
    ]

    # The least work lost first: GPU time since the attempt started (what a checkpoint
    # taken when it started would not hold), then the youngest.
    def lost(r: RunningJob) -> tuple[float, float, int]:
        elapsed = now - (r.attempt_started or now)
        return (elapsed * len(r.gpus), elapsed, r.id)

    candidates.sort(key=lost)
    chosen: list[RunningJob] = []
    for victim in candidates:
        if coming >= job.gpus:
            break
        if (victim.boost, victim.weight) == rank:
            if spare[victim.owner_uid] < len(victim.gpus):
                continue  # its owner would end with fewer GPUs than the job's
            spare[victim.owner_uid] -= len(victim.gpus)
        chosen.append(victim)
        coming += len(set(victim.gpus) & usable)
    if coming < job.gpus:
        return None
    # Drop any victim the others make unnecessary, the most work first.
    for victim in reversed(list(chosen)):
        without = coming - len(set(victim.gpus) & usable)
        if without >= job.gpus:
            chosen.remove(victim)
            coming = without
    return chosen


def next_ripe(running: Sequence[RunningJob], sharing: Sharing, now: float) -> float | None:
    """When the next running job that may be preempted but is too young now (it has not
    run `min_runtime` in its attempt) becomes old enough: a preemption refused for want of
    victims is worth deciding again then, not at the next unrelated event."""
    ripe = [
        r.attempt_started + sharing.min_runtime
        for r in running
        if r.preemptible
        and r.gpus
        and not r.stopping
        and r.attempt_started is not None
        and r.attempt_started + sharing.min_runtime > now
    ]
    return min(ripe, default=None)
