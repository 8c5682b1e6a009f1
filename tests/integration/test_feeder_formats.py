"""What the Pipe mode feeder puts on the wire: RecordIO framing and gzip decompression.

The RecordIO stream is checked with a parser written here from the format's description,
not with trainqd's recordio module.
"""

from __future__ import annotations

import gzip
import os
import struct
import zlib
from pathlib import Path

import pytest

from tests.support.feeder import Workspace, read_fifo, write_files
from trainqd.monitor import recordio
from trainqd.monitor.feed import feeder
from trainqd.monitor.feed.feeder import EXIT_FED
from trainqd.monitor.records import PipeChannel

MAGIC = 0xCED7230A


def parse_records(stream: bytes) -> list[tuple[list[tuple[int, int]], bytes]]:
    """Each record's parts as (cflag, length), and its payload (the parts joined)."""
    records = []
    parts: list[tuple[int, int]] = []
    payload = b""
    offset = 0
    while offset < len(stream):
        magic, lrec = struct.unpack_from("<II", stream, offset)
        assert magic == MAGIC, f"bad magic at {offset}"
        cflag, length = lrec >> 29, lrec & ((1 << 29) - 1)
        body = offset + 8
        padded = (length + 3) // 4 * 4
        assert stream[body + length : body + padded] == bytes(padded - length)
        parts.append((cflag, length))
        payload += stream[body : body + length]
        offset = body + padded
        if cflag in (0, 3):
            flags = [flag for flag, _ in parts]
            assert flags == [0] or flags == [1] + [2] * (len(flags) - 2) + [3], flags
            records.append((parts, payload))
            parts, payload = [], b""
    assert offset == len(stream), "the stream ends inside a part"
    assert not parts, "the stream ends inside a record"
    return records


def test_recordio_makes_each_file_one_padded_record(space: Workspace) -> None:
    sizes = {"0": 0, "1": 1, "2": 2, "3": 3, "4": 4, "5": 5, "d/1000": 1000, "d/4097": 4097}
    files = write_files(space.root / "src", sizes)
    feeder_run = space.start(
        [PipeChannel("train", str(space.root / "src"), record_wrapper="RecordIO", epochs=1)]
    )

    records = parse_records(read_fifo(space.wait_fifo("train", 0)))

    assert [payload for _, payload in records] == [f.read_bytes() for f in files]
    assert [parts for parts, _ in records] == [[(0, size)] for size in sizes.values()]
    assert feeder_run.wait() == EXIT_FED


def test_recordio_splits_payloads_over_the_length_limit(
    space: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(recordio, "MAX_PART_LENGTH", 10)
    sizes = {"a": 9, "b": 10, "c": 11, "d": 25, "e": 30, "f": 0}
    files = write_files(space.root / "src", sizes)
    space.start([PipeChannel("train", str(space.root / "src"), record_wrapper="RecordIO")])

    records = parse_records(read_fifo(space.wait_fifo("train", 0)))

    assert [payload for _, payload in records] == [f.read_bytes() for f in files]
    assert [parts for parts, _ in records] == [
        [(0, 9)],
        [(0, 10)],
        [(1, 10), (3, 1)],
        [(1, 10), (2, 10), (3, 5)],
        [(1, 10), (2, 10), (3, 10)],
        [(0, 0)],
    ]


def compressible(size: int) -> bytes:
    return b"".join(b"%010d\n" % n for n in range(size // 11 + 1))[:size]


def test_gzip_is_decompressed_while_fed(space: Workspace) -> None:
    source = space.root / "src"
    source.mkdir()
    large = compressible(3 << 20)
    (source / "1-large.gz").write_bytes(gzip.compress(large))
    # Several members and zero padding after them, as gzip(1) accepts.
    (source / "2-members.gz").write_bytes(
        gzip.compress(b"first member\n") + gzip.compress(b"second member\n") + bytes(512)
    )
    (source / "3-empty.gz").write_bytes(gzip.compress(b""))
    raw = zlib.compressobj(wbits=31)  # a plain zlib-made gzip stream, no file name header
    (source / "4-zlib.gz").write_bytes(raw.compress(b"made by zlib\n") + raw.flush())
    feeder_run = space.start([PipeChannel("train", str(source), compression="Gzip", epochs=2)])

    expected = large + b"first member\nsecond member\nmade by zlib\n"
    assert read_fifo(space.wait_fifo("train", 0)) == expected
    assert read_fifo(space.wait_fifo("train", 1)) == expected
    assert feeder_run.wait() == EXIT_FED
    assert feeder_run.stderr() == ""


def test_gzip_with_recordio_frames_the_decompressed_content(
    space: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(feeder, "GZIP_RECORD_IN_MEMORY", 3000)  # larger files: two passes
    monkeypatch.setattr(recordio, "MAX_PART_LENGTH", 4096)
    source = space.root / "src"
    source.mkdir()
    contents = {
        "a-small.gz": compressible(2999),
        "b-two-pass.gz": compressible(10000),
        "c-members.gz": compressible(1500) + compressible(2500),
        "d-empty.gz": b"",
    }
    for name, content in contents.items():
        if name == "c-members.gz":
            data = gzip.compress(content[:1500]) + gzip.compress(content[1500:])
        else:
            data = gzip.compress(content)
        (source / name).write_bytes(data)
    space.start([PipeChannel("train", str(source), record_wrapper="RecordIO", compression="Gzip")])

    records = parse_records(read_fifo(space.wait_fifo("train", 0)))

    assert [payload for _, payload in records] == list(contents.values())
    assert [parts for parts, _ in records] == [
        [(0, 2999)],
        [(1, 4096), (2, 4096), (3, 1808)],
        [(0, 4000)],
        [(0, 0)],
    ]


def test_reader_closing_while_a_gzip_record_is_measured_ends_the_epoch(
    space: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(feeder, "GZIP_RECORD_IN_MEMORY", 1 << 20)
    data = space.root / "big.gz"
    data.write_bytes(gzip.compress(compressible(6 << 20), compresslevel=1))
    channel = PipeChannel("train", str(data), record_wrapper="RecordIO", compression="Gzip")
    feeder_run = space.start([channel])
    # Opened and closed before a byte was written: the feeder is still measuring.
    os.close(os.open(space.wait_fifo("train", 0), os.O_RDONLY | os.O_NONBLOCK))

    records = parse_records(read_fifo(space.wait_fifo("train", 1)))

    assert len(records) == 1
    assert len(records[0][1]) == 6 << 20
    assert feeder_run.poll() is None
    assert feeder_run.stderr() == ""


def test_single_file_source_is_its_own_channel(space: Workspace) -> None:
    path = Path(space.root / "only.rec")
    path.write_bytes(b"abcde")
    space.start([PipeChannel("train", str(path), record_wrapper="RecordIO")])

    assert parse_records(read_fifo(space.wait_fifo("train", 0))) == [([(0, 5)], b"abcde")]


def test_file_that_refuses_splice_and_sendfile_is_read_and_written(space: Workspace) -> None:
    # procfs serves /proc/<pid>/cmdline without splice support: both calls fail with EINVAL.
    cmdline = Path("/proc/1/cmdline")
    space.start([PipeChannel("proc", str(cmdline))])

    assert read_fifo(space.wait_fifo("proc", 0)) == cmdline.read_bytes()
