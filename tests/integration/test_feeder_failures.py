"""When the Pipe mode feeder cannot feed: one line on the report descriptor at once. Before
any FIFO is open it exits with status 1; in the middle of an epoch it keeps that FIFO open
(the reader must not take a truncated epoch for a whole one) until it is stopped.

The feeder runs as `nobody` where permissions matter, as the monitor runs it as the job's
owner: root would read everything.
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path
from typing import Literal

import pytest

from tests.support.feeder import (
    NOBODY,
    Workspace,
    read_fifo,
    write_files,
)
from trainqd.monitor.feed.feeder import EXIT_FAILED
from trainqd.monitor.records import PipeChannel

SECRET = b"root-only bytes that nobody may read"


def assert_one_line(report: str, line: str) -> None:
    assert report == f"{line}\n"


@pytest.mark.multiuser
@pytest.mark.parametrize("wrapper", ["None", "RecordIO"])
def test_unreadable_file_is_reported_and_none_of_it_is_fed(
    space: Workspace, wrapper: Literal["None", "RecordIO"]
) -> None:
    source = space.root / "src"
    readable, secret, after = write_files(source, {"a": 100, "b": 0, "c": 100})
    secret.write_bytes(SECRET)
    secret.chmod(0o600)
    channel = PipeChannel("train", str(source), record_wrapper=wrapper)
    feeder_run = space.start([channel], uid=NOBODY)

    fed = feeder_run.read_until_failure(space.wait_fifo("train", 0))

    assert_one_line(
        feeder_run.report(), f"channel 'train': cannot read {secret}: Permission denied"
    )
    assert readable.read_bytes() in fed
    assert SECRET not in fed
    assert after.read_bytes() not in fed
    # Whatever was fed ends on a whole record: no header of the unreadable file went out.
    assert len(fed) == (100 if wrapper == "None" else 8 + 100)
    assert space.fifo_names() == []
    assert feeder_run.stderr() == ""


@pytest.mark.multiuser
def test_unlistable_directory_is_reported_before_any_fifo(space: Workspace) -> None:
    source = space.root / "src"
    write_files(source, {"a": 10, "private/b": 10})
    (source / "private").chmod(0o700)

    feeder_run = space.start([PipeChannel("train", str(source))], uid=NOBODY)

    assert feeder_run.wait() == EXIT_FAILED
    assert_one_line(
        feeder_run.report(), f"channel 'train': cannot list {source}/private: Permission denied"
    )
    assert space.fifo_names() == []


def test_file_that_vanished_between_epochs_is_reported(space: Workspace) -> None:
    source = space.root / "src"
    _, gone = write_files(source, {"a": 10, "b": 10})
    feeder_run = space.start([PipeChannel("train", str(source))])
    assert len(read_fifo(space.wait_fifo("train", 0))) == 20
    gone.unlink()

    fed = feeder_run.read_until_failure(space.wait_fifo("train", 1))
    assert fed == (source / "a").read_bytes()

    assert_one_line(
        feeder_run.report(), f"channel 'train': cannot read {gone}: No such file or directory"
    )


def test_missing_source_is_reported(space: Workspace) -> None:
    feeder_run = space.start([PipeChannel("test", "/nonexistent/trainq/data")])

    assert feeder_run.wait() == EXIT_FAILED
    assert_one_line(
        feeder_run.report(),
        "channel 'test': cannot read /nonexistent/trainq/data: No such file or directory",
    )


def corrupt(kind: str) -> bytes:
    good = gzip.compress(os.urandom(256 << 10))
    if kind == "flipped":
        middle = len(good) // 2
        return good[:middle] + bytes([good[middle] ^ 0xFF]) + good[middle + 1 :]
    if kind == "truncated":
        return good[: len(good) - 100]
    if kind == "bad-crc":
        return good[:-8] + bytes(4) + good[-4:]
    return b"plain text, never compressed\n" * 100


@pytest.mark.parametrize("kind", ["flipped", "truncated", "bad-crc", "not-gzip"])
@pytest.mark.parametrize("wrapper", ["None", "RecordIO"])
def test_corrupt_gzip_is_reported_in_one_line(
    space: Workspace, kind: str, wrapper: Literal["None", "RecordIO"]
) -> None:
    source = space.root / "src"
    source.mkdir()
    (source / "a.gz").write_bytes(gzip.compress(b"fine\n"))
    bad = source / "b.gz"
    bad.write_bytes(corrupt(kind))
    channel = PipeChannel("train", str(source), compression="Gzip", record_wrapper=wrapper)
    feeder_run = space.start([channel])

    fed = feeder_run.read_until_failure(space.wait_fifo("train", 0))

    report = feeder_run.report()
    assert report.startswith(f"channel 'train': cannot decompress {bad}: ")
    assert report.count("\n") == 1
    assert report.endswith("\n")
    if wrapper == "RecordIO":  # measured whole before any of it goes out
        assert fed == _record(b"fine\n")
    else:
        assert fed.startswith(b"fine\n")
    assert feeder_run.stderr() == ""


def _record(payload: bytes) -> bytes:
    length = len(payload)
    header = (0xCED7230A).to_bytes(4, "little") + length.to_bytes(4, "little")
    return header + payload + bytes(-length % 4)


def test_a_failing_channel_stops_the_others(space: Workspace) -> None:
    fine = space.root / "fine.bin"
    fine.write_bytes(b"fine")
    feeder_run = space.start(
        [PipeChannel("good", str(fine)), PipeChannel("bad", str(Path(space.root / "missing")))]
    )

    assert feeder_run.wait() == EXIT_FAILED
    assert feeder_run.report().startswith("channel 'bad': cannot read ")
    assert space.fifo_names() == []
