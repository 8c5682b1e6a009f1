"""Exit records as trainqd reads them (hostile input: only bounded, well-typed values, from
regular files) and as the monitor writes them (into space reserved at the attempt's start,
so a disk filled meanwhile cannot keep the record from being written)."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from trainq.core.outcomes import ExitRecord
from trainqd.attempts.watcher import read_exit_record
from trainqd.monitor.records import (
    EXIT_RESERVE,
    parse_exit_record,
    parse_monitor_info,
    read_json,
    reserve_record_space,
    write_exit_record,
)

GOOD: dict[str, Any] = {
    "job_id": 7,
    "attempt": 2,
    "outcome": "exited",
    "started_at": 1000.0,
    "ended_at": 1010.5,
    "exit_code": 3,
    "signal": None,
    "reason": "boom",
    "stop_reason": None,
}


def test_a_good_record_is_read() -> None:
    record = parse_exit_record(GOOD, 7, 2)
    assert (record.outcome, record.exit_code, record.ended_at) == ("exited", 3, 1010.5)


@pytest.mark.parametrize(
    "change",
    [
        {"exit_code": 99999999999999999999999},
        {"exit_code": True},
        {"exit_code": "3"},
        {"signal": 0},
        {"signal": 65},
        {"ended_at": 1e300},
        {"ended_at": float("inf")},
        {"ended_at": float("nan")},
        {"ended_at": -1},
        # Named: every xdist worker must collect the same test ids.
        pytest.param({"started_at": time.time() + 10 * 86400}, id="{'started_at': in 10 days}"),
        {"job_id": 8},
        {"attempt": 1},
        {"job_id": 2**70},
        {"outcome": "completed"},
        {"outcome": ["exited"]},
        {"reason": 5},
        {"ended_at": None},
        # A gang's nodes: a list of at most 64 well-formed ends.
        {"nodes": {"algo-1": "exited"}},
        {"nodes": [{"name": "algo-1", "outcome": "exited", "restarts": 0}] * 65},
        {"nodes": [{"name": "algo-1", "outcome": "won", "restarts": 0}]},
        {"nodes": [{"name": "x" * 33, "outcome": "exited", "restarts": 0}]},
        {"nodes": [{"name": "algo-1", "outcome": "exited", "restarts": -1}]},
        {"nodes": [{"name": "algo-1", "outcome": "exited"}]},
        {"nodes": [{"name": "algo-1", "outcome": "signaled", "signal": 99, "restarts": 0}]},
        {"nodes": ["algo-1"]},
    ],
    ids=repr,
)
def test_a_record_out_of_bounds_is_refused(change: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        parse_exit_record({**GOOD, **change}, 7, 2)


def test_monitor_info_is_bounded() -> None:
    good = {"monitor_pid": 10, "monitor_start": 5, "boot_id": "b"}
    assert parse_monitor_info(good).monitor_pid == 10
    for change in ({"monitor_pid": 2**40}, {"monitor_start": -1}, {"boot_id": "x" * 10_000}):
        with pytest.raises(ValueError):
            parse_monitor_info({**good, **change})


def test_links_fifos_and_deep_nesting_are_refused_without_blocking(tmp_path: Path) -> None:
    target = tmp_path / "target.json"
    target.write_text(json.dumps(GOOD))
    (tmp_path / "link").symlink_to(target)
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "deep").write_text("[" * 100_000)
    for name in ("link", "fifo", "deep"):
        with pytest.raises(ValueError):
            read_json(str(tmp_path / name))


def test_an_unreadable_record_ends_the_attempt_as_lost(tmp_path: Path) -> None:
    (tmp_path / "exit.json").write_text(json.dumps({**GOOD, "ended_at": 1e300}))
    record = read_exit_record(tmp_path, 7, 2)
    assert record is not None
    assert record.outcome == "lost"
    assert record.reason is not None
    assert "exit record was unreadable" in record.reason
    assert read_exit_record(tmp_path / "absent", 7, 2) is None


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path) -> Path:
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        while os.statvfs(disk).f_bavail:
            os.write(fd, bytes(4096))
        with pytest.raises(OSError) as full:
            os.write(fd, bytes(4096))
    finally:
        os.close(fd)
    assert full.value.errno == errno.ENOSPC
    return filler


RECORD = ExitRecord(7, 2, "exited", 1000.0, 1010.0, exit_code=0)


def test_the_reserve_takes_the_record_on_a_full_disk(small_disk: Path) -> None:
    reserve_record_space(str(small_disk))
    fill(small_disk)
    path = small_disk / "exit.json"

    def no_pause(seconds: float) -> None:
        raise AssertionError("the record should fit in its reserve")

    write_exit_record(str(path), RECORD, pause=no_pause)
    assert not (small_disk / EXIT_RESERVE).exists()
    assert parse_exit_record(read_json(str(path)), 7, 2) == RECORD


def test_without_a_reserve_a_full_disk_is_waited_out(small_disk: Path) -> None:
    filler = fill(small_disk)
    paused: list[float] = []

    def room_after_a_while(seconds: float) -> None:
        paused.append(seconds)
        if len(paused) == 3:
            filler.unlink()

    path = small_disk / "exit.json"
    write_exit_record(str(path), RECORD, pause=room_after_a_while)
    assert paused == [0.5, 1.0, 2.0]  # a growing pause until there is room
    assert parse_exit_record(read_json(str(path)), 7, 2) == RECORD
