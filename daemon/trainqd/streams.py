"""The two endless responses: a job's logs as they grow, and the event stream.

Both wait on the ChangeNotifier for state changes. Logs also grow without any state change
(the trainer writes its files directly, so nothing tells trainqd), so a follower re-reads
the files' ends a few times a second while its job runs: the same bounded polling `tail -f`
does where it has no inotify, and costless for a file that did not grow.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import anyio

from trainq.states import TERMINAL
from trainqd.events import ChangeNotifier
from trainqd.jobdir import JobDirs
from trainqd.monitor.records import STDERR, STDOUT
from trainqd.store import Store
from trainqd.views import event_record

CHUNK = 1 << 16
FOLLOW_POLL = 0.2
STREAMS = {"stdout": (STDOUT,), "stderr": (STDERR,), "both": (STDOUT, STDERR)}


class _Tail:
    """One log file read from where the last read stopped."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def read_new(self) -> bytes:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except (FileNotFoundError, PermissionError, OSError):
            return b""
        try:
            size = os.fstat(fd).st_size
            if size < self.offset:  # truncated by its writer: start again
                self.offset = 0
            chunks = []
            while self.offset < size:
                data = os.pread(fd, min(CHUNK, size - self.offset), self.offset)
                if not data:
                    break
                self.offset += len(data)
                chunks.append(data)
            return b"".join(chunks)
        finally:
            os.close(fd)


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
            for tail in tails:
                data = tail.read_new()
                if data:
                    yield data
            return
        while True:
            changed = notifier.changed()
            job = store.get(job_id)
            for tail in tails:
                data = tail.read_new()
                if data:
                    yield data
            if attempt is None and job.attempt_count > current:
                current = job.attempt_count
                yield f"==> attempt {current} <==\n".encode()
                break
            if job.state in TERMINAL or (attempt is not None and job.attempt_count > attempt):
                for tail in tails:  # what was written before the end was recorded
                    data = tail.read_new()
                    if data:
                        yield data
                return
            with anyio.move_on_after(FOLLOW_POLL):
                await changed.wait()


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
