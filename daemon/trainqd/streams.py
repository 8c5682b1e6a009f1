"""The two endless responses: a job's logs as they grow, and the event stream.

Both wait on the ChangeNotifier for state changes. Logs also grow without any state change
(the trainer writes its files directly, so nothing tells trainqd), so a follower re-reads
the files' ends a few times a second while its job runs: the same bounded polling `tail -f`
does where it has no inotify, and costless for a file that did not grow.

Log files are the job owner's to replace: they are read as regular files only, never
whole, and never on the event loop (docs/security.md).
"""

from __future__ import annotations

import errno
import os
import sqlite3
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import anyio

from trainq.core.errors import Conflict
from trainq.core.states import TERMINAL
from trainqd.events import ChangeNotifier
from trainqd.jobdir import JobDirs
from trainqd.monitor.records import STDERR, STDOUT
from trainqd.store import EventRow, Store
from trainqd.views import event_record

CHUNK = 1 << 16
FOLLOW_POLL = 0.2
# An event stream this far behind (in ids) replays in pages on a worker thread.
LIVE_ROWS = 100
REPLAY_PAGE = 500
REPLAY_THREADS = 2  # pages read and encoded at once, all streams together
# Sent with a stream whose `since` is older than the history kept: events before this id
# were pruned, all but each job's latest (event_pruning.py).
EVENTS_PRUNED_HEADER = "Trainq-Events-Pruned-Before"
STREAMS = {"stdout": (STDOUT,), "stderr": (STDERR,), "both": (STDOUT, STDERR)}


def _open_log(path: Path) -> tuple[int, int] | None:
    """(fd, size) of a log file; None while it does not exist. The file lies where the job's
    owner may write: a link, a FIFO or a device is refused, and nothing here can block."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except (FileNotFoundError, PermissionError):
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Conflict(f"{path.name} of this attempt is not a regular file") from None
        raise
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise Conflict(f"{path.name} of this attempt is not a regular file")
    return fd, info.st_size


class _Tail:
    """One log file, read from where the last read stopped, a bounded chunk at a time on a
    worker thread: the event loop never waits on a disk, and a client that reads slowly
    holds back the reading (one chunk in memory per stream, whatever the file's size)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self._fd: int | None = None
        self._end = 0  # the file's size when it was opened: a read stops there

    async def next_chunk(self) -> bytes:
        """Up to CHUNK new bytes; b"" once caught up with the file."""
        return await anyio.to_thread.run_sync(self._next_chunk)

    def _next_chunk(self) -> bytes:
        if self._fd is None:
            opened = _open_log(self.path)
            if opened is None:
                return b""
            self._fd, self._end = opened
            if self._end < self.offset:  # truncated by its writer: start again
                self.offset = 0
        data = b""
        if self.offset < self._end:
            data = os.pread(self._fd, min(CHUNK, self._end - self.offset), self.offset)
        if not data:
            self.close()
            return b""
        self.offset += len(data)
        return data

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def check_logs(dirs: JobDirs, job_id: int, attempt: int, stream: str) -> None:
    """Conflict unless every log file of the attempt is absent or a regular file: checked
    before a stream starts, so that the refusal is a status and one line, not a cut stream."""
    for name in STREAMS[stream]:
        opened = _open_log(dirs.attempt_dir(job_id, attempt) / name)
        if opened is not None:
            os.close(opened[0])


async def _drain(tails: list[_Tail]) -> AsyncIterator[bytes]:
    for tail in tails:
        while data := await tail.next_chunk():
            yield data


async def log_chunks(
    store: Store,
    dirs: JobDirs,
    notifier: ChangeNotifier,
    job_id: int,
    *,
    attempt: int | None,
    stream: str,
    follow: bool,
) -> AsyncIterator[bytes]:
    names = STREAMS[stream]
    current = attempt or store.get(job_id).attempt_count
    tails: list[_Tail] = []
    try:
        while True:
            changed = notifier.changed()
            job = store.get(job_id)
            if current == 0 and job.attempt_count == 0:
                if not follow or job.state in TERMINAL:
                    return
                await changed.wait()
                continue
            current = current or job.attempt_count
            tails = [_Tail(dirs.attempt_dir(job_id, current) / name) for name in names]
            if not follow:
                async for data in _drain(tails):
                    yield data
                return
            while True:
                changed = notifier.changed()
                job = store.get(job_id)
                async for data in _drain(tails):
                    yield data
                if attempt is None and job.attempt_count > current:
                    current = job.attempt_count
                    yield f"==> attempt {current} <==\n".encode()
                    break
                if job.state in TERMINAL or (attempt is not None and job.attempt_count > attempt):
                    async for data in _drain(tails):  # written before the end was recorded
                        yield data
                    return
                with anyio.move_on_after(FOLLOW_POLL):
                    await changed.wait()
    finally:
        for tail in tails:
            tail.close()


async def event_lines(
    store: Store,
    notifier: ChangeNotifier,
    job_id: int | None,
    since: int,
    replays: anyio.CapacityLimiter,
) -> AsyncIterator[bytes]:
    """The events after `since`, then each as it is stored. A stream more than LIVE_ROWS
    behind replays the history a REPLAY_PAGE at a time, read and encoded on a worker thread
    (at most `replays`' number at once, whoever asks): 16 streams replaying 105,000 events
    on the loop made another user's `trainq ls` wait 19 s. Caught up, it reads the few
    newest on the loop, which a thread's round trip would cost more than."""
    last = since
    reader: sqlite3.Connection | None = None
    try:
        while True:
            changed = notifier.changed()
            top = store.last_event_id()
            if top - last > LIVE_ROWS:
                if reader is None:
                    reader = store.event_reader()
                chunk, last = await anyio.to_thread.run_sync(
                    _replay_page, reader, last, job_id, limiter=replays
                )
            else:
                rows = store.events_since(last, job_id, limit=LIVE_ROWS)
                chunk = _encoded(rows)
                last = rows[-1].id if len(rows) == LIVE_ROWS else max(last, top)
            if chunk:
                yield chunk
            elif store.last_event_id() <= last:
                await changed.wait()
    finally:
        if reader is not None:
            reader.close()


def _replay_page(reader: sqlite3.Connection, since: int, job_id: int | None) -> tuple[bytes, int]:
    rows, last = Store.event_page(reader, since, job_id, REPLAY_PAGE)
    return _encoded(rows), last


def _encoded(rows: list[EventRow]) -> bytes:
    return b"".join(event_record(row).model_dump_json().encode() + b"\n" for row in rows)
