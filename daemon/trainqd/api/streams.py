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
from trainqd.api.log_view import AttemptLog
from trainqd.api.views import event_record
from trainqd.attempts.jobdir import JobDirs
from trainqd.monitor.records import STDERR, STDOUT
from trainqd.monitor.timeline import STDERR_ID, STDOUT_ID, TIMELINE
from trainqd.scheduling.events import ChangeNotifier
from trainqd.store import EventReader, EventRow, Store

FOLLOW_POLL = 0.2
# An event stream this far behind (in ids) replays in pages on a worker thread.
LIVE_ROWS = 100
REPLAY_PAGE = 500
REPLAY_THREADS = 2  # pages read and encoded at once, all streams together
# Sent with a stream whose `since` is older than the history kept: events before this id
# were pruned, all but each job's latest (event_pruning.py).
EVENTS_PRUNED_HEADER = "Trainq-Events-Pruned-Before"
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


def output_dir(dirs: JobDirs, job_id: int, attempt: int, node: str | None) -> Path:
    """Where an attempt's output is: its directory, or a node's inside it (a job of
    several nodes: jobdir.py)."""
    where = dirs.attempt_dir(job_id, attempt)
    return where if node is None else where / "nodes" / node


def check_logs(
    dirs: JobDirs, job_id: int, attempt: int, stream: str, node: str | None = None
) -> None:
    """Conflict unless every log file of the attempt is absent or a regular file: checked
    before a stream starts, so that the refusal is a status and one line, not a cut stream."""
    for name in (*STREAMS[stream], TIMELINE):
        opened = open_log(output_dir(dirs, job_id, attempt, node) / name)
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
    node: str | None = None,
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
                where = output_dir(dirs, job_id, current, node)
                log = AttemptLog(where, STREAM_IDS[stream], open_log)
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
    reader: EventReader | None = None
    try:
        while True:
            changed = notifier.changed()
            # Read before its events: an ended job's last event is stored with its end.
            ended = job_id is not None and _ended(store, job_id)
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
            if ended and last >= top:  # one job's stream ends with the job
                return
            if not chunk and store.last_event_id() <= last:
                await changed.wait()
    finally:
        if reader is not None:
            reader.close()


def _replay_page(reader: EventReader, since: int, job_id: int | None) -> tuple[bytes, int]:
    rows, last = reader.page(since, job_id, REPLAY_PAGE)
    return _encoded(rows), last


def _encoded(rows: list[EventRow]) -> bytes:
    return b"".join(event_record(row).model_dump_json().encode() + b"\n" for row in rows)


def _ended(store: Store, job_id: int) -> bool:
    try:
        return store.get(job_id).state in TERMINAL
    except NotFound:  # removed: nothing more will happen to it
        return True
