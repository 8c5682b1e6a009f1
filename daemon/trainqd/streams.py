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
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import anyio

from trainq.core.errors import Conflict
from trainq.core.states import TERMINAL
from trainqd.events import ChangeNotifier
from trainqd.jobdir import JobDirs
from trainqd.monitor.records import STDERR, STDOUT
from trainqd.store import Store
from trainqd.views import event_record

CHUNK = 1 << 16
FOLLOW_POLL = 0.2
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
    store: Store, notifier: ChangeNotifier, job_id: int | None, since: int
) -> AsyncIterator[bytes]:
    last = since
    while True:
        changed = notifier.changed()
        rows = store.events_since(last, job_id)
        for row in rows:
            last = row.id
            yield event_record(row).model_dump_json().encode() + b"\n"
        if not rows:
            await changed.wait()
