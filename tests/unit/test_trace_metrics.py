"""The trace benchmark's measures (bench/trace_metrics.py) on schedules worked out by hand."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

# The benchmarks are scripts that import each other by module name (`from common import`);
# appended, not prepended, so that the standard library's own `trace` keeps its name.
sys.path.append(str(Path(__file__).resolve().parents[2] / "bench"))

from trace_metrics import (
    Job,
    Preemption,
    busy_while_waiting,
    fairness,
    inferred_preemptions,
    jain,
    lost_to_preemption,
    makespan,
    waits_by_size,
    water_fill,
    window_fairness,
)

# Two GPUs. User a fills both at 0; b's 1-GPU job waits 2-4 (GPU 2 idle for 3-4: a slow
# dispatch), b's 2-GPU job waits 5-10, c's CPU job runs at once.
SCHEDULE = [
    Job("a", 1, 0.0, ((0.0, 10.0),)),
    Job("a", 1, 0.0, ((0.0, 3.0),)),
    Job("b", 1, 2.0, ((4.0, 10.0),)),
    Job("b", 2, 5.0, ((10.0, 12.0),)),
    Job("c", 0, 1.0, ((1.0, 3.0),)),
]


def test_makespan_runs_from_the_first_submit_to_the_last_end() -> None:
    assert makespan(SCHEDULE) == 12.0


def test_busy_fraction_counts_only_the_time_when_gpu_work_waits() -> None:
    # Waiting: 2-4 and 5-10 (7 s, 14 GPU-seconds); used: 2 + 1 + 10 GPU-seconds. The CPU
    # job, and 4-5 and 10-12 when nothing waits, do not count.
    assert busy_while_waiting(SCHEDULE, gpus=2) == pytest.approx(13 / 14)


def test_busy_fraction_is_undefined_when_nothing_ever_waits() -> None:
    assert math.isnan(busy_while_waiting([Job("a", 1, 0.0, ((0.0, 5.0),))], gpus=1))


def test_waits_by_size_give_the_mean_and_the_nearest_rank_p95() -> None:
    waits = waits_by_size(SCHEDULE)
    assert list(waits) == ["1 GPU", "2-4 GPUs", "CPU"]  # no 8-GPU job: no row
    assert waits["1 GPU"].n == 3
    assert waits["1 GPU"].mean == pytest.approx(2 / 3)
    assert waits["1 GPU"].p95 == 2.0  # waits 0, 0, 2: the third of three
    assert (waits["2-4 GPUs"].mean, waits["2-4 GPUs"].p95) == (5.0, 5.0)
    assert waits["CPU"].mean == 0.0


def test_a_preempted_job_waits_again_until_it_resumes() -> None:
    job = Job("a", 1, 0.0, ((0.0, 2.0), (5.0, 8.0)))
    assert [job.waiting_at(t) for t in (1.0, 3.0, 6.0, 9.0)] == [False, True, False, False]
    assert job.gpu_seconds_in(0.0, 6.0) == 3.0


def test_a_job_that_preempts_after_being_preempted_is_timed_from_its_own_start() -> None:
    job = Job("a", 1, 0.0, ((0.0, 2.0), (5.0, 8.0)))
    assert job.start_after(4.9) == 5.0
    assert job.start_after(0.0) == 0.0


def test_jain_index() -> None:
    assert jain([1.0, 1.0, 1.0]) == 1.0
    assert jain([1.0, 0.0]) == 0.5
    assert jain([2.0, 1.0]) == pytest.approx(0.9)


def test_water_fill_gives_what_one_does_not_want_to_the_others() -> None:
    assert water_fill({"a": 10.0, "b": 2.0, "c": 10.0}, 12.0) == {"b": 2.0, "a": 5.0, "c": 5.0}
    assert water_fill({"a": 1.0, "b": 1.0}, 10.0) == {"a": 1.0, "b": 1.0}


# Two GPUs, h has three 1-GPU jobs of 10 s, l has one or two, all submitted at 0.
FIFO = [
    Job("h", 1, 0.0, ((0.0, 10.0),)),
    Job("h", 1, 0.0, ((0.0, 10.0),)),
    Job("h", 1, 0.0, ((10.0, 20.0),)),
    Job("l", 1, 0.0, ((10.0, 20.0),)),
]
SHARED = [
    Job("h", 1, 0.0, ((0.0, 10.0),)),
    Job("l", 1, 0.0, ((0.0, 10.0),)),
    Job("h", 1, 0.0, ((10.0, 20.0),)),
    Job("h", 1, 0.0, ((10.0, 20.0),)),
    Job("l", 1, 0.0, ((20.0, 30.0),)),
]


def test_a_window_where_one_user_has_everything_scores_one_half() -> None:
    # Both wait in 0-10; fair shares 10 and 10 GPU-seconds; h got 20, l 0: Jain(2, 0).
    assert window_fairness(FIFO, 0.0, 10.0, gpus=2) == pytest.approx(0.5)


def test_a_window_split_evenly_between_users_with_backlog_scores_one() -> None:
    assert window_fairness(SHARED, 0.0, 10.0, gpus=2) == pytest.approx(1.0)


def test_a_window_with_fewer_than_two_users_with_backlog_is_not_counted() -> None:
    # 10-20 in SHARED: only l waits; in FIFO nobody does.
    assert window_fairness(SHARED, 10.0, 20.0, gpus=2) is None
    assert window_fairness(FIFO, 10.0, 20.0, gpus=2) is None


# Two GPUs, window 0-10: h alone wants GPUs until 5 and uses both; from 5, l wants two and
# gets one, h keeps one; h's third job waits throughout.
LATECOMER = [
    Job("h", 1, 0.0, ((0.0, 10.0),)),
    Job("h", 1, 0.0, ((0.0, 5.0),)),
    Job("h", 1, 0.0, ((10.0, 20.0),)),
    Job("l", 1, 5.0, ((5.0, 10.0),)),
    Job("l", 1, 5.0, ((10.0, 15.0),)),
]


def test_gpus_only_one_user_wanted_for_a_while_are_theirs_for_that_while() -> None:
    # Moment by moment: h's share is 2 GPUs for 0-5 and 1 for 5-10 (15), l's 1 for 5-10
    # (5); each got exactly that.
    assert window_fairness(LATECOMER, 0.0, 10.0, gpus=2) == pytest.approx(1.0)
    # Pooled over the window, h wanted 25 GPU-seconds and l 10 of the 20: 10 each, so h's
    # 15 counts as too much and l's 5 as too little: Jain(1.5, 0.5).
    assert window_fairness(LATECOMER, 0.0, 10.0, gpus=2, pooled=True) == pytest.approx(0.8)


def test_fairness_averages_the_windows_that_count() -> None:
    fifo = fairness(FIFO, gpus=2, window=10.0)
    assert (fifo.index, fifo.windows, fifo.of) == (0.5, 1, 2)
    shared = fairness(SHARED, gpus=2, window=10.0)
    assert (shared.index, shared.windows, shared.of) == (1.0, 1, 3)


def test_lost_to_preemption_counts_what_preempted_jobs_ran_beyond_their_work() -> None:
    # A 2-GPU job of 5 s of work ran 3 s, was stopped, and ran 4 s more: 2 s done twice.
    redone = Job("a", 2, 0.0, ((0.0, 3.0), (6.0, 10.0)), work=5.0)
    # One that resumed exactly from its checkpoint lost nothing, and so did one never stopped
    # (its run's own start-up is not preemption's).
    resumed = Job("a", 1, 0.0, ((0.0, 3.0), (6.0, 8.0)), work=5.0)
    whole = Job("b", 1, 0.0, ((0.0, 5.5),), work=5.0)
    assert lost_to_preemption([redone, resumed, whole]) == 4.0


def test_a_stop_is_put_down_to_the_waiting_job_that_may_preempt_and_starts_first() -> None:
    names = ["low-1", "low-2", "high", "normal", "later"]
    jobs = [
        Job("a", 1, 0.0, ((0.0, 4.0), (9.0, 12.0))),  # stopped at 4
        Job("a", 1, 0.0, ((0.0, 4.1), (9.0, 12.0))),  # stopped at 4.1
        Job("b", 2, 3.0, ((5.0, 8.0),)),  # may preempt, waiting at 4, starts at 5
        Job("c", 2, 1.0, ((4.5, 6.0),)),  # starts first, but may not preempt
        Job("b", 1, 4.2, ((4.6, 6.0),)),  # may preempt, submitted after both stops
    ]
    found = inferred_preemptions(names, jobs, [False, False, True, False, True])
    assert found == [Preemption("high", 4.0, 2)]
    assert jobs[2].start_after(found[0].decided) - found[0].decided == 1.0


def test_a_stop_with_no_job_that_may_preempt_waiting_is_no_preemption() -> None:
    jobs = [Job("a", 1, 0.0, ((0.0, 4.0), (5.0, 6.0))), Job("b", 1, 5.0, ((6.0, 7.0),))]
    assert inferred_preemptions(["x", "y"], jobs, [False, True]) == []
