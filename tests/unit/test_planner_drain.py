"""Preemption instead of a drain (Sharing.drain_preemption, planner.py): a head that needs
more GPUs than are free and would be done before they all came free takes smaller jobs of
its own rank, rather than keep the free GPUs idle while the others end."""

from __future__ import annotations

import math
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.planning import MIN_RUNTIME, NOW, UIDS, job, room, run, sharing, started

from trainq.core.reasons import Wait, render
from trainqd.planner import Limits, Plan, QueuedJob, RunningJob, Sharing, plan

DRAIN = {"drain_preemption": True}


def box(*held: tuple[int, int, float | None]) -> list[RunningJob]:
    """Running "shared" jobs, each (owner, GPUs, expected end), on GPUs 0, 1, ... in turn."""
    runs, first = [], 0
    for number, (uid, gpus, end) in enumerate(held):
        gpus_held = tuple(range(first, first + gpus))
        runs.append(run(100 + number, uid, gpus_held, "shared", expected_end=end))
        first += gpus
    return runs


def preempting(result: Plan, job_id: int) -> list[int]:
    return sorted(p.victim for p in result.preemptions if p.for_job == job_id)


def test_a_short_head_takes_smaller_jobs_rather_than_wait_for_them_to_end() -> None:
    # Two of four GPUs free; user 1's two 1-GPU jobs run without a time limit.
    runs = box((1, 1, None), (1, 1, None))
    head = job(1, 2, 4, "shared", runtime_limit=600.0)
    result = plan([head], runs, room(4), Limits(), NOW, sharing=sharing(fair=False, **DRAIN))
    assert preempting(result, 1) == [100, 101]
    assert result.waiting[1].kind == Wait.PREEMPTING_DRAIN
    assert render(result.waiting[1]) == (
        "preempting smaller jobs for 4 GPUs rather than wait for them to drain (2 free)"
    )
    # Not without the setting.
    result = plan([head], runs, room(4), Limits(), NOW, sharing=sharing(fair=False))
    assert not result.preemptions
    assert result.waiting[1].kind == Wait.GPUS


def test_only_a_head_that_would_be_done_before_the_gpus_came_free() -> None:
    runs = box((1, 1, NOW + 2000), (1, 1, NOW + 3000))
    share = sharing(fair=False, **DRAIN)
    for limit in (None, 3000.0, 5000.0):  # no limit; as long as the wait; longer
        head = job(1, 2, 4, "shared", runtime_limit=limit)
        assert not plan([head], runs, room(4), Limits(), NOW, sharing=share).preemptions
    head = job(1, 2, 4, "shared", runtime_limit=2999.0)
    assert preempting(plan([head], runs, room(4), Limits(), NOW, sharing=share), 1) == [100, 101]


def test_never_a_job_as_big_as_the_head() -> None:
    runs = box((1, 2, None))
    share = sharing(fair=False, **DRAIN)
    head = job(1, 2, 2, "shared", runtime_limit=60.0)
    result = plan([head], runs, room(3), Limits(), NOW, sharing=share)
    assert not result.preemptions
    bigger = job(1, 2, 3, "shared", runtime_limit=60.0)
    assert preempting(plan([bigger], runs, room(3), Limits(), NOW, sharing=share), 1) == [100]


def test_with_fair_share_only_jobs_of_users_who_used_as_much_as_its_owner() -> None:
    # User 3's job is younger: the cheaper victim, unless fair share spares it.
    runs = [run(100, 1, (0,), "shared"), run(101, 3, (1,), "shared", age=MIN_RUNTIME)]
    head = job(1, 2, 3, "shared", runtime_limit=60.0)
    result = plan([head], runs, room(4), Limits(), NOW, sharing=sharing(fair=False, **DRAIN))
    assert preempting(result, 1) == [101]
    # Each running job counts its next hour (3,600 GPU-seconds) in its owner's usage: user 3
    # has then used less than user 2, user 1 more.
    usage = {1: 50_000.0, 2: 10_000.0, 3: 0.0}
    result = plan([head], runs, room(4), Limits(), NOW, sharing=sharing(gpu_usage=usage, **DRAIN))
    assert preempting(result, 1) == [100]
    usage = {1: 0.0, 2: 10_000.0, 3: 0.0}
    result = plan([head], runs, room(4), Limits(), NOW, sharing=sharing(gpu_usage=usage, **DRAIN))
    assert not result.preemptions


def test_behind_the_head_nothing_is_taken_this_way() -> None:
    runs = box((1, 1, None), (1, 1, None))
    head = job(1, 2, 4, "shared")  # no limit: it may not preempt this way
    behind = job(2, 3, 3, "shared", runtime_limit=60.0)
    result = plan([head, behind], runs, room(4), Limits(), NOW, sharing=sharing(**DRAIN))
    assert not result.preemptions


@st.composite
def drains(draw: st.DrawFn) -> tuple[list[QueuedJob], list[RunningJob], int, Sharing]:
    """A box mostly held by "shared" jobs of all sizes, and "shared" jobs waiting."""
    gpu_count = draw(st.integers(2, 8))
    held: list[tuple[int, int, float | None]] = []
    left = gpu_count
    while left > 0 and draw(st.integers(0, 5)):
        gpus = draw(st.integers(1, left))
        end = draw(st.one_of(st.none(), st.floats(NOW + 1, NOW + 9000)))
        held.append((draw(st.sampled_from(UIDS)), gpus, end))
        left -= gpus
    runs = box(*held)
    queue = [
        job(job_id, draw(st.sampled_from(UIDS)), draw(st.integers(1, gpu_count)), "shared",
            runtime_limit=draw(st.one_of(st.none(), st.floats(1, 9000))))
        for job_id in draw(st.lists(st.integers(1, 40), min_size=1, max_size=6, unique=True))
    ]  # fmt: skip
    usage = {uid: draw(st.floats(0, 20_000)) for uid in UIDS}
    return queue, runs, gpu_count, sharing(draw(st.booleans()), gpu_usage=usage, **DRAIN)


def reservation(job: QueuedJob, runs: list[RunningJob], gpu_count: int) -> float:
    """When enough GPUs for `job` come free as the running jobs end as expected."""
    free = gpu_count - sum(len(r.gpus) for r in runs)
    ends = sorted(
        (math.inf if r.expected_end is None else r.expected_end, len(r.gpus)) for r in runs
    )
    for end, gpus in ends:
        free += gpus
        if free >= job.gpus:
            return end
    return math.inf


@settings(max_examples=1000, deadline=None)
@given(drains())
def test_a_job_taken_instead_of_a_drain_is_smaller_and_ends_later(
    situation: tuple[list[QueuedJob], list[RunningJob], int, Sharing],
) -> None:
    queue, runs, gpu_count, share = situation
    result = plan(queue, runs, room(gpu_count), Limits(), NOW, sharing=share)
    by_id, running = {j.id: j for j in queue}, {r.id: r for r in runs}
    for p in result.preemptions:
        head, victim = by_id[p.for_job], running[p.victim]
        assert result.waiting[head.id].kind == Wait.PREEMPTING_DRAIN
        assert len(victim.gpus) < head.gpus
        assert head.runtime_limit is not None
        assert NOW + head.runtime_limit < reservation(head, runs, gpu_count)
        assert NOW - (victim.attempt_started or NOW) >= MIN_RUNTIME


@settings(max_examples=1000, deadline=None)
@given(drains())
def test_a_job_taken_instead_of_a_drain_never_takes_its_gpus_back(
    situation: tuple[list[QueuedJob], list[RunningJob], int, Sharing],
) -> None:
    """Carry out the plan's preemptions and starts, and plan again with no minimum runtime:
    no victim preempts the job it made room for."""
    queue, runs, gpu_count, share = situation
    first = plan(queue, runs, room(gpu_count), Limits(), NOW, sharing=share)
    if not first.preemptions:
        return
    by_id = {j.id: j for j in queue}
    victims = {p.victim for p in first.preemptions}
    gone = [r for r in runs if r.id not in victims]
    taken = sorted({gpu for r in runs if r.id in victims for gpu in r.gpus})
    later = NOW + 31  # past the victims' grace
    for_job = first.preemptions[0].for_job
    free = sorted(set(range(gpu_count)) - {gpu for r in gone for gpu in r.gpus} - set(taken))
    head = by_id[for_job]
    assert head.runtime_limit is not None
    gpus = tuple(sorted(taken + free)[: head.gpus])
    end = NOW + head.runtime_limit
    now_running = [*gone, run(for_job, head.owner_uid, gpus, "shared", age=31.0, expected_end=end)]
    # The victims wait again, as their jobs' ids; the others that did not start too.
    requeued = [
        job(p, running.owner_uid, len(running.gpus), "shared", runtime_limit=60.0)
        for p, running in ((r.id, r) for r in runs if r.id in victims)
    ]
    rest = [j for j in queue if j.id not in started(first) and j.id != for_job] + requeued
    no_minimum = Sharing(**{**share.__dict__, "min_runtime": 0.0})
    again = plan(rest, now_running, room(gpu_count), Limits(), later, sharing=no_minimum)
    for p in again.preemptions:
        assert not (p.for_job in victims and p.victim == for_job)


def test_a_job_that_preempted_goes_first_on_the_gpus_its_victims_freed() -> None:
    # The victim, queued again, sorts before the job it made room for (same user, earlier).
    victim = job(1, 1, 1, "shared")
    big = job(2, 1, 2, "shared", runtime_limit=60.0)
    share = sharing(**DRAIN)
    result = plan([victim, big], [], room(2), Limits(), NOW, sharing=share)
    assert sorted(started(result)) == [1]
    claiming = replace(big, claiming=True)
    result = plan([victim, claiming], [], room(2), Limits(), NOW, sharing=share)
    assert sorted(started(result)) == [2]
    assert result.order == [2, 1]
