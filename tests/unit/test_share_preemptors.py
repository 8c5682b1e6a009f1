"""Who may preempt for fair share: a user whose preemptor ran less than the minimum (or not
at all) loses the right until a job of theirs has run that long."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from trainq.core.spec import JobSpec
from trainq.core.states import JobState
from trainqd.planning.share_preemptors import SharePreemptors
from trainqd.store.rows import AttemptRow, JobOwner, JobRow

ALICE = JobOwner(uid=1001, gid=1001, user="alice")


def row(job_id: int, state: JobState) -> JobRow:
    return JobRow(
        id=job_id, name=None, state=state, priority=0, owner=ALICE,
        spec=JobSpec(command=["true"], gpus=1), gpus=(), gpu_uuids=(), created_at=0.0,
        started_at=None, ended_at=None, failure_reason=None, stop_reason=None,
        not_before=None, runtime_used=0.0, attempt_count=0, lost_count=0,
    )  # fmt: skip


def attempt(job_id: int, started: float, ended: float | None) -> AttemptRow:
    return AttemptRow(
        job_id=job_id, number=1, gpus=(0,), started_at=started, ended_at=ended, exit_code=0,
        signal=None, outcome="exited", reason=None, retried=False, monitor_pid=None,
        monitor_start=None, boot_id=None,
    )  # fmt: skip


class Jobs:
    def __init__(self) -> None:
        self.rows: dict[int, JobRow] = {}
        self.history: dict[int, list[AttemptRow]] = {}

    def unfinished(self, job_id: int) -> JobRow | None:
        return self.rows.get(job_id)

    def attempts(self, ids: Sequence[int]) -> Mapping[int, list[AttemptRow]]:
        return {job_id: self.history.get(job_id, []) for job_id in ids}


def review(rules: SharePreemptors, jobs: Jobs, now: float, starts: dict[int, float]) -> None:
    active = [r for r in jobs.rows.values() if r.state == JobState.RUNNING]
    rules.review(active, starts, jobs.unfinished, jobs.attempts, now)


def test_a_preemptor_that_ends_at_once_bars_its_owner_until_a_job_runs() -> None:
    rules, jobs = SharePreemptors(min_runtime=600), Jobs()
    jobs.rows[1] = row(1, JobState.PENDING)
    rules.preempted_for(jobs.rows[1], now=100)
    review(rules, jobs, 101, {})
    assert rules.barred == frozenset()  # still waiting for its victims
    del jobs.rows[1]  # it ran for a second and completed
    jobs.history[1] = [attempt(1, 105, 106)]
    review(rules, jobs, 107, {})
    assert rules.barred == {ALICE.uid}
    # A job of hers that runs the minimum gives the right back.
    jobs.rows[2] = row(2, JobState.RUNNING)
    review(rules, jobs, 200, {2: 150})
    assert rules.barred == {ALICE.uid}
    review(rules, jobs, 800, {2: 150})
    assert rules.barred == frozenset()


def test_a_preemptor_that_runs_long_enough_or_is_stopped_unstarted() -> None:
    rules, jobs = SharePreemptors(min_runtime=600), Jobs()
    jobs.rows[1] = row(1, JobState.RUNNING)
    rules.preempted_for(jobs.rows[1], now=100)
    review(rules, jobs, 800, {1: 110})
    assert rules.barred == frozenset()
    jobs.rows[3] = row(3, JobState.PENDING)
    rules.preempted_for(jobs.rows[3], now=900)
    del jobs.rows[3]  # stopped before it ever started
    review(rules, jobs, 901, {})
    assert rules.barred == {ALICE.uid}


def test_no_minimum_no_bar() -> None:
    rules, jobs = SharePreemptors(min_runtime=0), Jobs()
    rules.preempted_for(row(1, JobState.PENDING), now=100)
    review(rules, jobs, 101, {})
    assert rules.barred == frozenset()
