"""The Pipe mode feeder: one FIFO per channel and epoch, fed while the trainer reads it.

The monitor forks a child for it before it starts the trainer; the child takes the job
owner's credentials (data is read with the submitter's rights, never the daemon's), calls
`run_feeder` and `os._exit`s with what it returns. Each channel gets a thread that does,
for `epochs` epochs or for as long as the trainer keeps reading:

    mkfifo <name>_N (0600), open it for writing (this waits for a reader), feed the
    channel's files into it, close it, unlink it; then the same for <name>_N+1

so epoch N+1 appears only once epoch N is over, as SageMaker's Pipe mode readers expect.
A reader that closes early ends its epoch at once and quietly. A file that cannot be fed
ends the whole feeder: one line on `report_fd`, then it waits to be stopped with that
epoch's FIFO still open, because closing it would hand the reader an end of file and a
truncated epoch would pass for a whole one; the monitor stops the trainer on the report.
SIGTERM removes every FIFO the feeder made and exits at once with EXIT_STOPPED, even while
threads wait in open().
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import signal
import stat
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from trainqd.monitor.feed.gzipped import CorruptGzip, GzipStream
from trainqd.monitor.feed.pipes import (
    ChunkSource,
    FileSource,
    pour,
    pour_record,
    raise_pipe_size,
    reader_gone,
    write_all,
)
from trainqd.monitor.feed.sources import FeedError, epoch_order, list_files, show
from trainqd.monitor.records import PipeChannel

if TYPE_CHECKING:
    from types import FrameType

EXIT_FED = 0
EXIT_FAILED = 1
EXIT_STOPPED = 128 + signal.SIGTERM  # what a shell reports for a process ended by SIGTERM

# A RecordIO header carries the length, so a gzip file is measured (decompressed once)
# before its first byte goes out. Content up to this size is kept from that pass; beyond
# it the file is decompressed a second time while it is fed. That bounds memory per
# channel by this constant, where a temporary file would put the whole decompressed
# file on a disk the job may need, and the measuring pass catches a corrupt file before
# any of its bytes reach the trainer.
GZIP_RECORD_IN_MEMORY = 32 << 20


# FIFOs of epochs that failed part way: never closed before the feeder is stopped.
_HELD_OPEN: list[int] = []


class _Stopping(Exception):
    """The feeder is shutting down: a channel thread ends without a word."""


class FifoSet:
    """The FIFOs this feeder has made, so that stopping can remove every one of them."""

    def __init__(self, dir_fd: int) -> None:
        self.dir_fd = dir_fd
        self._names: set[str] = set()
        self._stopping = False
        # Reentrant: the SIGTERM handler runs in the main thread, which may be interrupted
        # inside remove_all itself.
        self._lock = threading.RLock()

    def create(self, name: str) -> None:
        with self._lock:
            if self._stopping:
                raise _Stopping
            try:
                os.mkfifo(name, 0o600, dir_fd=self.dir_fd)
            except OSError as exc:
                raise FeedError(f"cannot create the FIFO {name}: {exc.strerror}") from None
            self._names.add(name)

    def remove(self, name: str) -> None:
        with self._lock:
            self._names.discard(name)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=self.dir_fd)

    def remove_all(self) -> None:
        with self._lock:
            self._stopping = True
            for name in list(self._names):
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=self.dir_fd)
            self._names.clear()


class _Outcomes:
    """Where channel threads say they are done; the main thread waits for all, or a failure."""

    def __init__(self, channels: int) -> None:
        self._left = channels
        self._failure: str | None = None
        self._changed = threading.Condition(threading.Lock())

    def finish(self, failure: str | None) -> None:
        with self._changed:
            self._left -= 1
            if self._failure is None:
                self._failure = failure
            self._changed.notify()

    def wait(self) -> str | None:
        with self._changed:
            self._changed.wait_for(lambda: self._failure is not None or self._left == 0)
            return self._failure


def run_feeder(ml_root: str, channels: Sequence[PipeChannel], report_fd: int) -> int:
    """Feed `channels` into FIFOs under `<ml_root>/input/data`; return the exit status.

    EXIT_FED once every channel has fed all its epochs; EXIT_FAILED after writing one line
    to `report_fd`. Call it from the main thread of a process of its own, and `os._exit`
    with the result: it takes over SIGTERM, and its threads may still wait in open().
    """
    data_dir = os.path.join(ml_root, "input", "data")
    try:
        dir_fd = os.open(data_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        _report(report_fd, f"cannot open {data_dir}: {exc.strerror}")
        return EXIT_FAILED
    fifos = FifoSet(dir_fd)

    def stop(signum: int, frame: FrameType | None) -> None:
        fifos.remove_all()
        os._exit(EXIT_STOPPED)

    # A wakeup fd inherited from the monitor would tell the monitor of our own signals.
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGTERM, stop)
    try:
        _remove_stale_fifos(dir_fd, [channel.name for channel in channels])
    except OSError as exc:
        _report(report_fd, f"cannot clear {data_dir}: {exc.strerror}")
        return EXIT_FAILED

    outcomes = _Outcomes(len(channels))
    # Threads start with SIGTERM blocked, so the kernel delivers it to the main thread,
    # where the handler runs: it interrupts the main thread's wait, whereas a thread
    # blocked in open() would just retry and leave the handler pending.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        for channel in channels:
            threading.Thread(
                target=_channel_thread,
                args=(channel, fifos, outcomes),
                name=f"feed {channel.name}",
                daemon=True,
            ).start()
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    failure = outcomes.wait()
    if failure is None:
        fifos.remove_all()
        return EXIT_FED
    _report(report_fd, failure)
    while _HELD_OPEN:  # a reader is mid-epoch: wait for SIGTERM, never give it an EOF
        signal.pause()
    fifos.remove_all()
    return EXIT_FAILED


def _report(report_fd: int, line: str) -> None:
    with contextlib.suppress(OSError):
        write_all(report_fd, f"{line}\n".encode(errors="backslashreplace"))


def _is_epoch_fifo(entry: str, channel: str) -> bool:
    epoch = entry[len(channel) + 1 :]
    return entry.startswith(f"{channel}_") and epoch.isascii() and epoch.isdigit()


def _remove_stale_fifos(dir_fd: int, channels: Sequence[str]) -> None:
    """Remove the `<channel>_<digits>` entries an earlier attempt left behind."""
    with os.scandir(dir_fd) as scan:
        stale = [
            entry.name
            for entry in scan
            if any(_is_epoch_fifo(entry.name, channel) for channel in channels)
            and not entry.is_dir(follow_symlinks=False)
        ]
    for name in stale:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=dir_fd)


def _channel_thread(channel: PipeChannel, fifos: FifoSet, outcomes: _Outcomes) -> None:
    failure = None
    try:
        _feed_epochs(channel, fifos)
    except _Stopping:
        pass
    except FeedError as exc:
        failure = f"channel {channel.name!r}: {exc}"
    except Exception as exc:  # a bug still ends the feeder with its one line
        failure = f"channel {channel.name!r}: internal error: {exc!r}"
    outcomes.finish(failure)


def _feed_epochs(channel: PipeChannel, fifos: FifoSet) -> None:
    files = list_files(channel.source)
    epoch = 0
    while channel.epochs is None or epoch < channel.epochs:
        name = f"{channel.name}_{epoch}"
        fifos.create(name)
        try:
            pipe_fd = os.open(name, os.O_WRONLY | os.O_CLOEXEC, dir_fd=fifos.dir_fd)
        except OSError as exc:
            raise FeedError(f"cannot open the FIFO {name}: {exc.strerror}") from None
        try:
            raise_pipe_size(pipe_fd)
            for path in epoch_order(files, channel.shuffle_seed, epoch):
                _feed_file(pipe_fd, path, channel)
        except BrokenPipeError:
            pass  # the reader closed early: that is how a trainer ends an epoch
        except BaseException:
            # Left open on purpose (see the module's docstring): the process's end or
            # SIGTERM closes it, after the monitor has heard of the failure.
            _HELD_OPEN.append(pipe_fd)
            raise
        os.close(pipe_fd)
        fifos.remove(name)
        epoch += 1


def _feed_file(pipe_fd: int, path: bytes, channel: PipeChannel) -> None:
    try:
        fd, size = _open_regular(path)
    except OSError as exc:
        raise FeedError(f"cannot read {show(path)}: {exc.strerror}") from None
    try:
        if channel.compression == "Gzip":
            if channel.record_wrapper == "RecordIO":
                _pour_gzip_record(pipe_fd, fd)
            else:
                pour(pipe_fd, ChunkSource(GzipStream(fd).read))
        elif channel.record_wrapper == "RecordIO":
            pour_record(pipe_fd, size, FileSource(fd))
        else:
            pour(pipe_fd, FileSource(fd))
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise FeedError(f"cannot read {show(path)}: {exc.strerror}") from None
    except CorruptGzip as exc:
        raise FeedError(f"cannot decompress {show(path)}: {exc}") from None
    except EOFError as exc:
        raise FeedError(f"{show(path)} changed while it was fed: {exc}") from None
    finally:
        os.close(fd)


def _open_regular(path: bytes) -> tuple[int, int]:
    """Open a listed file for reading; (fd, size). OSError when it is not a regular file now."""
    # O_NONBLOCK so that a FIFO swapped in since the listing cannot hang the open; it is
    # cleared again, because splice would honour it and fail when the pipe is full. (No
    # F_GETFL first: F_SETFL sets only O_APPEND, O_ASYNC, O_DIRECT, O_NOATIME and O_NONBLOCK,
    # and none of them is wanted.)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        status = os.fstat(fd)
        regular = stat.S_ISREG(status.st_mode)
        if regular:
            fcntl.fcntl(fd, fcntl.F_SETFL, 0)
    except BaseException:
        os.close(fd)
        raise
    if not regular:
        os.close(fd)
        raise OSError(errno.EINVAL, "it is no longer a regular file")
    return fd, status.st_size


def _pour_gzip_record(pipe_fd: int, fd: int) -> None:
    stream = GzipStream(fd)
    kept: list[bytes] | None = []
    length = 0
    while chunk := stream.read():
        length += len(chunk)
        if kept is not None:
            kept.append(chunk)
            if length > GZIP_RECORD_IN_MEMORY:
                kept = None
        elif reader_gone(pipe_fd):
            raise BrokenPipeError(errno.EPIPE, "the reader closed the FIFO")
    if kept is not None:
        chunks = iter(kept)
        pour_record(pipe_fd, length, ChunkSource(lambda: next(chunks, b"")))
        return
    os.lseek(fd, 0, os.SEEK_SET)
    again = GzipStream(fd)
    pour_record(pipe_fd, length, ChunkSource(again.read))
    if again.read():
        raise EOFError(f"its content grew past the {length} bytes measured")
