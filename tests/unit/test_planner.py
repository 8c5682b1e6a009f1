"""The planner: an example for every rule, then properties over generated situations."""

from __future__ import annotations

import math
import random
from collections import Counter
from datetime import datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from trainq.core.reasons import Wait, render
from trainqd.gpus.fake import server_distances
from trainqd.planning.planner import (
    Capacity,
    Limits,
    Plan,
    QueuedJob,
    RunningJob,
    Start,
    plan,
    queue_order,
)

NOW = 1_700_000_000.0
NO_LIMITS = Limits()


def said(result: Plan) -> dict[int, str]:
    """The plan's wait reasons in the words `trainq ls` shows."""
    return {job_id: render(reason) for job_id, reason in result.waiting.items()}


def clock(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp).strftime("%H:%M:%S")


def queued(
    job_id: int,
    gpus: int = 1,
    *,
    priority: int = 0,
    submitted_at: float | None = None,
    uid: int = 1000,
    limit: float | None = None,
    not_before: float | None = None,
    cpu_nodes: int | None = None,
) -> QueuedJob:
    return QueuedJob(
        id=job_id,
        priority=priority,
        submitted_at=NOW - 1000 + job_id if submitted_at is None else submitted_at,
        owner_uid=uid,
        gpus=gpus,
        runtime_limit=limit,
        not_before=not_before,
        cpu_nodes=cpu_nodes,
    )


def running(
    job_id: int,
    gpus: tuple[int, ...],
    *,
    ends_in: float | None = None,
    uid: int = 2000,
    cpu_nodes: int | None = None,
) -> RunningJob:
    end = None if ends_in is None else NOW + ends_in
    return RunningJob(id=job_id, owner_uid=uid, gpus=gpus, expected_end=end, cpu_nodes=cpu_nodes)


def capacity(gpus: int = 8, *, blocked: tuple[int, ...] = (), cpu_slots: int = 4) -> Capacity:
    matrix = server_distances(gpus) if gpus else ()
    return Capacity(
        gpus=tuple(range(gpus)),
        blocked=frozenset(blocked),
        cpu_slots=cpu_slots,
        distance=lambda a, b: matrix[a][b],
    )


def started(result: Plan) -> dict[int, tuple[int, ...]]:
    return {start.job_id: start.gpus for start in result.starts}


# --- examples -----------------------------------------------------------------------------


def test_nothing_queued_nothing_planned() -> None:
    assert plan([], [running(1, (0,))], capacity(), NO_LIMITS, NOW) == Plan([], {}, None)


def test_a_job_on_an_idle_machine_starts_on_a_switch_pair() -> None:
    result = plan([queued(1, 2)], [], capacity(), NO_LIMITS, NOW)
    assert result == Plan([Start(1, (0, 1))], {}, None)


def test_order_is_priority_then_submission_then_id() -> None:
    queue = [
        queued(1, 8, priority=1, submitted_at=NOW - 10),
        queued(2, 8, priority=5, submitted_at=NOW - 5),
        queued(3, 8, priority=5, submitted_at=NOW - 9),
        queued(4, 8, priority=5, submitted_at=NOW - 9),
    ]
    assert sorted(queue, key=queue_order) == [queue[2], queue[3], queue[1], queue[0]]
    assert started(plan(queue, [], capacity(), NO_LIMITS, NOW)) == {3: tuple(range(8))}
    assert started(plan(queue[:2] + queue[3:], [], capacity(), NO_LIMITS, NOW)) == {
        4: tuple(range(8))
    }


def test_running_and_blocked_gpus_are_never_handed_out() -> None:
    result = plan(
        [queued(1, 2), queued(2, 1)],
        [running(9, (4, 5))],
        capacity(blocked=(0, 1, 2, 3)),
        NO_LIMITS,
        NOW,
    )
    assert started(result) == {1: (6, 7)}
    assert said(result) == {
        2: "waiting for 1 GPU (0 free, 4 busy with processes trainq did not start)"
    }


def test_a_job_gets_the_closest_free_gpus() -> None:
    # 0 and 2 are taken: the only whole switch pairs left are (4, 5) and (6, 7).
    result = plan([queued(1, 2), queued(2, 2)], [running(9, (0, 2))], capacity(), NO_LIMITS, NOW)
    assert started(result) == {1: (4, 5), 2: (6, 7)}


def test_cpu_jobs_use_their_own_slots() -> None:
    queue = [queued(1, 0), queued(2, 0), queued(3, 0), queued(4, 8), queued(5, 1, limit=30)]
    runs = [running(9, ()), running(8, (0,))]
    result = plan(queue, runs, capacity(cpu_slots=3), NO_LIMITS, NOW)
    assert started(result) == {1: (), 2: (), 5: (1,)}
    assert said(result) == {
        3: "waiting for a CPU slot (all 3 in use)",
        4: "waiting for 8 GPUs (7 free)",
    }


def test_a_job_of_several_cpu_nodes_takes_a_slot_per_node() -> None:
    # 4 slots, 2 held by a running gang of two CPU nodes: a job of one takes the third,
    # a gang of three waits, and keeps the free slot: a later job of one may not take it.
    queue = [queued(1, 0), queued(2, 0, cpu_nodes=3), queued(3, 0), queued(4, 1)]
    runs = [running(9, (), cpu_nodes=2)]
    result = plan(queue, runs, capacity(cpu_slots=4), NO_LIMITS, NOW)
    assert started(result) == {1: (), 4: (0,)}  # a GPU job needs no slot
    assert said(result) == {
        2: "waiting for 3 CPU slots (1 of 4 free)",
        3: "CPU slots reserved for job 2",
    }
    # Once the running gang is gone it starts, beside a running job of one: full again.
    result = plan(queue[1:3], [running(8, ())], capacity(cpu_slots=4), NO_LIMITS, NOW)
    assert started(result) == {2: ()}
    assert said(result) == {3: "waiting for a CPU slot (all 4 in use)"}
    # A gang bigger than the host's slots (their number lowered since) keeps nothing.
    result = plan(queue[1:3], [], capacity(cpu_slots=2), NO_LIMITS, NOW)
    assert started(result) == {3: ()}


def test_a_gang_of_cpu_and_gpu_nodes_takes_slots_and_gpus_together() -> None:
    # Parameter servers on CPU slots beside GPU trainers: the gang waits for its slots
    # (reserving no GPU meanwhile), and once it runs they count for the others.
    gang = queued(1, 2, cpu_nodes=2)
    result = plan([gang, queued(2, 1)], [running(9, ())], capacity(cpu_slots=2), NO_LIMITS, NOW)
    assert started(result) == {2: (0,)}
    assert said(result) == {1: "waiting for 2 CPU slots (1 of 2 free)"}
    result = plan([gang, queued(2, 0)], [], capacity(cpu_slots=2), NO_LIMITS, NOW)
    assert started(result) == {1: (0, 1)}
    assert said(result) == {2: "waiting for a CPU slot (all 2 in use)"}


def test_cpu_jobs_are_not_held_back_by_a_gpu_reservation() -> None:
    # The head waits for all GPUs; a CPU job without a time limit still starts.
    queue = [queued(1, 8, priority=9), queued(2, 0)]
    result = plan(queue, [running(9, (0,), ends_in=60)], capacity(), NO_LIMITS, NOW)
    assert started(result) == {2: ()}


def test_gpu_jobs_do_not_need_cpu_slots() -> None:
    result = plan([queued(1, 0), queued(2, 1)], [], capacity(cpu_slots=0), NO_LIMITS, NOW)
    assert started(result) == {2: (0,)}
    assert said(result) == {1: "no CPU slots: this daemon runs GPU jobs only (cpu_slots = 0)"}


def test_max_running_jobs_per_user_holds_without_reserving() -> None:
    limits = Limits(max_running_jobs_per_user=2)
    queue = [queued(1, 1, uid=7), queued(2, 1, uid=7), queued(3, 1, uid=7), queued(4, 1, uid=8)]
    result = plan(queue, [running(9, (0,), uid=7)], capacity(), limits, NOW)
    assert started(result) == {1: (1,), 4: (2,)}
    assert said(result) == {
        2: "held: max_running_jobs_per_user (2)",
        3: "held: max_running_jobs_per_user (2)",
    }


def test_max_gpus_per_user_holds_without_reserving() -> None:
    limits = Limits(max_gpus_per_user=6)
    queue = [queued(1, 6, uid=7, priority=9), queued(2, 6, uid=8), queued(3, 2, uid=7)]
    result = plan(queue, [running(9, (0, 1), uid=7)], capacity(), limits, NOW)
    # Job 1 would take user 7 to 8 GPUs: held, and reserving nothing, so job 2 (no time
    # limit) starts on the GPUs job 1 would otherwise have waited for.
    assert started(result) == {2: (2, 3, 4, 5, 6, 7)}
    assert said(result) == {
        1: "held: max_gpus_per_user (6)",
        3: "waiting for 2 GPUs (0 free)",
    }


def test_retry_backoff_waits_and_says_when_to_plan_again() -> None:
    queue = [
        queued(1, 1, not_before=NOW + 30),
        queued(2, 1, not_before=NOW + 10),
        queued(3, 1, not_before=NOW),
        queued(4, 8, not_before=NOW + 5),
    ]
    result = plan(queue, [], capacity(), NO_LIMITS, NOW)
    assert started(result) == {3: (0,)}
    assert said(result) == {
        1: f"retry backoff until {clock(NOW + 30)}",
        2: f"retry backoff until {clock(NOW + 10)}",
        4: f"retry backoff until {clock(NOW + 5)}",
    }
    assert result.wake_at == NOW + 5


def test_backfill_starts_a_job_that_ends_before_the_reservation() -> None:
    queue = [
        queued(1, 8, priority=9),  # the head: needs the GPUs freed at NOW + 100
        queued(2, 2, priority=5, limit=500),  # would still run then: must wait
        queued(3, 2, priority=1, limit=50),  # done by then: backfilled
    ]
    result = plan(queue, [running(9, tuple(range(6)), ends_in=100)], capacity(), NO_LIMITS, NOW)
    assert started(result) == {3: (6, 7)}
    assert said(result) == {
        1: f"waiting for 8 GPUs (2 free), expected by {clock(NOW + 100)}",
        2: "reserved GPUs for job 1",
    }


def test_a_job_ending_exactly_at_the_reservation_may_backfill() -> None:
    queue = [queued(1, 8, priority=9), queued(2, 2, limit=100)]
    result = plan(queue, [running(9, tuple(range(6)), ends_in=100)], capacity(), NO_LIMITS, NOW)
    assert started(result) == {2: (6, 7)}


def test_backfill_may_use_the_gpus_the_head_will_not_need() -> None:
    # At NOW + 100 six GPUs are free and the head needs three: three are spare, so jobs
    # without a time limit may hold up to three of today's free GPUs.
    queue = [
        queued(1, 3, priority=9),
        queued(2, 2, priority=5),
        queued(3, 1, priority=4),
        queued(4, 1, priority=3),
    ]
    runs = [running(8, (0, 1, 2, 3), ends_in=100), running(9, (4, 5))]
    result = plan(queue, runs, capacity(blocked=()), NO_LIMITS, NOW)
    assert started(result) == {2: (6, 7)}
    assert said(result)[3] == "waiting for 1 GPU (0 free)"

    runs = [running(8, (0, 1, 2), ends_in=100), running(9, (3, 4, 5))]
    queue = [queued(1, 4, priority=9), queued(2, 1), queued(3, 1), queued(4, 1)]
    result = plan(queue, runs, capacity(), NO_LIMITS, NOW)
    # Spare at NOW + 100: 2 free + 3 freed - 4 needed = 1.
    assert started(result) == {2: (6,)}
    assert said(result) == {
        1: f"waiting for 4 GPUs (2 free), expected by {clock(NOW + 100)}",
        3: "reserved GPUs for job 1",
        4: "reserved GPUs for job 1",
    }


def test_a_reservation_behind_a_job_without_a_time_limit_cannot_be_foreseen() -> None:
    runs = [running(9, tuple(range(6)))]
    queue = [queued(1, 8, priority=9), queued(2, 1), queued(3, 1, limit=3600)]
    result = plan(queue, runs, capacity(), NO_LIMITS, NOW)
    # Job 3 ends at a known time: it cannot delay a start that depends on a job that never
    # ends. Job 2 never ends either, and nothing is spare for it.
    assert started(result) == {3: (6,)}
    assert said(result) == {1: "waiting for 8 GPUs (2 free)", 2: "reserved GPUs for job 1"}


def test_only_the_first_blocked_job_gets_a_reservation() -> None:
    runs = [running(8, (0, 1, 2, 3), ends_in=100), running(9, (4, 5), ends_in=200)]
    queue = [
        queued(1, 3, priority=9),  # head: at NOW + 100 six are free, three spare
        queued(2, 8, priority=5),  # blocked too, but reserves nothing
        queued(3, 2, priority=1, limit=1000),  # would delay job 2 (not reserved): starts
    ]
    result = plan(queue, runs, capacity(), NO_LIMITS, NOW)
    assert started(result) == {3: (6, 7)}
    assert said(result) == {
        1: f"waiting for 3 GPUs (2 free), expected by {clock(NOW + 100)}",
        2: "waiting for 8 GPUs (2 free)",
    }


def test_higher_priority_starts_count_in_the_reservation() -> None:
    # Job 1 starts now and ends at NOW + 50; the head needs its GPUs too.
    queue = [queued(1, 6, priority=9, limit=50), queued(2, 8, priority=8), queued(3, 2)]
    result = plan(queue, [], capacity(), NO_LIMITS, NOW)
    assert started(result) == {1: tuple(range(6))}
    assert said(result) == {
        2: f"waiting for 8 GPUs (2 free), expected by {clock(NOW + 50)}",
        3: "reserved GPUs for job 2",
    }


def test_a_job_bigger_than_the_host_never_starts_and_blocks_nobody() -> None:
    queue = [queued(1, 9, priority=9), queued(2, 8)]
    result = plan(queue, [], capacity(), NO_LIMITS, NOW)
    assert started(result) == {2: tuple(range(8))}
    assert said(result) == {1: "needs 9 GPUs; this host has 8"}


def test_a_host_without_gpus_runs_cpu_jobs_only() -> None:
    result = plan([queued(1, 1), queued(2, 0)], [], capacity(0), NO_LIMITS, NOW)
    assert started(result) == {2: ()}
    assert said(result) == {1: "needs 1 GPU; this host has 0"}


def test_a_blocked_gpu_of_a_running_job_is_not_counted_as_coming_back() -> None:
    # GPU 0 belongs to job 9 but a foreign process holds it too: when job 9 ends, only
    # GPU 1 returns, so the head (8 GPUs) has no foreseeable start.
    runs = [running(9, (0, 1), ends_in=10)]
    queue = [queued(1, 8, priority=9), queued(2, 1, limit=10**6), queued(3, 1)]
    result = plan(queue, runs, capacity(blocked=(0,)), NO_LIMITS, NOW)
    assert started(result) == {2: (2,)}
    assert said(result)[1] == (
        "waiting for 8 GPUs (6 free, 1 busy with processes trainq did not start)"
    )
    assert said(result)[3] == "reserved GPUs for job 1"


# --- properties ---------------------------------------------------------------------------

UIDS = (1, 2, 3)
Situation = tuple[list[QueuedJob], list[RunningJob], Capacity, Limits]


@st.composite
def situations(draw: st.DrawFn) -> Situation:
    gpu_count = draw(st.integers(min_value=0, max_value=8))
    gpus = list(range(gpu_count))
    blocked = draw(st.sets(st.sampled_from(gpus), max_size=2)) if gpus else set()
    cpu_slots = draw(st.integers(min_value=0, max_value=3))
    # Mostly free GPUs, so that backfill decisions come up often.
    owners = st.sampled_from((None, None, None, 0, 1, 2, 3))
    owner = draw(st.lists(owners, min_size=gpu_count, max_size=gpu_count))
    ends = st.one_of(st.none(), st.floats(min_value=NOW - 5, max_value=NOW + 1000))
    runs = []
    for job_number in range(4):
        held = tuple(gpu for gpu in gpus if owner[gpu] == job_number)
        if held or draw(st.booleans()):
            uid = draw(st.sampled_from(UIDS))
            # None: a job of one node; else as many nodes without GPUs (a gang's).
            cpu_nodes = draw(st.one_of(st.none(), st.integers(min_value=1, max_value=3)))
            runs.append(RunningJob(100 + job_number, uid, held, draw(ends), cpu_nodes=cpu_nodes))
    queue = draw(
        st.lists(
            st.builds(
                QueuedJob,
                id=st.integers(min_value=1, max_value=60),
                priority=st.integers(min_value=0, max_value=2),
                submitted_at=st.sampled_from((NOW - 30, NOW - 20, NOW - 10)),
                owner_uid=st.sampled_from(UIDS),
                gpus=st.one_of(
                    st.integers(min_value=0, max_value=3),
                    st.integers(min_value=0, max_value=gpu_count + 1),
                ),
                runtime_limit=st.one_of(st.none(), st.floats(min_value=1, max_value=2000)),
                not_before=st.one_of(
                    st.none(), st.sampled_from((NOW - 1, NOW, NOW + 1, NOW + 100))
                ),
                cpu_nodes=st.one_of(st.none(), st.integers(min_value=1, max_value=4)),
            ),
            max_size=10,
            unique_by=lambda job: job.id,
        )
    )
    some_limit = st.one_of(st.just(0), st.integers(min_value=1, max_value=6))
    limits = Limits(max_running_jobs_per_user=draw(some_limit), max_gpus_per_user=draw(some_limit))
    matrix = server_distances(gpu_count) if gpu_count else ()
    room = Capacity(tuple(gpus), frozenset(blocked), cpu_slots, lambda a, b: matrix[a][b])
    return queue, runs, room, limits


@st.composite
def contended(draw: st.DrawFn) -> Situation:
    """A busy host, a big job at the front and small jobs behind it: backfill's home turf."""
    gpu_count = draw(st.integers(min_value=4, max_value=8))
    blocked = draw(st.sets(st.integers(0, gpu_count - 1), max_size=1))
    busy = draw(st.integers(min_value=1, max_value=gpu_count - 1))
    ends = st.one_of(st.none(), st.integers(min_value=1, max_value=500).map(lambda s: NOW + s))
    runs = [RunningJob(100 + gpu, 9, (gpu,), draw(ends)) for gpu in range(busy)]
    head = QueuedJob(1, 10, NOW - 60, 1, draw(st.integers(gpu_count - busy, gpu_count)), None)
    limits = st.one_of(st.none(), st.integers(min_value=1, max_value=600).map(float))
    behind = draw(
        st.lists(
            st.builds(
                QueuedJob,
                id=st.integers(min_value=2, max_value=40),
                priority=st.integers(min_value=0, max_value=2),
                submitted_at=st.just(NOW - 30),
                owner_uid=st.sampled_from(UIDS),
                gpus=st.integers(min_value=1, max_value=3),
                runtime_limit=limits,
            ),
            min_size=1,
            max_size=6,
            unique_by=lambda job: job.id,
        )
    )
    matrix = server_distances(gpu_count)
    room = Capacity(tuple(range(gpu_count)), frozenset(blocked), 2, lambda a, b: matrix[a][b])
    return [head, *behind], runs, room, NO_LIMITS


def end_of(job: QueuedJob) -> float:
    return math.inf if job.runtime_limit is None else NOW + job.runtime_limit


@settings(max_examples=250, deadline=None)
@given(situations())
def test_no_gpu_is_given_twice_or_while_blocked(situation: Situation) -> None:
    queue, runs, room, limits = situation
    result = plan(queue, runs, room, limits, NOW)
    by_id = {job.id: job for job in queue}
    in_use = [gpu for job in runs for gpu in job.gpus]
    for start in result.starts:
        assert len(start.gpus) == by_id[start.job_id].gpus
        assert set(start.gpus) <= set(room.gpus) - room.blocked
        in_use.extend(start.gpus)
    assert len(in_use) == len(set(in_use))
    # Every queued job is either started or told why not, never both.
    assert set(started(result)).isdisjoint(result.waiting)
    assert set(started(result)) | set(result.waiting) == set(by_id)


@settings(max_examples=250, deadline=None)
@given(situations())
def test_starts_respect_cpu_slots_limits_and_backoff(situation: Situation) -> None:
    queue, runs, room, limits = situation
    result = plan(queue, runs, room, limits, NOW)
    by_id = {job.id: job for job in queue}
    jobs = [by_id[job_id] for job_id in started(result)]
    # A slot per node without GPUs: a gang of them never crowds the host past its slots.
    slots_running = sum(job.slots for job in runs)
    slots_started = sum(job.slots for job in jobs)
    assert slots_started <= max(0, room.cpu_slots - slots_running)
    assert all(job.not_before is None or job.not_before <= NOW for job in jobs)
    job_count = Counter(job.owner_uid for job in runs)
    gpu_count = Counter({uid: 0 for uid in UIDS})
    for job in runs:
        gpu_count[job.owner_uid] += len(job.gpus)
    for job in jobs:
        job_count[job.owner_uid] += 1
        gpu_count[job.owner_uid] += job.gpus
        if limits.max_running_jobs_per_user:
            assert job_count[job.owner_uid] <= limits.max_running_jobs_per_user
        if limits.max_gpus_per_user:
            assert gpu_count[job.owner_uid] <= limits.max_gpus_per_user


def usable_gpus_at(
    time: float, room: Capacity, runs: list[RunningJob], starts: list[tuple[QueuedJob, Start]]
) -> int:
    """GPUs trainq may hand out at `time` if every job runs exactly to its limit."""
    usable = set(room.gpus) - room.blocked
    for job in runs:
        if job.expected_end is None or job.expected_end > time:
            usable -= set(job.gpus)
    for job, start in starts:
        if end_of(job) > time:
            usable -= set(start.gpus)
    return len(usable)


@settings(max_examples=500, deadline=None)
@given(st.one_of(situations(), contended()))
def test_backfilled_jobs_never_delay_the_head(situation: Situation) -> None:
    queue, runs, room, limits = situation
    result = plan(queue, runs, room, limits, NOW)
    ordered = sorted(queue, key=queue_order)
    head = next(
        (
            job
            for job in ordered
            # (not one of CPU and GPU nodes that waits for a CPU slot: no head, that)
            if job.gpus > 0
            and said(result).get(job.id, "").startswith("waiting for")
            and result.waiting[job.id].kind != Wait.CPU_SLOT
        ),
        None,
    )
    if head is None:
        return
    position = ordered.index(head)
    starts = {start.job_id: start for start in result.starts}
    before = [(job, starts[job.id]) for job in ordered[:position] if job.id in starts]
    after = [(job, starts[job.id]) for job in ordered[position:] if job.id in starts]

    # The head's reservation, worked out from what runs ahead of it alone.
    moments = sorted(
        {NOW}
        | {job.expected_end for job in runs if job.expected_end is not None}
        | {end_of(job) for job, _ in before if not math.isinf(end_of(job))}
    )
    reservation = next(
        (t for t in moments if usable_gpus_at(t, room, runs, before) >= head.gpus), math.inf
    )
    if not math.isinf(reservation):
        assert usable_gpus_at(reservation, room, runs, before + after) >= head.gpus
    else:
        # Not foreseeable: jobs that never end may only take what the head will not need
        # once everything else has ended.
        usable = len(set(room.gpus) - room.blocked)
        forever = sum(job.gpus for job, _ in after if math.isinf(end_of(job)))
        assert forever <= max(0, usable - head.gpus)


@settings(max_examples=150, deadline=None)
@given(situations(), st.randoms(use_true_random=False))
def test_the_plan_is_deterministic(situation: Situation, rng: random.Random) -> None:
    queue, runs, room, limits = situation
    first = plan(queue, runs, room, limits, NOW)
    shuffled_queue, shuffled_runs = list(queue), list(runs)
    rng.shuffle(shuffled_queue)
    rng.shuffle(shuffled_runs)
    assert plan(shuffled_queue, shuffled_runs, room, limits, NOW) == first


@settings(max_examples=150, deadline=None)
@given(situations())
def test_a_job_that_fits_on_an_idle_machine_starts(situation: Situation) -> None:
    queue, _, room, _ = situation
    idle = Capacity(room.gpus, frozenset(), room.cpu_slots, room.distance)
    result = plan(queue, [], idle, NO_LIMITS, NOW)
    eligible = [job for job in queue if job.not_before is None or job.not_before <= NOW]
    if not eligible:
        return
    first = min(eligible, key=queue_order)
    fits = first.gpus <= len(room.gpus) and first.slots <= room.cpu_slots
    assert (first.id in started(result)) == fits


def test_a_running_job_past_its_expected_end_makes_the_head_expected_now() -> None:
    runs = [running(9, tuple(range(8)), ends_in=-30)]  # over its limit, still stopping
    result = plan([queued(1, 2)], runs, capacity(), NO_LIMITS, NOW)
    assert said(result) == {1: f"waiting for 2 GPUs (0 free), expected by {clock(NOW)}"}


def test_a_negative_gpu_count_is_refused_without_crashing() -> None:
    result = plan([queued(1, -1), queued(2, 1)], [], capacity(), NO_LIMITS, NOW)
    assert started(result) == {2: (0,)}
    assert said(result) == {1: "needs -1 GPUs; this host has 8"}
