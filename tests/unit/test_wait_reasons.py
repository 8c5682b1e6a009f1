"""Why a job waits is one answer, whoever asks: the planner, the dependencies, the Slurm
back end and the API's views take the job's own reasons in `own_reason`'s order (hold,
backoff, dependency), before what only a plan knows (too big, drained)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.support.factories import OWNER, job
from trainq.core.reasons import Wait, WaitReason
from trainq.core.spec import JobSpec
from trainq.core.states import JobState
from trainqd.api.views import wait_reason
from trainqd.backends.slurm import Handed, slurm_wait
from trainqd.planning import inputs, planner
from trainqd.planning.records import Capacity, Limits
from trainqd.scheduling.dependencies import sort_pending
from trainqd.store import JobRow, Store

NOW = 1_000_000.0
BACKOFF_END = NOW + 60.0
HELD = WaitReason(Wait.HELD, by="bob")
BACKING_OFF = WaitReason(Wait.BACKOFF, until=BACKOFF_END)


def pending(gpus: int = 1, **changes: object) -> JobRow:
    """Job 7, queued and never started (the store's row of tests/support/factories)."""
    fields: dict[str, object] = {
        "id": 7,
        "gpus": (),
        "gpu_uuids": (),
        "created_at": NOW - 100.0,
        "started_at": None,
        "attempt_count": 0,
        **changes,
    }
    return dataclasses.replace(job(JobState.PENDING, gpus=gpus), **fields)  # type: ignore[arg-type]


def capacity(*, drained: frozenset[int] = frozenset(), host_drained: bool = False) -> Capacity:
    return Capacity(
        gpus=(0, 1),
        blocked=frozenset(),
        cpu_slots=4,
        distance=lambda a, b: 0,
        drained=drained,
        host_drained=host_drained,
    )


def described(job: JobRow, host: Capacity) -> tuple[WaitReason, WaitReason, WaitReason | None]:
    """The planner's reason, what the API's views make of it, and the Slurm back end's
    (which knows nothing of drains or of the host's size)."""
    planned = planner.plan([inputs.queued(job, 30.0)], [], host, Limits(), NOW).waiting[job.id]
    return planned, wait_reason(job, planned, NOW), slurm_wait(job, None, NOW)


@pytest.mark.parametrize(
    ("job", "host", "expected"),
    [
        pytest.param(
            pending(held_by="bob", not_before=BACKOFF_END), capacity(), HELD, id="held+backoff"
        ),
        pytest.param(pending(held_by="bob"), capacity(host_drained=True), HELD, id="drained+held"),
        pytest.param(
            pending(held_by="bob", gpus=2), capacity(drained=frozenset({1})), HELD, id="gpus+held"
        ),
        pytest.param(
            pending(not_before=BACKOFF_END),
            capacity(host_drained=True),
            BACKING_OFF,
            id="drained+backoff",
        ),
        pytest.param(pending(held_by="bob", gpus=3), capacity(), HELD, id="too_big+held"),
        pytest.param(
            pending(not_before=BACKOFF_END, gpus=3), capacity(), BACKING_OFF, id="too_big+backoff"
        ),
    ],
)
def test_a_job_held_back_twice_is_described_alike(
    job: JobRow, host: Capacity, expected: WaitReason
) -> None:
    assert described(job, host) == (expected, expected, expected)


def test_the_slurm_back_end_says_slurm_only_of_a_job_nothing_else_holds() -> None:
    handed = Handed(job_id=7, number=1, slurm_id=41, started=False)
    assert slurm_wait(pending(), handed, NOW) == WaitReason(Wait.SLURM, slurm_job=41)
    assert slurm_wait(pending(held_by="bob"), handed, NOW) == HELD
    assert slurm_wait(pending(), None, NOW) is None


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        pytest.param({"held_by": "bob"}, HELD, id="held+dependency"),
        pytest.param({"not_before": BACKOFF_END}, BACKING_OFF, id="backoff+dependency"),
        pytest.param({}, WaitReason(Wait.DEPENDENCY, after="1:ok"), id="dependency"),
    ],
)
def test_a_job_waiting_for_another_is_described_alike(
    tmp_path: Path, changes: dict[str, object], expected: WaitReason
) -> None:
    """Such a job is never planned (nor handed to Slurm): the dependencies' reason is the
    scheduler's, with either back end, and the API's views make the same of it."""
    store = Store.open(tmp_path / "trainq.db")
    try:
        first = store.submit(JobSpec(command=["x"]), OWNER, NOW)
        assert first.id == 1
        job = pending(**changes, spec=JobSpec(command=["x"], after=["1"]))
        settled = sort_pending([job], store, NOW)
    finally:
        store.close()
    assert settled.ready == []
    scheduled = settled.waiting[job.id]
    assert scheduled == expected
    assert wait_reason(job, scheduled, NOW) == expected
