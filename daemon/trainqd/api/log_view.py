"""One attempt's output as a sequence of stamped pieces, read without trusting any of it.

A piece is one read the monitor relayed (monitor/timeline.py): its time, its stream and
where its bytes lie in that stream's file. An attempt its monitor relayed has a `timeline`;
one started by an older monitor has only the two files, and each file's growth becomes a
piece as it is seen (stdout's before stderr's: the old order, the best there is).

Everything here lies where the job's owner may write: files are opened as regular files only
(`streams.open_log`), a piece is used only if it lies within its file as it is now, and
nothing is read whole: a position is found by bisection (`since`) or by counting lines back
from the end over at most TAIL_SCAN_BYTES (`tail`). Every call blocks on the disk: trainqd
makes them on a worker thread.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trainqd.monitor.records import STDERR, STDOUT
from trainqd.monitor.timeline import CHUNK, RECORD, STDERR_ID, STDOUT_ID, TIMELINE

STREAM_NAMES = {STDOUT_ID: "stdout", STDERR_ID: "stderr"}
STREAM_FILES = {STDOUT_ID: STDOUT, STDERR_ID: STDERR}
TAIL_SCAN_BYTES = 16 << 20  # `tail` looks this far back at most
BATCH = 256  # pieces read at once


@dataclass(frozen=True, slots=True)
class Piece:
    time_ns: int
    stream: int
    offset: int
    length: int


Opener = Callable[[Path], "tuple[int, int] | None"]


class AttemptLog:
    """The pieces of one attempt, for the streams asked for (`streams`: stream ids)."""

    def __init__(self, attempt_dir: Path, streams: tuple[int, ...], opener: Opener) -> None:
        self.dir = attempt_dir
        self.streams = streams
        self._open = opener
        self._fds: dict[int, int] = {}  # stream id -> fd
        self._timeline: int | None = None
        self._legacy: list[Piece] = []  # an attempt without a timeline: pieces seen so far
        self._legacy_sizes: dict[int, int] = {}
        self.legacy = False
        self.position = 0  # the next piece to give
        self.skip_lines = 0  # lines of that piece already given (or left out by `tail`)

    # -- opening ---------------------------------------------------------------------

    def ready(self) -> bool:
        """Whether the attempt's output exists yet (its trainer started)."""
        if self._timeline is not None or self.legacy:
            return True
        opened = self._open(self.dir / TIMELINE)
        if opened is None:
            if self._open_stream(STDOUT_ID) is None:
                return False
            self.legacy = True  # the files without a timeline: an older monitor's attempt
        else:
            self._timeline = opened[0]
        return True

    def _open_stream(self, stream: int) -> int | None:
        if stream not in self._fds:
            opened = self._open(self.dir / STREAM_FILES[stream])
            if opened is None:
                return None
            self._fds[stream] = opened[0]
        return self._fds[stream]

    def close(self) -> None:
        for fd in [*self._fds.values(), *([self._timeline] if self._timeline is not None else [])]:
            os.close(fd)
        self._fds.clear()
        self._timeline = None

    # -- the pieces ------------------------------------------------------------------

    def count(self) -> int:
        """How many pieces there are now (of every stream)."""
        if self.legacy:
            self._grow_legacy()
            return len(self._legacy)
        assert self._timeline is not None
        return os.fstat(self._timeline).st_size // RECORD.size

    def pieces(self, start: int, end: int) -> list[Piece | None]:
        """Pieces start..end-1; None for one that is not the asked streams', or not valid."""
        if self.legacy:
            return [p if p.stream in self.streams else None for p in self._legacy[start:end]]
        assert self._timeline is not None
        raw = os.pread(self._timeline, (end - start) * RECORD.size, start * RECORD.size)
        out: list[Piece | None] = []
        for i in range(len(raw) // RECORD.size):
            time_ns, offset, length, stream, *_ = RECORD.unpack_from(raw, i * RECORD.size)
            valid = stream in STREAM_NAMES and 0 < length <= CHUNK
            out.append(Piece(time_ns, stream, offset, length) if valid else None)
        return [p if p is not None and p.stream in self.streams else None for p in out]

    def data(self, piece: Piece) -> bytes:
        """The piece's bytes; b"" if they are not (or no longer) in its file."""
        fd = self._open_stream(piece.stream)
        if fd is None or piece.offset + piece.length > os.fstat(fd).st_size:
            return b""
        return os.pread(fd, piece.length, piece.offset)

    def _grow_legacy(self) -> None:
        for stream in (STDOUT_ID, STDERR_ID):
            fd = self._open_stream(stream)
            if fd is None:
                continue
            info = os.fstat(fd)
            seen = self._legacy_sizes.get(stream, 0)
            if info.st_size < seen:  # truncated by its writer: from the start again
                seen = 0
            for offset in range(seen, info.st_size, CHUNK):
                length = min(CHUNK, info.st_size - offset)
                self._legacy.append(Piece(info.st_mtime_ns, stream, offset, length))
            self._legacy_sizes[stream] = info.st_size

    # -- where to start --------------------------------------------------------------

    def seek(self, *, tail: int | None, since_ns: int | None) -> None:
        """Start at the first piece written at `since_ns` or later, and no earlier than the
        last `tail` lines."""
        total = self.count()
        if since_ns is not None:
            self.position = self._first_at(since_ns, total)
        if tail is not None:
            index, skip = self._last_lines(tail, total)
            if index > self.position or (index == self.position and skip > self.skip_lines):
                self.position, self.skip_lines = index, skip

    def _first_at(self, since_ns: int, total: int) -> int:
        low, high = 0, total
        while low < high:
            middle = (low + high) // 2
            [piece] = self._any_piece(middle)
            if piece is not None and _microseconds(piece.time_ns) * 1000 >= since_ns:
                high = middle
            else:
                low = middle + 1
        return low

    def _any_piece(self, index: int) -> list[Piece | None]:
        streams, self.streams = self.streams, (STDOUT_ID, STDERR_ID)
        try:
            return self.pieces(index, index + 1)
        finally:
            self.streams = streams

    def _last_lines(self, wanted: int, total: int) -> tuple[int, int]:
        """(piece, lines of it to leave out) where the last `wanted` lines begin: just after
        the newline that ends the line before them."""
        if wanted == 0:
            return total, 0
        remaining, scanned, end = wanted, 0, total
        last = True  # the log's last piece: a newline that ends it starts no line
        while end > 0 and scanned < TAIL_SCAN_BYTES:
            start = max(0, end - BATCH)
            batch = self.pieces(start, end)
            for offset in range(len(batch) - 1, -1, -1):
                piece = batch[offset]
                data = self.data(piece) if piece is not None else b""
                if not data:
                    continue
                scanned += len(data)
                newlines = data.count(b"\n")
                if last:
                    newlines -= data.endswith(b"\n")
                    last = False
                if newlines >= remaining:
                    return start + offset, newlines - remaining + 1
                remaining -= newlines
            end = start
        return end, 0

    # -- giving them out -------------------------------------------------------------

    def next_output(self, stamps: bool, budget: int = CHUNK) -> bytes:
        """What follows the position, up to about `budget` bytes: the raw bytes, or with
        `stamps` one JSON line per line of output ({"time", "stream", "text"})."""
        out: list[bytes] = []
        size = 0
        total = self.count()
        while self.position < total and size < budget:
            batch = self.pieces(self.position, min(total, self.position + BATCH))
            for piece in batch:
                if piece is not None:
                    data = self.data(piece)
                    if self.skip_lines:
                        parts = data.split(b"\n", self.skip_lines)
                        data = parts[-1] if len(parts) > self.skip_lines else b""
                        self.skip_lines = 0
                    if data:
                        chunk = _stamped(piece, data) if stamps else data
                        out.append(chunk)
                        size += len(chunk)
                self.position += 1
                if size >= budget:
                    break
        return b"".join(out)


def _stamped(piece: Piece, data: bytes) -> bytes:
    stream = STREAM_NAMES[piece.stream]
    seconds = _microseconds(piece.time_ns) / 1e6
    return b"".join(
        json.dumps(
            {"time": seconds, "stream": stream, "text": line.decode("utf-8", "replace")}
        ).encode()
        + b"\n"
        for line in data.splitlines(keepends=True)
    )


def _microseconds(time_ns: int) -> int:
    """Times go out in microseconds (a float of Unix seconds holds no more), and `since`
    compares at the same grain, so that a line's own time finds it again."""
    return (time_ns + 500) // 1000
