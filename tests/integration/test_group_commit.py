"""Submissions in batches on a real SQLite file: a list of specs as one group in one
transaction, several submissions sharing one commit (group_commit.py), one bad submission
failing alone, and a full disk failing a whole batch with nothing written."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
from pathlib import Path

import anyio
import pytest

from tests.support.factories import OWNER
from trainq.core.errors import DiskFull
from trainq.core.spec import JobSpec
from trainq.core.states import JobState
from trainqd.store import JobOwner, NewJobs, Store
from trainqd.store.group_commit import GroupCommit

BROKEN = JobOwner(uid=1001, gid=1001, user=None)  # NOT NULL fails


def specs(n: int, name: str | None = None) -> list[JobSpec]:
    return [JobSpec(command=["true"], name=name, hyperparameters={"lr": str(i)}) for i in range(n)]


def test_a_list_is_one_group_in_one_commit_with_an_event_each(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "trainq.db")
    store.submit(JobSpec(command=["true"]), OWNER, 1.0)  # the group's ids do not start at 1
    commits = store.commits
    jobs = store.submit_many(specs(500, "sweep"), OWNER, 2.0)
    assert store.commits == commits + 1
    ids = [job.id for job in jobs]
    assert ids == list(range(2, 502))
    assert {job.group_id for job in jobs} == {2}
    # The rows built in memory are the rows the database holds, as a restart reads them.
    again = Store.open(tmp_path / "trainq.db")
    assert [again.get(job.id) for job in jobs] == jobs
    assert store.get(jobs[7].id) is jobs[7]  # kept in memory, not read again
    events = store.events_since(0, limit=10_000)
    assert [e.job_id for e in events] == [1, *ids]
    assert {(e.from_state, e.to_state, e.reason) for e in events[1:]} == {
        (None, JobState.PENDING, "submitted")
    }
    assert store.unfinished_of_group(2) == jobs
    assert store.group_exists(2)
    assert not store.group_exists(1)  # a job submitted alone has no group
    page, total, _ = store.page(None, None, 0, 10, group=2)
    assert (total, [j.id for j, _ in page]) == (500, ids[:10])


def test_one_bad_submission_fails_alone(store: Store) -> None:
    results = store.submit_batches(
        [
            NewJobs(specs(2), OWNER),
            NewJobs(specs(3), BROKEN, grouped=True),
            NewJobs(specs(1), OWNER),
        ],
        5.0,
    )
    assert [len(r) for r in results if isinstance(r, list)] == [2, 1]
    assert isinstance(results[1], sqlite3.IntegrityError)
    kept = [job.id for r in results if isinstance(r, list) for job in r]
    assert [job.id for job in store.jobs()] == kept
    assert [e.job_id for e in store.events_since(0)] == kept  # nothing of the bad one


def test_stopping_a_group_s_queued_jobs_is_one_commit(store: Store) -> None:
    jobs = store.submit_many(specs(50), OWNER, 1.0)
    store.begin_attempt(jobs[0].id, (0,), ("u0",), 2.0)
    commits = store.commits
    stopped = store.stop_pending([j.id for j in jobs], 3.0, "stopped", stop_reason="by alice")
    assert store.commits == commits + 1
    assert stopped == [j.id for j in jobs[1:]]  # the running one is not a queued one
    assert [j.id for j in store.unfinished_of_group(jobs[0].id)] == [jobs[0].id]
    assert store.get(jobs[1].id).state == JobState.STOPPED


def test_concurrent_submissions_share_a_commit(store: Store) -> None:
    commits = GroupCommit(store)
    answers: dict[int, list[int]] = {}
    failures: list[BaseException] = []

    async def submit(n: int) -> None:
        owner = BROKEN if n == 3 else OWNER
        try:
            jobs = await commits.submit(NewJobs(specs(1 + n % 2), owner))
        except sqlite3.IntegrityError as exc:
            failures.append(exc)
            return
        answers[n] = [job.id for job in jobs]

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            for n in range(8):
                tg.start_soon(submit, n)

    before = store.commits
    anyio.run(main)
    assert len(failures) == 1  # the bad one, alone
    assert sorted(answers) == [0, 1, 2, 4, 5, 6, 7]
    assert store.commits - before == commits.batches < commits.submissions == 8
    stored = {job.id for job in store.jobs()}
    assert stored == {i for ids in answers.values() for i in ids}


def test_a_full_disk_fails_the_whole_batch_and_changes_nothing(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], check=True)
    try:
        store = Store.open(disk / "trainq.db")
        kept = store.submit_many(specs(3), OWNER, 1.0)
        filler = disk / "filler"
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
        with contextlib.suppress(OSError):
            while True:
                os.write(fd, bytes(4096))
        os.close(fd)
        events = store.last_event_id()
        with pytest.raises(DiskFull, match="disk is full"):
            store.submit_many(specs(2000), OWNER, 2.0)
        commits = GroupCommit(store)

        async def main() -> list[BaseException]:
            failed: list[BaseException] = []

            async def one() -> None:
                try:
                    await commits.submit(NewJobs(specs(500), OWNER))
                except DiskFull as exc:
                    failed.append(exc)

            async with anyio.create_task_group() as tg:
                for _ in range(4):
                    tg.start_soon(one)
            return failed

        assert len(anyio.run(main)) == 4
        assert [j.id for j in store.jobs()] == [j.id for j in kept]  # in memory
        assert store.last_event_id() == events
        store.close()
        store = Store.open(disk / "trainq.db")  # and on disk
        assert [j.id for j in store.jobs()] == [j.id for j in kept]
        filler.unlink()
        assert len(store.submit_many(specs(100), OWNER, 3.0)) == 100  # room again
        store.close()
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_a_group_is_listed_through_its_index(tmp_path: Path) -> None:
    Store.open(tmp_path / "trainq.db").close()
    raw = sqlite3.connect(tmp_path / "trainq.db")
    plan = " ".join(
        str(row[-1])
        for row in raw.execute(
            "EXPLAIN QUERY PLAN SELECT id FROM jobs WHERE group_id=? AND id>? ORDER BY id",
            (1, 0),
        )
    )
    assert "jobs_group_id" in plan, plan
