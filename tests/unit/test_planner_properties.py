"""The planner's sharing rules, as properties over generated situations: fair share between
users, classes, preemption, holds and drains (planner.py). tests/unit/test_planner.py has
the plain queue's examples and properties."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from trainq.core.reasons import Wait, render
from trainqd.gpus.fake import server_distances
from trainqd.planning.planner import (
    LOOKAHEAD,
    Capacity,
    ClassLimits,
    Limits,
    Plan,
    QueuedJob,
    RunningJob,
    Sharing,
    plan,
)

NOW = 1_700_000_000.0
MIN_RUNTIME = 600.0
UIDS = (1, 2, 3)
# name: (weight, preemptible, may_preempt)
CLASSES = {
    "low": (0, True, False),
    "normal": (5, False, False),
    "high": (10, False, True),
    "shared": (0, True, True),  # preemptible, and may preempt (its own rank: for fair share)
}

EITHER = st.booleans()
Situation = tuple[list[QueuedJob], list[RunningJob], Capacity, Limits, Sharing]


def room(gpu_count: int, **changes: object) -> Capacity:
    matrix = server_distances(gpu_count) if gpu_count else ()
    cap = Capacity(tuple(range(gpu_count)), frozenset(), 2, lambda a, b: matrix[a][b])
    return replace(cap, **changes)


def job(
    job_id: int, uid: int, gpus: int = 1, job_class: str = "normal", **more: object
) -> QueuedJob:
    weight, _, may_preempt = CLASSES[job_class]
    fields: dict[str, object] = {
        "id": job_id,
        "priority": 0,
        "submitted_at": NOW - 100 + job_id,
        "owner_uid": uid,
        "gpus": gpus,
        "runtime_limit": None,
        "job_class": job_class,
        "weight": weight,
        "may_preempt": may_preempt,
    }
    fields.update(more)
    return QueuedJob(**fields)


def run(
    job_id: int, uid: int, gpus: tuple[int, ...], job_class: str = "low", age: float = 3600.0,
    **more: object,
) -> RunningJob:  # fmt: skip
    weight, preemptible, _ = CLASSES[job_class]
    fields: dict[str, object] = {
        "id": job_id,
        "owner_uid": uid,
        "gpus": gpus,
        "expected_end": None,
        "job_class": job_class,
        "weight": weight,
        "preemptible": preemptible,
        "attempt_started": NOW - age,
        "grace": 30.0,
    }
    fields.update(more)
    return RunningJob(**fields)


def sharing(fair: bool = True, **more: object) -> Sharing:
    return Sharing(fair=fair, preempt_after=300.0, min_runtime=MIN_RUNTIME, **more)


@st.composite
def situations(draw: st.DrawFn, fair: st.SearchStrategy[bool] = EITHER) -> Situation:
    gpu_count = draw(st.integers(min_value=1, max_value=8))
    gpus = list(range(gpu_count))
    blocked = draw(st.sets(st.sampled_from(gpus), max_size=1))
    drained = draw(st.sets(st.sampled_from(gpus), max_size=2))
    host_drained = draw(st.integers(0, 9)) == 0
    # Most GPUs busy, so that preemption comes up often.
    owner = draw(
        st.lists(st.sampled_from((None, 0, 1, 2, 3, 4)), min_size=gpu_count, max_size=gpu_count)
    )
    runs = []
    for number in range(5):
        held = tuple(gpu for gpu in gpus if owner[gpu] == number)
        if not held and draw(st.integers(0, 3)):
            continue
        ends = draw(st.one_of(st.none(), st.floats(min_value=NOW + 1, max_value=NOW + 5000)))
        runs.append(
            run(
                100 + number,
                draw(st.sampled_from(UIDS)),
                held,
                draw(st.sampled_from(sorted(CLASSES))),
                age=draw(st.sampled_from((10.0, MIN_RUNTIME - 1, MIN_RUNTIME, 5000.0))),
                expected_end=ends,
                stopping=draw(st.integers(0, 5)) == 0,
                boost=draw(st.sampled_from((0, 0, 0, 1))),
            )
        )
    queue = [
        job(
            job_id,
            draw(st.sampled_from(UIDS)),
            draw(st.integers(min_value=0, max_value=gpu_count + 1)),
            draw(st.sampled_from(sorted(CLASSES))),
            priority=draw(st.integers(-2, 2)),
            runtime_limit=draw(st.one_of(st.none(), st.floats(min_value=1, max_value=9000))),
            held_by=draw(st.sampled_from((None, None, None, "alice"))),
            not_before=draw(st.sampled_from((None, None, None, NOW + 100))),
            boost=draw(st.sampled_from((0, 0, 0, 1))),
        )
        for job_id in draw(st.lists(st.integers(1, 40), max_size=10, unique=True))
    ]
    some_limit = st.one_of(st.just(0), st.integers(min_value=1, max_value=6))
    limits = Limits(
        max_running_jobs_per_user=draw(some_limit),
        max_gpus_per_user=draw(some_limit),
        classes={"high": ClassLimits(draw(some_limit), draw(some_limit))},
    )
    usage = {uid: draw(st.floats(min_value=0, max_value=10 * LOOKAHEAD)) for uid in UIDS}
    share = sharing(draw(fair), gpu_usage=usage, share_preemption=draw(st.booleans()))
    cap = room(
        gpu_count, blocked=frozenset(blocked), drained=frozenset(drained), host_drained=host_drained
    )
    return queue, runs, cap, limits, share


def usable(cap: Capacity) -> set[int]:
    return set(cap.gpus) - cap.blocked - cap.drained


def started(result: Plan) -> dict[int, tuple[int, ...]]:
    return {start.job_id: start.gpus for start in result.starts}


@settings(max_examples=400, deadline=None)
@given(situations())
def test_no_gpu_is_given_twice_nor_a_drained_or_blocked_one(situation: Situation) -> None:
    queue, runs, cap, limits, share = situation
    result = plan(queue, runs, cap, limits, NOW, sharing=share)
    in_use = [gpu for r in runs for gpu in r.gpus]
    for start in result.starts:
        assert set(start.gpus) <= usable(cap)
        in_use.extend(start.gpus)
    assert len(in_use) == len(set(in_use))
    assert set(started(result)).isdisjoint(result.waiting)
    assert set(started(result)) | set(result.waiting) == {j.id for j in queue}
    assert sorted(result.order) == sorted(j.id for j in queue)


@settings(max_examples=400, deadline=None)
@given(situations())
def test_holds_and_drains_are_respected(situation: Situation) -> None:
    queue, runs, cap, limits, share = situation
    result = plan(queue, runs, cap, limits, NOW, sharing=share)
    by_id = {j.id: j for j in queue}
    for job_id in started(result):
        assert by_id[job_id].held_by is None
    for preemption in result.preemptions:
        assert by_id[preemption.for_job].held_by is None
    for j in queue:
        if j.held_by is not None and 0 <= j.gpus <= len(cap.gpus):
            assert result.waiting[j.id].kind == Wait.HELD
    if cap.host_drained:
        assert not result.starts
        assert not result.preemptions


@settings(max_examples=600, deadline=None)
@given(situations())
def test_preemption_takes_only_what_it_may(situation: Situation) -> None:
    queue, runs, cap, limits, share = situation
    result = plan(queue, runs, cap, limits, NOW, sharing=share)
    if not result.preemptions:
        return
    by_id = {j.id: j for j in queue}
    running = {r.id: r for r in runs}
    assert len({p.victim for p in result.preemptions}) == len(result.preemptions)
    all_victims = [running[p.victim] for p in result.preemptions]
    # Each user's GPUs once the preempting jobs run: their running jobs that go on, the
    # starts, and the preempting jobs.
    owner = {j.id: j.owner_uid for j in queue}
    after: Counter[int] = Counter()
    for r in runs:
        if not r.stopping and r not in all_victims:
            after[r.owner_uid] += len(r.gpus)
    for start in result.starts:
        after[owner[start.job_id]] += len(start.gpus)
    for for_job in {p.for_job for p in result.preemptions}:
        after[by_id[for_job].owner_uid] += by_id[for_job].gpus
    head_id = None if result.head_key is None else result.head_key[-1]
    for for_job in {p.for_job for p in result.preemptions}:
        job = by_id[for_job]
        victims = [running[p.victim] for p in result.preemptions if p.for_job == for_job]
        assert job.may_preempt
        assert for_job not in started(result)
        for victim in victims:
            assert victim.preemptible
            assert not victim.stopping
            assert victim.gpus
            assert victim.attempt_started is not None
            assert NOW - victim.attempt_started >= MIN_RUNTIME
            if (victim.boost, victim.weight) == (job.boost, job.weight):
                # Fair share's: the victim's owner keeps at least what the job's owner gets.
                assert share.fair
                assert share.share_preemption
                assert victim.owner_uid != job.owner_uid
                assert after[victim.owner_uid] >= after[job.owner_uid]
            else:
                assert for_job == head_id  # behind the head, only fair share preempts
                assert (victim.boost, victim.weight) < (job.boost, job.weight)
        lower = all((v.boost, v.weight) < (job.boost, job.weight) for v in victims)
        kind = Wait.PREEMPTING if lower else Wait.PREEMPTING_SHARE
        assert result.waiting[for_job].kind == kind
        freed = {gpu for v in victims for gpu in v.gpus} & usable(cap)
        if for_job != head_id:
            # Behind the head: its victims alone make its room, and none is more than that.
            assert len(freed) >= job.gpus
            for victim in victims:
                assert len(freed - set(victim.gpus)) < job.gpus
            continue
        # The head: together they let it start, and none of them is more than that needs. A
        # job started beside them that ends before they are gone (its time limit within
        # their grace: a backfill) gives its GPUs back in time.
        gone_by = max(r.grace for r in runs if r.stopping or r in victims)
        lasting = [
            s for s in result.starts if (by_id[s.job_id].runtime_limit or math.inf) > gone_by
        ]
        free = usable(cap) - {gpu for r in runs for gpu in r.gpus}
        free -= {gpu for start in lasting for gpu in start.gpus}
        stopping = {gpu for r in runs if r.stopping for gpu in r.gpus} & usable(cap)
        assert len(free | stopping | freed) >= job.gpus
        for victim in victims:
            assert len(free | stopping | (freed - set(victim.gpus))) < job.gpus


@settings(max_examples=600, deadline=None)
@given(situations(fair=st.just(False)))
def test_a_preemption_lets_its_job_start_once_the_victims_are_gone(situation: Situation) -> None:
    queue, runs, cap, _, share = situation
    limits = Limits()  # a per-user limit freed by a victim could go to another of its jobs
    result = plan(queue, runs, cap, limits, NOW, sharing=share)
    if not result.preemptions:
        return
    for_job = result.preemptions[0].for_job
    gone = {p.victim for p in result.preemptions} | {r.id for r in runs if r.stopping}
    by_id = {j.id: j for j in queue}
    later = NOW + 31  # past the victims' grace
    # A job started beside the preemption runs on, unless its time limit (what let it
    # backfill ahead of the preempting job) is over by then: then it has ended.
    ends = {s.job_id: NOW + (by_id[s.job_id].runtime_limit or math.inf) for s in result.starts}
    after = [r for r in runs if r.id not in gone] + [
        run(s.job_id, by_id[s.job_id].owner_uid, s.gpus, by_id[s.job_id].job_class, age=0.0,
            expected_end=None if math.isinf(ends[s.job_id]) else ends[s.job_id])
        for s in result.starts
        if ends[s.job_id] > later
    ]  # fmt: skip
    rest = [j for j in queue if j.id not in started(result)]
    again = plan(rest, after, cap, limits, later, sharing=share)
    assert for_job in started(again)
    # It needs no more victims; a job behind it may well preempt in turn, on its own account.
    assert all(p.for_job != for_job for p in again.preemptions)


def test_a_victim_younger_than_the_minimum_is_never_taken() -> None:
    runs = [run(100, 1, (0,), age=MIN_RUNTIME - 1)]
    result = plan([job(1, 2, 1, "high")], runs, room(1), Limits(), NOW, sharing=sharing())
    assert not result.preemptions
    assert render(result.waiting[1]) == "waiting for 1 GPU (0 free)"
    older = [run(100, 1, (0,), age=MIN_RUNTIME)]
    result = plan([job(1, 2, 1, "high")], older, room(1), Limits(), NOW, sharing=sharing())
    assert [(p.victim, p.for_job) for p in result.preemptions] == [(100, 1)]
    assert render(result.waiting[1]) == "preempting jobs of lower classes for 1 GPU (0 free)"


def test_victims_lose_the_least_work_and_no_more_than_needed() -> None:
    runs = [
        run(100, 1, (0,), age=9000),
        run(101, 1, (1,), age=1000),  # 1000 GPU-seconds lost
        run(102, 3, (2, 3), age=800),  # younger, but 1600 GPU-seconds lost
        run(103, 1, (4,), "normal", age=700),  # not preemptible
    ]
    result = plan([job(1, 2, 1, "high")], runs, room(5), Limits(), NOW, sharing=sharing())
    assert sorted(p.victim for p in result.preemptions) == [101]
    # Two GPUs: 101 and then 102 are taken, and 101 is then more than needed.
    result = plan([job(1, 2, 2, "high")], runs, room(5), Limits(), NOW, sharing=sharing())
    assert sorted(p.victim for p in result.preemptions) == [102]
    result = plan([job(1, 2, 3, "high")], runs, room(5), Limits(), NOW, sharing=sharing())
    assert sorted(p.victim for p in result.preemptions) == [101, 102]


def test_no_preemption_when_gpus_come_free_soon_or_are_already_coming() -> None:
    soon = [run(100, 1, (0,), expected_end=NOW + 60)]
    result = plan([job(1, 2, 1, "high")], soon, room(1), Limits(), NOW, sharing=sharing())
    assert not result.preemptions
    stopping = [run(100, 1, (0,), stopping=True), run(101, 1, (1,))]
    result = plan([job(1, 2, 1, "high")], stopping, room(2), Limits(), NOW, sharing=sharing())
    assert not result.preemptions
    assert result.waiting[1].kind == Wait.PREEMPTING


def test_preemption_never_takes_a_job_of_an_equal_or_higher_rank() -> None:
    runs = [run(100, 1, (0,), "low", boost=1)]  # an admin's boost raises it above "high"
    result = plan([job(1, 2, 1, "high")], runs, room(1), Limits(), NOW, sharing=sharing())
    assert not result.preemptions


def test_fair_share_puts_the_lighter_user_first_whatever_the_priorities() -> None:
    heavy = [job(i, 1, priority=10_000) for i in (1, 2, 3)]
    light = [job(i, 2, priority=-10_000) for i in (4, 5, 6)]
    # User 1 used 1.5 hours of a GPU of late: user 2 starts two jobs before it has more.
    share = sharing(gpu_usage={1: 1.5 * LOOKAHEAD, 2: 0.0})
    result = plan(heavy + light, [], room(3), Limits(), NOW, sharing=share)
    assert sorted(started(result)) == [1, 4, 5]
    assert result.order[:3] == [4, 5, 1]
    # Off, the submitters' priorities decide across users again.
    result = plan(heavy + light, [], room(3), Limits(), NOW, sharing=sharing(fair=False))
    assert sorted(started(result)) == [1, 2, 3]


def test_a_users_own_priority_orders_only_their_jobs() -> None:
    """Two users, neither with usage: user 1's priority 5 puts its job 2 before its job 1,
    but once job 2 has started, user 2's job (priority -5) goes before user 1's next."""
    jobs = [job(1, 1, priority=0), job(2, 1, priority=5), job(3, 2, priority=-5)]
    result = plan(jobs, [], room(3), Limits(), NOW, sharing=sharing())
    assert result.order == [2, 3, 1]


def test_boost_and_class_weight_go_before_fair_share() -> None:
    share = sharing(gpu_usage={1: 100 * LOOKAHEAD, 2: 0.0})
    jobs = [job(1, 2), job(2, 1, 1, "high"), job(3, 1, boost=1), job(4, 2, 1, "low")]
    result = plan(jobs, [], room(0), Limits(), NOW, sharing=share)  # nothing starts
    assert result.order == [3, 2, 1, 4]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.floats(min_value=0, max_value=3 * LOOKAHEAD), min_size=2, max_size=3),
    st.integers(min_value=1, max_value=8),
)
def test_fair_share_orders_users_by_decayed_usage(usage: list[float], gpus: int) -> None:
    """Each user queues many 1-GPU jobs at once: the least used user's job goes first, and
    once one of a user's jobs starts, its next hour counts, so users take turns."""
    users = {uid: used for uid, used in enumerate(usage, start=1)}
    queue = [job(uid * 100 + n, uid) for uid in users for n in range(10)]
    result = plan(queue, [], room(gpus), Limits(), NOW, sharing=sharing(gpu_usage=users))
    first = min(users, key=lambda uid: (users[uid], uid))
    assert result.order[0] // 100 == first
    # A user's last job started when its usage (with its earlier starts' next hour) was
    # the lowest: every other user's usage, with its own starts, is at least that.
    starts = Counter(s.job_id // 100 for s in result.starts)
    counted = {uid: used + LOOKAHEAD * starts[uid] for uid, used in users.items()}
    for uid, n in starts.items():
        last_turn = users[uid] + LOOKAHEAD * (n - 1)
        assert all(counted[other] >= last_turn for other in users if other != uid)


def test_users_interleave_when_one_queues_a_thousand() -> None:
    flood = [job(i, 1) for i in range(1, 1001)]
    late = [job(i, 2, submitted_at=NOW) for i in range(2001, 2005)]
    result = plan(flood + late, [], room(8), Limits(), NOW, sharing=sharing())
    owners = Counter(1 if s.job_id <= 1000 else 2 for s in result.starts)
    assert owners == {1: 4, 2: 4}


def test_class_limits_hold_a_users_jobs_of_that_class() -> None:
    limits = Limits(classes={"high": ClassLimits(max_gpus_per_user=1)})
    jobs = [job(1, 1, 1, "high"), job(2, 1, 1, "high"), job(3, 1, 1, "normal")]
    result = plan(jobs, [], room(4), limits, NOW, sharing=sharing())
    assert sorted(started(result)) == [1, 3]
    assert render(result.waiting[2]) == "held: max_gpus_per_user of class high (1)"


def test_fair_share_preempts_a_user_holding_more_than_the_waiting_users_share() -> None:
    """User 1's four jobs hold the whole box; user 2's job of the same class waits."""
    runs = [run(100 + n, 1, (n,), "shared", age=1000 + n) for n in range(4)]
    waiting = [job(1, 2, 1, "shared")]
    share = sharing(share_preemption=True)
    result = plan(waiting, runs, room(4), Limits(), NOW, sharing=share)
    assert [(p.victim, p.for_job) for p in result.preemptions] == [(100, 1)]  # least work lost
    assert render(result.waiting[1]) == (
        "preempting jobs of users over their share for 1 GPU (0 free)"
    )
    # Not without the setting, nor without fair share.
    for off in (sharing(), sharing(fair=False, share_preemption=True)):
        assert not plan(waiting, runs, room(4), Limits(), NOW, sharing=off).preemptions


def test_fair_share_never_leaves_the_victims_owner_below_the_preemptor() -> None:
    # User 1 holds 2, user 2 holds 1: taking one of user 1's would leave 1 against 2.
    runs = [run(100, 1, (0,), "shared"), run(101, 1, (1,), "shared"), run(102, 2, (2,), "shared")]
    share = sharing(share_preemption=True)
    result = plan([job(1, 2, 1, "shared")], runs, room(3), Limits(), NOW, sharing=share)
    assert not result.preemptions
    # A 2-GPU job of a user holding none, beside a user holding 3 of 4 with 1 free: one
    # victim is enough, and a second would leave its owner with 1 against 2.
    runs = [run(100 + n, 1, (n,), "shared") for n in range(3)]
    result = plan([job(1, 2, 2, "shared")], runs, room(4), Limits(), NOW, sharing=share)
    assert len(result.preemptions) == 1
    # Its own user's jobs are never taken for fair share.
    result = plan([job(1, 1, 1, "shared")], runs, room(3), Limits(), NOW, sharing=share)
    assert not result.preemptions


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=4), min_size=2, max_size=4))
def test_two_users_never_preempt_each_other_in_turn(holdings: list[int]) -> None:
    """Users hold GPUs with 1-GPU jobs on a full box and each has one waiting; carry out
    whatever preemptions the plan makes, start their jobs, and plan again: no victim's
    owner gets a GPU back by preempting a job just started for another user."""
    runs: list[RunningJob] = []
    for uid, count in enumerate(holdings, start=1):
        runs += [run(100 * uid + n, uid, (len(runs),), "shared") for n in range(count)]
    gpus = len(runs)
    queue = [job(uid, uid, 1, "shared") for uid in range(1, len(holdings) + 1)]
    share = sharing(share_preemption=True)
    first = plan(queue, runs, room(gpus), Limits(), NOW, sharing=share)
    if not first.preemptions:
        return
    by_id = {r.id: r for r in runs}
    later = [r for r in runs if r.id not in {p.victim for p in first.preemptions}]
    # Each preempting job (its id is its owner's uid) runs on its victim's GPU.
    later += [
        run(1000 + p.for_job, p.for_job, by_id[p.victim].gpus, "shared") for p in first.preemptions
    ]
    losers = {by_id[p.victim].owner_uid for p in first.preemptions}
    rest = [j for j in queue if j.id not in {p.for_job for p in first.preemptions}]
    second = plan(rest, later, room(gpus), Limits(), NOW, sharing=share)
    for p in second.preemptions:
        assert not (p.for_job in losers and p.victim >= 1000)


def test_fair_share_makes_room_behind_a_head_that_cannot_preempt() -> None:
    """An 8-GPU head of user 3 waits for the box, which user 1 holds whole: user 2's short
    job behind the head takes one of user 1's GPUs, as it ends before the head's
    reservation; a job without a time limit would hold the GPU past it, and may not."""
    runs = [run(100 + n, 1, (n,), "shared", expected_end=NOW + 900) for n in range(8)]
    head = job(1, 3, 8, "shared")
    short = job(2, 2, 1, "shared", runtime_limit=60.0)
    share = sharing(share_preemption=True)
    result = plan([head, short], runs, room(8), Limits(), NOW, sharing=share)
    assert [p.for_job for p in result.preemptions] == [2]
    assert result.waiting[1].kind == Wait.GPUS
    assert render(result.waiting[2]) == (
        "preempting jobs of users over their share for 1 GPU (0 free)"
    )
    endless = job(2, 2, 1, "shared")
    result = plan([head, endless], runs, room(8), Limits(), NOW, sharing=share)
    assert not result.preemptions
    assert result.waiting[2].kind == Wait.GPUS


def test_a_job_that_preempted_goes_first_within_its_rank_on_the_gpus_its_victims_freed() -> None:
    # The victim, queued again, sorts before the job it made room for (same user, earlier).
    victim = job(1, 1, 1, "shared")
    preemptor = job(2, 1, 2, "shared")
    share = sharing()
    result = plan([victim, preemptor], [], room(2), Limits(), NOW, sharing=share)
    assert sorted(started(result)) == [1]
    claiming = replace(preemptor, claiming=True)
    result = plan([victim, claiming], [], room(2), Limits(), NOW, sharing=share)
    assert sorted(started(result)) == [2]
    assert result.order == [2, 1]
    # Never ahead of a higher class or an admin's boost.
    high = job(3, 2, 2, "high")
    result = plan([victim, claiming, high], [], room(2), Limits(), NOW, sharing=share)
    assert result.order == [3, 2, 1]


def test_a_job_that_preempted_behind_the_head_gets_the_gpus_its_victims_free() -> None:
    """User 1 holds the box, user 3's 8-GPU head waits, and user 2's short job behind it
    preempts for fair share. User 2 has used the most of late, so its job sorts after user
    1's: the victim, queued again, would take its own GPU back, and the preemptor preempt
    again. Its claim starts it first on the GPU its victim freed instead, and while its
    victim stops the room it made is coming: nothing more is preempted for it."""
    runs = [run(100 + n, 1, (n,), "shared", expected_end=NOW + 900) for n in range(8)]
    head = job(1, 3, 8, "shared")
    short = job(2, 2, 1, "shared", runtime_limit=60.0)
    share = sharing(share_preemption=True, gpu_usage={2: 100 * LOOKAHEAD})
    share = replace(share, preempt_after=10)
    first = plan([head, short], runs, room(8), Limits(), NOW, sharing=share)
    assert [(p.victim, p.for_job) for p in first.preemptions] == [(100, 2)]
    claiming = replace(short, backfill_claim=frozenset({100}))

    stopping = [replace(runs[0], stopping=True, expected_end=NOW + 30), *runs[1:]]
    while_it_stops = plan([head, claiming], stopping, room(8), Limits(), NOW + 1, sharing=share)
    assert not while_it_stops.preemptions
    assert while_it_stops.waiting[2].kind == Wait.PREEMPTING_SHARE

    again = replace(job(100, 1, 1, "shared", runtime_limit=30.0), submitted_at=NOW - 500)
    later = NOW + 31
    result = plan([head, again, claiming], runs[1:], room(8), Limits(), later, sharing=share)
    assert started(result) == {2: (0,)}
    assert result.waiting[100].kind == Wait.GPUS
    assert not result.preemptions
    # Without the claim the victim, before it in the order, takes its GPU back.
    unclaimed = plan([head, again, short], runs[1:], room(8), Limits(), later, sharing=share)
    assert started(unclaimed) == {100: (0,)}


def test_a_refused_preemption_is_planned_again_when_a_victim_is_old_enough() -> None:
    """No running job has run `min_runtime` yet: the plan says when the first will have, so
    that the preemption is decided then rather than at the next unrelated event."""
    runs = [run(100, 1, (0,), age=MIN_RUNTIME - 40), run(101, 1, (1,), age=MIN_RUNTIME - 10)]
    result = plan([job(1, 2, 2, "high")], runs, room(2), Limits(), NOW, sharing=sharing())
    assert not result.preemptions
    assert result.wake_at == NOW + 10
    ripe = plan([job(1, 2, 2, "high")], runs, room(2), Limits(), NOW + 40, sharing=sharing())
    assert sorted(p.victim for p in ripe.preemptions) == [100, 101]
    assert ripe.wake_at is None
