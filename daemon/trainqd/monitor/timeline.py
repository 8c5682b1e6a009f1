"""The trainer's output, relayed: stdout and stderr written as they were, plus a timeline.

The trainer writes into two pipes; the monitor reads them in its own loop and appends what
it read, unchanged, to the attempt's `stdout` and `stderr` files, and for every read one
fixed-size record to `timeline`: when it was read, which stream, and where the bytes lie in
that stream's file. `trainq logs` merges the two streams in time order from the timeline,
finds the last N lines from its end and a time by bisection, without reading the logs whole.

The stamp and the stream are the monitor's, out of band: nothing a trainer writes can pass
for the other stream or another time. A record costs 24 bytes per read of at most CHUNK
bytes (one record per burst, however many lines it holds). The timeline lies where the
job's owner may write: its reader (trainqd's streams.py) checks every record against the
files before it trusts it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import struct
import time

TIMELINE = "timeline"
# time_ns, offset in its stream's file, length, stream (1 stdout, 2 stderr), padding.
RECORD = struct.Struct("<qQIB3x")
STDOUT_ID, STDERR_ID = 1, 2
CHUNK = 1 << 16
# Reads per stream each time the monitor wakes: it has stops and time limits to watch too.
READS_PER_WAKE = 16
PIPE_SIZE = 1 << 20  # room for a burst while the monitor is busy (the kernel may give less)
_F_SETPIPE_SZ = 1031


class Relay:
    """The read ends of the trainer's output pipes and the files they go to."""

    def __init__(self, stdout_fd: int, stderr_fd: int, timeline_fd: int) -> None:
        self.timeline_fd = timeline_fd
        self.trainer_ends: list[int] = []  # the write ends, for the trainer's 1 and 2
        # read end -> (stream id, file descriptor, offset in the file)
        self.streams: dict[int, list[int]] = {}
        for stream_id, file_fd in ((STDOUT_ID, stdout_fd), (STDERR_ID, stderr_fd)):
            read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
            with contextlib.suppress(OSError):  # a smaller pipe only means more waits
                fcntl.fcntl(write_fd, _F_SETPIPE_SZ, PIPE_SIZE)
            os.set_blocking(read_fd, False)
            offset = os.lseek(file_fd, 0, os.SEEK_END)
            self.streams[read_fd] = [stream_id, file_fd, offset]
            self.trainer_ends.append(write_fd)

    def started(self) -> None:
        """The trainer has its copies of the write ends: the monitor's go, so that the
        pipes end when the last of the job's processes lets go of them."""
        for fd in self.trainer_ends:
            os.close(fd)
        self.trainer_ends = []

    def open_ends(self) -> list[int]:
        return list(self.streams)

    def pump(self, reads: int = READS_PER_WAKE) -> list[int]:
        """Relay what the pipes hold (at most `reads` reads each); the read ends that hit
        their end, now closed."""
        ended = []
        for read_fd in list(self.streams):
            for _ in range(reads):
                try:
                    data = os.read(read_fd, CHUNK)
                except BlockingIOError:
                    break
                if not data:
                    ended.append(read_fd)
                    self._close(read_fd)
                    break
                self._write(read_fd, data)
        return ended

    def finish(self) -> None:
        """After the job's processes are gone: relay what is left, then let go."""
        while self.streams:
            before = set(self.streams)
            self.pump(reads=1 << 20)
            for read_fd in before & set(self.streams):  # empty, yet not ended: let go
                self._close(read_fd)

    def _write(self, read_fd: int, data: bytes) -> None:
        entry = self.streams[read_fd]
        stream_id, file_fd, offset = entry
        stamp = time.time_ns()
        written = 0
        try:
            while written < len(data):
                written += os.write(file_fd, data[written:])
        except OSError:  # a full disk: the record says what reached the file
            pass
        if written:
            entry[2] = offset + written
            with contextlib.suppress(OSError):
                os.write(self.timeline_fd, RECORD.pack(stamp, offset, written, stream_id))

    def _close(self, read_fd: int) -> None:
        del self.streams[read_fd]
        os.close(read_fd)
