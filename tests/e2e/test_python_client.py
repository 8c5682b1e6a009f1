"""The Python library (`from trainq import Client`) against a real trainqd: a small sweep
submitted from a loop, then every call a notebook makes, with typed records back and
trainq's own errors for refusals."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pytest

from tests.support.daemon import TRAINERS, Daemon
from trainq import Client, Conflict, NotFound
from trainq.core.states import JobState
from trainq.core.wire import EventRecord, JobRecord

SLEEPER = str(TRAINERS / "sleeper.py")
EXIT_WITH = str(TRAINERS / "exit_with.py")


def test_a_sweep_from_a_loop(
    daemon: Daemon, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # a subprocess job runs where it was submitted
    tq = Client(daemon.socket)
    sweep = [
        tq.submit(
            {"command": [sys.executable, EXIT_WITH, "0"], "gpus": 1},
            name=f"lr-{index}",
            hyperparameters={"lr": lr},
        )
        for index, lr in enumerate((0.1, 0.01, 0.001))
    ]
    assert all(isinstance(job, JobRecord) for job in sweep)
    assert [job.name for job in sweep] == ["lr-0", "lr-1", "lr-2"]
    assert sweep[0].spec.working_dir == str(tmp_path)

    ended = [tq.wait(job.id) for job in sweep]
    assert [job.state for job in ended] == [JobState.COMPLETED] * 3
    assert [job.spec.hyperparameters["lr"] for job in ended] == ["0.1", "0.01", "0.001"]

    listed = {job.id for job in tq.list(include_ended=True)}
    assert {job.id for job in sweep} <= listed
    assert not {job.id for job in sweep} & {job.id for job in tq.list()}  # ended ones
    assert tq.show(sweep[1].id).name == "lr-1"

    out = tq.logs(sweep[0].id, stream="stdout")
    assert out == "stdout line from a trainer exiting 0\n"
    assert "stderr line 2" in tq.logs(sweep[0].id, stream="stderr")

    # the stored events of one job, replayed from the start, as records
    states = [
        event.to_state for event in itertools.islice(tq.events(job_id=sweep[2].id, since=0), 3)
    ]
    assert states == [JobState.PENDING, JobState.RUNNING, JobState.COMPLETED]


def test_stop_and_its_event(
    daemon: Daemon, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    tq = Client(daemon.socket)
    job = tq.submit(command=[sys.executable, SLEEPER], name="long")
    daemon.wait_state(job.id, "RUNNING")
    stopped = tq.stop(job.id, grace_seconds=5)
    assert stopped.state in {JobState.STOPPING, JobState.STOPPED}
    assert tq.wait(job.id).state == JobState.STOPPED
    events = tq.events(job_id=job.id, since=0)
    seen: list[EventRecord] = []
    for event in events:
        seen.append(event)
        if event.to_state == JobState.STOPPED:
            break
    assert seen[-1].job_id == job.id
    assert JobState.STOPPING in {event.to_state for event in seen}
    with pytest.raises(Conflict):  # an ended job cannot be stopped again
        tq.stop(job.id)


def test_refusals_are_trainq_errors(daemon: Daemon) -> None:
    tq = Client(daemon.socket)
    with pytest.raises(NotFound, match="999"):
        tq.show(999)
    with pytest.raises(NotFound):
        tq.logs(999)
    # and the daemon still serves
    assert tq.list() == []
