"""A personal trainqd's loopback blocks (attempts/loopback.py): an attempt gets the first
block from its job's id on that no running job of several subprocess nodes holds."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.support.factories import job
from trainqd.attempts import loopback
from trainqd.attempts.jobdir import JobDirs
from trainqd.attempts.nodes import master_port, node_address
from trainqd.store import JobRow


def gang(dirs: JobDirs, job_id: int, number: int = 1, **spec: object) -> JobRow:
    row = dataclasses.replace(job(instance_count=2, **spec), id=job_id, attempt_count=number)
    (dirs.job_dir(job_id) / "attempts").mkdir(parents=True, exist_ok=True)
    return row


def test_a_block_another_running_job_holds_is_skipped(tmp_path: Path) -> None:
    dirs = JobDirs(tmp_path)
    first = gang(dirs, 7)
    assert loopback.allocate(dirs, 7, 1, [first]) == 7
    # Ids a block apart: the same block by their ids, so the next free one.
    second = gang(dirs, 7 + loopback.BLOCKS)
    assert loopback.allocate(dirs, second.id, 1, [first, second]) == 8
    assert loopback.held_by(dirs, second) == 8
    assert node_address(7, 0) != node_address(8, 0)
    assert {master_port(7), master_port(7) + 1}.isdisjoint({master_port(8), master_port(8) + 1})
    # Container gangs and jobs of one node hold none; a job that no longer runs frees its
    # block (the caller passes the running jobs only).
    third = gang(dirs, 7 + 2 * loopback.BLOCKS)
    containers = gang(dirs, 8 + 3 * loopback.BLOCKS, command=None, image="pytorch:2")
    dirs.loopback_file(containers.id, 1).write_text('{"block": 7}')  # not its to hold
    assert loopback.allocate(dirs, third.id, 1, [second, containers]) == 7


def test_a_later_attempt_holds_its_own_block(tmp_path: Path) -> None:
    dirs = JobDirs(tmp_path)
    first = gang(dirs, 3)
    assert loopback.allocate(dirs, 3, 1, []) == 3
    retried = dataclasses.replace(first, attempt_count=2)
    assert loopback.held_by(dirs, retried) is None  # its first attempt's is over


def test_when_every_block_is_held_the_start_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(loopback, "BLOCKS", 2)
    dirs = JobDirs(tmp_path)
    running = [gang(dirs, 1), gang(dirs, 2)]
    assert loopback.allocate(dirs, 1, 1, []) == 1
    assert loopback.allocate(dirs, 2, 1, running[:1]) == 0
    with pytest.raises(loopback.NoBlock):
        loopback.allocate(dirs, 3, 1, running)
