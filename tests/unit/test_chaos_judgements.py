"""The chaos soak's judgements (bench/chaos_ledger.py, bench/chaos_checks.py) on ledgers and
records made up to break each invariant: each breach is found, and a clean history passes."""

from __future__ import annotations

from typing import Any

from bench.chaos_checks import (
    acknowledged_kept,
    failed_by_trainq,
    gpus_exclusive,
    leftovers,
    none_started_on_drained,
    stopped_stay_stopped,
    stops_take_effect,
    usage_matches,
)
from bench.chaos_ledger import Ledger, judge_against_api, judge_attempts, judge_gpu_sharing
from bench.chaos_procs import Proc


def line(t: float, ev: str, attempt: int, step: int, pid: int = 0, **more: Any) -> dict[str, Any]:
    return {"t": t, "ev": ev, "attempt": attempt, "pid": pid or 100 + attempt, "step": step, **more}


def start(t: float, attempt: int, step: int, uuid: str = "GPU-a", gpu: str = "0") -> dict[str, Any]:
    return line(t, "start", attempt, step, cuda="0", gpus=gpu, uuids=uuid)


# Two steps, a checkpoint, preempted after step 3; resumed from the checkpoint to the end.
CLEAN = [
    start(1, 1, 0),
    line(2, "step", 1, 1),
    line(3, "step", 1, 2),
    line(3.1, "ckpt", 1, 2),
    line(4, "step", 1, 3),
    line(4.5, "ckpt", 1, 3),
    line(4.6, "stopped", 1, 3),
    start(10, 2, 3),
    line(11, "step", 2, 4),
    line(11.1, "ckpt", 2, 4),
    line(11.2, "done", 2, 4),
]


def iso(t: float) -> str:
    return f"1970-01-01T00:00:{t:09.6f}+00:00"


def job(job_id: int = 7, gpus: int = 1, state: str = "COMPLETED", **more: Any) -> dict[str, Any]:
    attempts = more.pop(
        "attempts",
        [
            {"number": 1, "gpus": [0], "started_at": iso(0.5), "ended_at": iso(5)},
            {"number": 2, "gpus": [0], "started_at": iso(9), "ended_at": iso(12)},
        ],
    )
    return {
        "id": job_id,
        "state": state,
        "gpus": [],
        "owner": {"user": "ann", "uid": 1},
        "spec": {"gpus": gpus},
        "attempts": attempts,
        **more,
    }


def test_a_clean_history_breaks_nothing() -> None:
    ledger = Ledger(7, CLEAN)
    assert judge_attempts(ledger) == []
    assert judge_against_api(ledger, job()) == []
    assert judge_gpu_sharing(ledger.spans()) == []


def test_a_resume_from_before_the_checkpoint_is_found() -> None:
    lines = [*CLEAN[:7], start(10, 2, 0)]
    assert judge_attempts(Ledger(7, lines)) == [
        "job 7: attempt 2 started from step 0, but the last checkpoint was 3 and step 3 the "
        "furthest done"
    ]


def test_an_attempt_that_runs_on_after_the_next_began_is_found() -> None:
    lines = [*CLEAN[:3], start(3.5, 2, 0), line(4, "step", 1, 3)]
    assert judge_attempts(Ledger(7, lines)) == [
        "job 7: attempt 1 wrote 'step' after attempt 2 began (two attempts ran at once)"
    ]


def test_one_attempt_run_by_two_processes_is_found() -> None:
    lines = [start(1, 1, 0), line(2, "step", 1, 1), line(2.5, "step", 1, 2, pid=999)]
    assert judge_attempts(Ledger(7, lines)) == [
        "job 7: attempt 1 was run by 2 processes [101, 999]"
    ]


def test_a_trainer_on_other_gpus_or_after_its_end_is_found() -> None:
    record = job(
        attempts=[{"number": 1, "gpus": [3], "started_at": iso(0.5), "ended_at": iso(2.5)}]
    )
    assert judge_against_api(Ledger(7, CLEAN[:4]), record) == [
        "job 7: attempt 1 saw GPUs '0', trainqd gave '3'",
        "job 7: attempt 1 kept writing after trainqd recorded its end at 2.500",
    ]


def test_two_jobs_on_one_gpu_at_once_are_found() -> None:
    one = Ledger(1, [start(1, 1, 0, uuid="GPU-a"), line(5, "step", 1, 1)])
    two = Ledger(2, [start(4, 1, 0, uuid="GPU-a,GPU-b"), line(6, "step", 1, 1)])
    after = Ledger(3, [start(5.5, 1, 0, uuid="GPU-b"), line(7, "step", 1, 1)])
    assert judge_gpu_sharing([*one.spans(), *two.spans()]) == [
        "jobs 1 (attempt 1) and 2 (attempt 1) both ran on ['GPU-a'] between 4.000 and 5.000"
    ]
    assert judge_gpu_sharing([*one.spans(), *after.spans()]) == []


def test_trainqd_giving_one_gpu_to_two_jobs_is_found() -> None:
    running = [{"number": 1, "gpus": [0], "started_at": iso(1), "ended_at": None}]
    broken = gpus_exclusive(
        [
            job(1, state="RUNNING", gpus=1, attempts=running) | {"gpus": [0]},
            job(2, state="RUNNING", gpus=1, attempts=running) | {"gpus": [0]},
        ]
    )
    assert broken == [
        "GPU 0 is held by jobs 1 and 2",
        "GPU 0: job 2 attempt 1 started before job 1 attempt 1 ended",
    ]


def test_a_lost_acknowledged_job_is_found() -> None:
    assert acknowledged_kept({7: "ann", 8: "ann"}, {7: job()}) == [
        "job 8 of ann was acknowledged and is gone"
    ]


def test_usage_that_differs_from_the_attempts_is_found() -> None:
    # 4.5 s and 3 s on one GPU: 7.5 s = 0.0021 GPU-hours (to 4 places, as the report gives).
    report = {"since": iso(0), "until": iso(20), "rows": []}
    row = {"user": "ann", "jobs": 1, "completed": 1, "failed": 0, "stopped": 0}
    assert usage_matches(report | {"rows": [row | {"gpu_hours": 0.0021}]}, [job()]) == []
    assert usage_matches(report | {"rows": [row | {"gpu_hours": 0.0031}]}, [job()]) == [
        "ann: the report says 0.0031 GPU-hours, the attempts add up to 0.002083"
    ]


def test_a_process_of_an_ended_attempt_is_a_suspect() -> None:
    def proc(pid: int, uid: int, job_id: int | None, attempt: int | None) -> Proc:
        return Proc(pid, uid, 1, ("x",), job_id, attempt, monitor=False)

    ended = proc(10, 5, 7, 1)
    running = proc(11, 5, 8, 1)
    stray = proc(12, 5, None, None)
    agent = proc(13, 5, None, None)
    jobs = {
        7: job(7, state="RUNNING"),
        8: job(8, state="RUNNING", attempts=[{"number": 1, "gpus": [1], "ended_at": None}]),
    }
    found = leftovers([ended, running, stray, agent], jobs, {5: "ann"}, ours={13})
    assert found == [ended, stray]


def test_a_start_on_a_drained_gpu_is_found() -> None:
    # The attempts started on GPU 0 at 0.5 s and 9 s.
    drains = [(0, 1.0, 8.0), (0, 8.5, None), (1, 0.0, None)]
    assert none_started_on_drained(drains, [job()]) == [
        "job 7 attempt 2 started on GPU 0 while it was drained"
    ]
    assert none_started_on_drained([(0, 0.1, 0.4), (1, 0.0, None)], [job()]) == []


def test_a_stopped_job_that_runs_again_is_found() -> None:
    jobs = {7: job(), 8: job(8, state="PENDING", attempts=[])}
    assert stopped_stay_stopped({7: 6.0, 8: 1.0}, jobs) == [
        "job 7 attempt 2 started after its stop was acknowledged",
        "job 8 is PENDING again after its stop was acknowledged",
    ]
    assert stopped_stay_stopped({7: 12.5}, jobs) == []


def test_a_stop_that_does_not_take_effect_is_found() -> None:
    jobs = {7: job(), 8: job(8, state="STOPPING")}
    assert stops_take_effect({7: 1.0, 8: 1.0}, jobs, now=20.0, limit=30) == []
    assert stops_take_effect({7: 1.0, 8: 1.0}, jobs, now=40.0, limit=30) == [
        "job 8 still STOPPING 30 s after its stop was acknowledged"
    ]


def test_a_job_failed_by_trainq_is_found() -> None:
    lost = {"number": 1, "gpus": [0], "outcome": "lost", "reason": None}
    refused = {"number": 1, "gpus": [0], "outcome": "start_failed", "reason": "File exists"}
    crashed = {"number": 1, "gpus": [0], "outcome": "exited", "reason": None}
    jobs = [
        job(1, state="FAILED", attempts=[lost], failure_reason="lost 4 times"),
        job(2, state="FAILED", attempts=[refused], failure_reason="File exists"),
        job(3, state="FAILED", attempts=[crashed], failure_reason="exit 134"),
    ]
    assert failed_by_trainq(jobs) == [
        "job 2 attempt 1 could not start: 'File exists'",
        "job 3 FAILED: 'exit 134'",
    ]
