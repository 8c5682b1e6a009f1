"""The Pipe mode feeder with real FIFOs and real readers: epochs, order, early close, stop."""

from __future__ import annotations

import fcntl
import os
import signal
import stat
import time
from pathlib import Path

import pytest

from tests.support.feeder import (
    Workspace,
    drain,
    expected_stream,
    is_fifo,
    open_fifo,
    read_fifo,
    write_files,
)
from tests.support.waiting import wait_for
from trainqd.monitor.feed.feeder import EXIT_FED, EXIT_STOPPED
from trainqd.monitor.records import PipeChannel


def dataset(space: Workspace) -> tuple[Path, list[Path]]:
    """A nested source directory; returns it and its files in bytewise relative path order."""
    source = space.root / "train"
    files = write_files(
        source,
        {
            "b.bin": 65537,
            "a-c": 3,  # '-' sorts before '/': a-c comes before a/...
            "a/z/deep.bin": 1,
            "a/empty": 0,
            "a/odd.bin": 4095,
            "big.bin": (3 << 20) + 7,
            "C.txt": 10,  # bytewise: upper case before lower case
        },
    )
    (source / "outside.bin").write_bytes(b"reached through a link to a file\n")
    (source / "a" / "link.bin").symlink_to(source / "outside.bin")
    (source / "loop").symlink_to(source)  # a link to a directory is not descended
    (source / "dangling").symlink_to(source / "nowhere")
    by_name = {str(p.relative_to(source)): p for p in files}
    by_name["a/link.bin"] = source / "a" / "link.bin"
    by_name["outside.bin"] = source / "outside.bin"
    order = sorted(by_name, key=lambda name: name.encode())
    return source, [by_name[name] for name in order]


def test_two_channels_read_at_once_are_byte_exact_every_epoch(space: Workspace) -> None:
    source, files = dataset(space)
    single = space.root / "validation.csv"
    single.write_bytes(b"x,y\n" * 1000 + b"tail without newline")
    feeder = space.start(
        [
            PipeChannel("train", str(source), epochs=3),
            PipeChannel("validation", str(single), epochs=3),
        ]
    )
    out = space.root / "out"

    result = space.read_epochs(out, "train:3", "validation:3")

    assert result.returncode == 0, result.stderr
    for epoch in range(3):
        assert (out / f"train_{epoch}").read_bytes() == expected_stream(files)
        assert (out / f"validation_{epoch}").read_bytes() == single.read_bytes()
    assert feeder.wait() == EXIT_FED
    assert feeder.report() == ""
    assert feeder.stderr() == ""
    assert space.fifo_names() == []


def test_epochs_two_gives_exactly_two_fifos(space: Workspace) -> None:
    source = space.root / "one.bin"
    source.write_bytes(b"0123456789")
    feeder = space.start([PipeChannel("train", str(source), epochs=2)])

    assert read_fifo(space.wait_fifo("train", 0)) == b"0123456789"
    assert read_fifo(space.wait_fifo("train", 1)) == b"0123456789"

    # A third FIFO would keep the feeder waiting for a reader: it exits only if there is none.
    assert feeder.wait() == EXIT_FED
    assert space.fifo_names() == []


def test_early_close_ends_the_epoch_without_feeding_the_rest(space: Workspace) -> None:
    source = space.root / "train"
    write_files(source, {"a.bin": 8 << 20, "b.bin": 100})
    feeder = space.start([PipeChannel("train", str(source), epochs=3)])
    space.wait_fifo("train", 0)
    # The listing is done; had the feeder gone on to b.bin after the reader closed, it
    # would have failed to open it.
    (source / "b.bin").unlink()
    out = space.root / "out"

    result = space.read_epochs(out, "train:3:1000")

    assert result.returncode == 0, result.stderr
    assert [len((out / f"train_{n}").read_bytes()) for n in range(3)] == [1000] * 3
    assert feeder.wait() == EXIT_FED
    assert feeder.report() == ""
    assert feeder.stderr() == ""  # EPIPE is how an epoch ends, not an error


def test_reader_that_closes_early_then_reads_on_sees_whole_next_epoch(space: Workspace) -> None:
    source, files = dataset(space)
    feeder = space.start([PipeChannel("train", str(source))])  # epochs: as many as are read

    assert read_fifo(space.wait_fifo("train", 0), limit=5) == expected_stream(files)[:5]
    assert read_fifo(space.wait_fifo("train", 1)) == expected_stream(files)
    assert read_fifo(space.wait_fifo("train", 2), limit=70000) == expected_stream(files)[:70000]
    space.wait_fifo("train", 3)
    assert feeder.poll() is None
    assert space.fifo_names() == ["train_3"]


def test_channels_are_independent(space: Workspace) -> None:
    big = space.root / "big.bin"
    big.write_bytes(os.urandom(4 << 20))  # more than a pipe holds: its thread blocks
    small = space.root / "small.bin"
    small.write_bytes(b"small")
    space.start([PipeChannel("big", str(big)), PipeChannel("small", str(small))])

    stalled = open_fifo(space.wait_fifo("big", 0))
    try:
        for epoch in range(3):
            assert read_fifo(space.wait_fifo("small", epoch)) == b"small"
        assert not space.fifo("big", 1).exists()
    finally:
        os.close(stalled)


def shuffled_orders(space: Workspace, seed: int, epochs: int) -> list[list[bytes]]:
    source = space.root / "shards"
    if not source.exists():
        source.mkdir()
        for n in range(20):
            (source / f"shard-{n:02d}").write_bytes(b"shard-%02d\n" % n)
    feeder = space.start([PipeChannel("train", str(source), shuffle_seed=seed, epochs=epochs)])
    orders = [read_fifo(space.wait_fifo("train", n)).splitlines() for n in range(epochs)]
    assert feeder.wait() == EXIT_FED
    return orders


def test_shuffle_is_reproducible_per_seed_and_differs_per_epoch(space: Workspace) -> None:
    first = shuffled_orders(space, seed=42, epochs=3)
    again = shuffled_orders(space, seed=42, epochs=3)
    other_seed = shuffled_orders(space, seed=43, epochs=3)
    negative = shuffled_orders(space, seed=-42, epochs=3)

    listed = [b"shard-%02d" % n for n in range(20)]
    assert all(sorted(order) == listed for order in first + other_seed + negative)
    assert first == again
    assert len({tuple(order) for order in first}) == 3
    assert first[0] != listed
    assert other_seed != first
    assert negative != first


def test_stop_while_no_reader_comes_removes_fifos_within_a_second(space: Workspace) -> None:
    data = space.root / "data.bin"
    data.write_bytes(b"never read")
    feeder = space.start([PipeChannel("train", str(data)), PipeChannel("test", str(data))])
    space.wait_fifo("train", 0)
    space.wait_fifo("test", 0)

    started = time.monotonic()
    os.kill(feeder.pid, signal.SIGTERM)

    assert feeder.wait(timeout=1.0) == EXIT_STOPPED
    assert time.monotonic() - started < 1.0
    assert space.fifo_names() == []
    assert feeder.stderr() == ""


def test_stop_in_the_middle_of_an_epoch_removes_its_fifo(space: Workspace) -> None:
    data = space.root / "data.bin"
    data.write_bytes(os.urandom(4 << 20))
    feeder = space.start([PipeChannel("train", str(data))])
    reader = open_fifo(space.wait_fifo("train", 0))
    try:
        assert drain(reader, limit=1 << 16)  # then the feeder blocks: the pipe is full
        os.kill(feeder.pid, signal.SIGTERM)
        assert feeder.wait(timeout=1.0) == EXIT_STOPPED
    finally:
        os.close(reader)
    assert space.fifo_names() == []


def test_stale_epoch_entries_of_an_earlier_attempt_are_removed(space: Workspace) -> None:
    for name in ("train_0", "train_7"):
        os.mkfifo(space.data_dir / name, 0o644)
        (space.data_dir / name).chmod(0o644)
    (space.data_dir / "train_3").write_bytes(b"left by a trainer")
    (space.data_dir / "train_x").write_bytes(b"not an epoch name")
    (space.data_dir / "other_0").mkdir()  # another channel's (File mode) directory
    data = space.root / "data.bin"
    data.write_bytes(b"fresh")
    fresh = space.fifo("train", 0)

    space.start([PipeChannel("train", str(data))])
    wait_for(lambda: is_fifo(fresh) and stat.S_IMODE(fresh.stat().st_mode) == 0o600)

    assert sorted(p.name for p in space.data_dir.iterdir()) == ["other_0", "train_0", "train_x"]
    assert read_fifo(fresh) == b"fresh"


def test_a_hundred_epochs_leak_no_descriptor(space: Workspace) -> None:
    source = space.root / "train"
    write_files(source, {"a": 10, "b/c": 3 << 20, "d": 0})
    feeder = space.start([PipeChannel("train", str(source))])
    read_fifo(space.wait_fifo("train", 0))
    space.wait_fifo("train", 1)  # the feeder now waits in open() for the next reader
    before = feeder.fd_count()

    for epoch in range(1, 101):
        read_fifo(space.wait_fifo("train", epoch), limit=None if epoch % 2 else 5)
    space.wait_fifo("train", 101)

    # The first count may still include the first epoch's descriptors on their way to being
    # closed; a leak of even one per epoch would show as a hundred more.
    assert feeder.fd_count() <= before
    assert feeder.poll() is None


def test_fifo_is_raised_to_one_mib(space: Workspace) -> None:
    data = space.root / "data.bin"
    data.write_bytes(os.urandom(3 << 20))
    space.start([PipeChannel("train", str(data))])
    reader = open_fifo(space.wait_fifo("train", 0))
    try:
        first = drain(reader, limit=1)  # the feeder sizes the pipe before it writes
        assert fcntl.fcntl(reader, fcntl.F_GETPIPE_SZ) == 1 << 20
        assert first + drain(reader) == data.read_bytes()
    finally:
        os.close(reader)


def exhaust_pipe_budget() -> None:
    """Use up this user's pipe pages (pipe-user-pages-soft): no pipe of theirs can grow."""
    for _ in range(1000):
        _, write_end = os.pipe()  # left open: the feeder's process holds them to its end
        try:
            fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 1 << 20)
        except PermissionError:
            return
    raise AssertionError("pipe-user-pages-soft never refused a pipe")


@pytest.mark.multiuser
def test_refused_pipe_size_falls_back_quietly(space: Workspace) -> None:
    lone_uid = 61_234  # a uid of its own: pipe pages are counted per user
    os.chown(space.data_dir, lone_uid, -1)
    data = space.root / "data.bin"
    data.write_bytes(os.urandom(3 << 20))
    feeder = space.start(
        [PipeChannel("train", str(data), epochs=1)], uid=lone_uid, prepare=exhaust_pipe_budget
    )
    reader = open_fifo(space.wait_fifo("train", 0))
    try:
        first = drain(reader, limit=1)
        assert fcntl.fcntl(reader, fcntl.F_GETPIPE_SZ) < 1 << 20
        assert first + drain(reader) == data.read_bytes()
    finally:
        os.close(reader)
    assert feeder.wait() == EXIT_FED
    assert feeder.stderr() == ""
