"""Moving a channel's bytes into an epoch's FIFO, as fast as the kernel allows.

A source is anything that can move "up to n bytes" into a pipe and say how many it moved
(0 at its end). A plain file is spliced page by page from the page cache into the pipe, so
its bytes never pass through Python; where a file system refuses splice, sendfile and then
read + write take over for that file. Decompressed data, which exists only in memory,
is written with os.write.

A reader that has gone away shows up as BrokenPipeError (SIGPIPE stays ignored, as Python
sets it): the feeder treats that as the end of the epoch, never as an error.
"""

from __future__ import annotations

import errno
import fcntl
import os
import select
from collections.abc import Callable

from trainqd.monitor import recordio

# The pipe size the feeder asks for, and the largest single move: large moves amortise the
# system call, and a 1 MiB pipe lets the writer run ahead of a reader that reads in bursts.
PIPE_SIZE = 1 << 20
_DEFAULT_PIPE_SIZE = 1 << 16

# Errors with which splice or sendfile say "not for this file", as opposed to a read error.
_UNSUPPORTED = frozenset({errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP})


def raise_pipe_size(fd: int) -> None:
    """Grow the pipe behind `fd` towards PIPE_SIZE, as far as it is allowed to grow.

    An unprivileged owner is held to /proc/sys/fs/pipe-max-size and to a per-user budget
    of pipe pages, so a refusal is expected: smaller sizes are tried, then the default kept.
    """
    size = PIPE_SIZE
    while size > _DEFAULT_PIPE_SIZE:
        try:
            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, size)
        except OSError:
            size //= 2
        else:
            return


def write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def reader_gone(fd: int) -> bool:
    """Whether the read end of the pipe behind write end `fd` has been closed by everyone.

    For work that writes nothing for a long while (measuring a large compressed record),
    so that an early close still ends the epoch at once.
    """
    poller = select.poll()
    poller.register(fd, 0)  # POLLERR is always reported: a pipe's writer gets it with no readers
    return any(events & select.POLLERR for _, events in poller.poll(0))


class FileSource:
    """A regular file, read from its current offset: splice, else sendfile, else read."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._move: Callable[[int, int], int] = self._splice

    def move(self, pipe_fd: int, limit: int) -> int:
        count = min(limit, PIPE_SIZE)
        while True:
            method = self._move
            try:
                return method(pipe_fd, count)
            except OSError as exc:
                if exc.errno not in _UNSUPPORTED or method == self._read_write:
                    raise
            # Nothing moved: the fallback starts at the same file offset.
            self._move = self._sendfile if method == self._splice else self._read_write

    def _splice(self, pipe_fd: int, count: int) -> int:
        return os.splice(self._fd, pipe_fd, count)

    def _sendfile(self, pipe_fd: int, count: int) -> int:
        return os.sendfile(pipe_fd, self._fd, None, count)

    def _read_write(self, pipe_fd: int, count: int) -> int:
        data = os.read(self._fd, count)
        write_all(pipe_fd, data)
        return len(data)


class ChunkSource:
    """Bytes that exist only in memory, produced a chunk at a time (b"" at the end)."""

    def __init__(self, next_chunk: Callable[[], bytes]) -> None:
        self._next_chunk = next_chunk
        self._chunk = memoryview(b"")

    def move(self, pipe_fd: int, limit: int) -> int:
        if not self._chunk:
            self._chunk = memoryview(self._next_chunk())
            if not self._chunk:
                return 0
        moved = os.write(pipe_fd, self._chunk[:limit])
        self._chunk = self._chunk[moved:]
        return moved


Source = FileSource | ChunkSource


def pour(pipe_fd: int, source: Source) -> None:
    """Move everything `source` holds into the pipe."""
    while source.move(pipe_fd, PIPE_SIZE):
        pass


def pour_record(pipe_fd: int, length: int, source: Source) -> None:
    """Move the next `length` bytes of `source` into the pipe as one RecordIO record.

    Raises EOFError when the source ends first: the header already promised `length` bytes.
    """
    poured = 0
    for cflag, part in recordio.parts(length):
        write_all(pipe_fd, recordio.header(cflag, part))
        end = poured + part
        while poured < end:
            moved = source.move(pipe_fd, end - poured)
            if not moved:
                raise EOFError(f"it ended after {poured} of its {length} bytes")
            poured += moved
        pad = recordio.padding(part)
        if pad:
            write_all(pipe_fd, pad)
