"""GPU sampling: the fake backend's live readings, one attempt's samples and summary, the
idle rule, and the store's schema step that keeps the summary."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from tests.support.schema_history import downgrade
from trainq.core.spec import JobSpec
from trainq.core.states import JobState
from trainqd.gpus import GpuBackendError, GpuSample, open_backend
from trainqd.scheduling.idle import IdlePolicy, IdleWatch, duration
from trainqd.scheduling.sampling import RunningAttempt, Sampler, job_sample
from trainqd.store import Store
from trainqd.store.rows import JobOwner
from trainqd.store.schema import SCHEMA_VERSION


def _write(path: Path, gpus: list[dict[str, object]]) -> None:
    path.write_text(json.dumps({"gpus": gpus}))


def test_fake_file_readings_are_reread_at_each_sample(tmp_path: Path) -> None:
    spec = tmp_path / "gpus.json"
    _write(spec, [{"utilization": 90, "memory_used_mib": 1000, "power_watts": 250.5}, {}])
    backend = open_backend(f"fake:{spec}")
    first = backend.sample()
    assert first[0] == GpuSample(0, 90.0, 1000, 250.5)
    assert first[1].utilization_percent == 0.0  # no readings given: an idle board
    assert backend.usage()[0].memory_used_mib == 1000
    _write(spec, [{"utilization": 3, "memory_used_mib": 7}, {"utilization": 55}])
    again = backend.sample()
    assert (again[0].utilization_percent, again[0].memory_used_mib) == (3.0, 7)
    assert again[1].utilization_percent == 55.0


def test_fake_file_refuses_bad_readings(tmp_path: Path) -> None:
    spec = tmp_path / "gpus.json"
    _write(spec, [{"utilization": 101}])
    with pytest.raises(GpuBackendError, match=r"utilization must be from 0 to 100"):
        open_backend(f"fake:{spec}")
    _write(spec, [{"power_watts": "lots"}])
    with pytest.raises(GpuBackendError, match=r"power_watts must be a number"):
        open_backend(f"fake:{spec}")


def test_an_unreadable_fake_file_reads_as_unknown(tmp_path: Path) -> None:
    spec = tmp_path / "gpus.json"
    _write(spec, [{"utilization": 50}])
    backend = open_backend(f"fake:{spec}")
    spec.write_text("{half")
    assert backend.sample() == [GpuSample(0)]


def test_no_gpus_sample_nothing() -> None:
    assert open_backend("none").sample() == []


def test_job_sample_joins_its_gpus_and_counts_its_own_processes() -> None:
    readings = {
        0: GpuSample(0, 80.0, 1000, 200.0, {11: 600, 99: 400}),
        1: GpuSample(1, 40.0, 3000, 100.0, {12: 2000}),
        2: GpuSample(2, 0.0, 0, 50.0),
    }
    sample = job_sample(5.0, [0, 1], readings, job_pids={11, 12})
    assert sample.utilization_percent == 60.0
    assert sample.memory_used_mib == 4000
    assert sample.process_memory_mib == 2600
    assert sample.power_watts == 300.0


def test_job_sample_leaves_unknown_what_one_gpu_could_not_read() -> None:
    readings = {0: GpuSample(0, 80.0, 1000), 1: GpuSample(1, None, 3000)}
    sample = job_sample(5.0, [0, 1], readings)
    assert sample.utilization_percent is None
    assert sample.memory_used_mib == 4000
    assert sample.power_watts is None


def _sampler(history: int = 3, policy: IdlePolicy | None = None) -> Sampler:
    return Sampler(
        backend=open_backend("fake:2"),
        interval=1.0,
        history=history,
        idle_policy=policy or IdlePolicy(),
        jobs_dir="/nonexistent",
    )


def test_sampler_keeps_a_bounded_history_and_sums_up_the_attempt() -> None:
    sampler = _sampler(history=3, policy=IdlePolicy(threshold_percent=5, after_seconds=100))
    running = [RunningAttempt(7, 1, (0,))]
    for second, utilization in enumerate([10.0, 90.0, 50.0, 30.0, 20.0]):
        sampler.observe(float(second), [GpuSample(0, utilization, 100 * (second + 1))], running)
    use = sampler.attempts[7]
    assert len(use.history) == 3
    assert use.latest is not None
    assert use.latest.utilization_percent == 20.0
    summary = sampler.finish(7, 1)
    assert summary is not None
    assert summary.samples == 5
    assert summary.utilization_peak == 90.0
    assert summary.utilization_mean == 40.0
    assert summary.memory_peak_mib == 500
    assert sampler.finish(7, 1) is None  # forgotten once summed up


def test_sampler_forgets_attempts_that_stopped_running() -> None:
    sampler = _sampler()
    sampler.observe(0.0, [GpuSample(0, 50.0)], [RunningAttempt(1, 1, (0,))])
    sampler.observe(1.0, [GpuSample(0, 50.0)], [])
    assert sampler.attempts == {}


def test_idle_is_flagged_once_after_the_configured_time_and_cleared_by_work() -> None:
    watch = IdleWatch(IdlePolicy(threshold_percent=5, after_seconds=10))
    assert not watch.observe(0, 1.0)
    assert not watch.observe(5, 4.9)
    assert not watch.observe(8, None)  # unknown: neither idle nor busy
    assert watch.observe(10, 0.0)
    assert watch.flagged_since == 0
    assert not watch.observe(12, 0.0)  # flagged once per spell
    assert watch.idle_seconds == 12
    assert not watch.observe(13, 50.0)
    state = vars(watch)
    assert state["flagged_since"] is None
    assert state["idle_since"] is None


def test_stop_policy_falls_due_after_the_further_time_only_when_chosen() -> None:
    stop = IdleWatch(IdlePolicy(threshold_percent=5, after_seconds=10, action="stop",
                                stop_after_seconds=20))  # fmt: skip
    notify = IdleWatch(IdlePolicy(threshold_percent=5, after_seconds=10, action="notify",
                                  stop_after_seconds=20))  # fmt: skip
    for watch in (stop, notify):
        watch.observe(0, 0.0)
        assert watch.observe(10, 0.0)  # flagged
        assert not watch.observe(29, 0.0)
    assert stop.observe(30, 0.0)
    assert stop.stop_due
    assert not notify.observe(30, 0.0)
    assert not notify.stop_due


def test_duration_reads_like_a_person_would_say_it() -> None:
    assert [duration(s) for s in (0, 45, 60, 90, 3600, 7500)] == [
        "0s", "45s", "1m", "1m30s", "1h", "2h5m",
    ]  # fmt: skip


def test_a_database_of_the_previous_schema_gains_the_gpu_use_columns(tmp_path: Path) -> None:
    path = tmp_path / "trainq.db"
    Store.open(path).close()
    with sqlite3.connect(path) as db:
        downgrade(db, 1)  # before the GPU use columns
    store = Store.open(path)
    job = store.submit(JobSpec(command=["true"]), JobOwner(uid=0, gid=0, user="root"), 1.0)
    store.begin_attempt(job.id, [0], ["GPU-x"], 2.0)
    store.record_gpu_use(
        job.id, 1, utilization_peak=90.0, utilization_mean=45.5, memory_peak_mib=10,
        idle_seconds=3.0,
    )  # fmt: skip
    attempt = store.attempt(job.id, 1)
    assert attempt is not None
    assert (attempt.gpu_util_peak, attempt.gpu_util_mean, attempt.gpu_memory_peak_mib) == (
        90.0, 45.5, 10,
    )  # fmt: skip
    assert store.get(job.id).state == JobState.RUNNING
    store.close()
    with sqlite3.connect(path) as db:
        version = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    assert version[0] == str(SCHEMA_VERSION)
