"""The two endless responses: a job's logs as they grow, and the event stream.

Both wait on the ChangeNotifier for state changes. Logs also grow without any state change
(the monitor relays the trainer's output into files, and nothing tells trainqd), so a
follower re-reads the timeline's end a few times a second while its job runs: the same
bounded polling `tail -f` does where it has no inotify, and costless for a file that did
not grow. The events of one job end once it has ended.

Log files are the job owner's to replace: they are read as regular files only, never
whole, and never on the event loop (docs/security.md).
"""

from __future__ import annotations

import errno
import functools
import json
import os
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import anyio

from trainq.core.errors import Conflict, NotFound
from trainq.core.states import TERMINAL
from trainqd.events import ChangeNotifier
from trainqd.jobdir import JobDirs
from trainqd.log_view import AttemptLog
from trainqd.monitor.records import STDERR, STDOUT
from trainqd.monitor.timeline import STDERR_ID, STDOUT_ID, TIMELINE
from trainqd.store import Store
from trainqd.views import event_record

FOLLOW_POLL = 0.2
EVENT_PAGE = 1000
STREAMS = {"stdout": (STDOUT,), "stderr": (STDERR,), "both": (STDOUT, STDERR)}
STREAM_IDS = {"stdout": (STDOUT_ID,), "stderr": (STDERR_ID,), "both": (STDOUT_ID, STDERR_ID)}


def open_log(path: Path) -> tuple[int, int] | None:
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


def check_logs(dirs: JobDirs, job_id: int, attempt: int, stream: str) -> None:
    """Conflict unless every log file of the attempt is absent or a regular file: checked
    before a stream starts, so that the refusal is a status and one line, not a cut stream."""
    for name in (*STREAMS[stream], TIMELINE):
        opened = open_log(dirs.attempt_dir(job_id, attempt) / name)
        if opened is not None:
            os.close(opened[0])


async def log_chunks(
    store: Store,
    dirs: JobDirs,
    notifier: ChangeNotifier,
    job_id: int,
    *,
    attempt: int | None,
    stream: str,
    follow: bool,
    tail: int | None = None,
    since_ns: int | None = None,
    stamps: bool = False,
) -> AsyncIterator[bytes]:
    """The attempt's output in time order (log_view.py): from the last `tail` lines and
    `since_ns` on, raw or `stamps` (JSON lines); `follow` goes on until the job ends, into
    each new attempt unless `attempt` names one."""
    current = attempt or store.get(job_id).attempt_count
    log: AttemptLog | None = None
    positioned = False  # `tail` and `since` place the start of the first attempt shown
    try:
        while True:
            changed = notifier.changed()
            job = store.get(job_id)
            if current == 0:
                if job.attempt_count == 0:
                    if not follow or job.state in TERMINAL:
                        return
                    await changed.wait()
                    continue
                current = job.attempt_count
            if log is None:
                log = AttemptLog(dirs.attempt_dir(job_id, current), STREAM_IDS[stream], open_log)
            ready = await anyio.to_thread.run_sync(log.ready)
            if ready and not positioned:
                seek = functools.partial(log.seek, tail=tail, since_ns=since_ns)
                await anyio.to_thread.run_sync(seek)
                positioned = True
            if ready:
                async for data in _drain(log, stamps):
                    yield data
            if not follow:
                return
            if attempt is None and job.attempt_count > current:
                current = job.attempt_count
                log.close()
                log = None
                yield _attempt_marker(current, stamps)
                continue
            if job.state in TERMINAL or (attempt is not None and job.attempt_count > attempt):
                if ready:
                    async for data in _drain(log, stamps):  # written before the end was recorded
                        yield data
                return
            with anyio.move_on_after(FOLLOW_POLL):
                await changed.wait()
    finally:
        if log is not None:
            log.close()


async def _drain(log: AttemptLog, stamps: bool) -> AsyncIterator[bytes]:
    while data := await anyio.to_thread.run_sync(log.next_output, stamps):
        yield data


def _attempt_marker(attempt: int, stamps: bool) -> bytes:
    if stamps:
        return json.dumps({"attempt": attempt}).encode() + b"\n"
    return f"==> attempt {attempt} <==\n".encode()


async def event_lines(
    store: Store, notifier: ChangeNotifier, job_id: int | None, since: int
) -> AsyncIterator[bytes]:
    last = since
    while True:
        changed = notifier.changed()
        # Read before its events: an ended job's last event is stored with its end.
        ended = job_id is not None and _ended(store, job_id)
        rows = store.events_since(last, job_id, limit=EVENT_PAGE)
        for row in rows:
            last = row.id
            yield event_record(row).model_dump_json().encode() + b"\n"
        if ended and len(rows) < EVENT_PAGE:
            return
        if not rows:
            await changed.wait()


def _ended(store: Store, job_id: int) -> bool:
    try:
        return store.get(job_id).state in TERMINAL
    except NotFound:  # removed: nothing more will happen to it
        return True
