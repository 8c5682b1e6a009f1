"""Following jobs to their end on the events stream, for `Client.wait`, `Client.wait_group`
and the commands that wait (`trainq wait`, `submit --wait`, `wait --group`).

One job: `GET /v1/events?job=ID&since=N`, first the job's stored events, then live ones, so a
job that ends between the submit and the first read is never missed, and nothing polls. A
training run can outlast the daemon's process (an upgrade, a restart: the job's monitor
keeps it running), so a lost connection is not the end: the wait reconnects from the last
event it saw for up to `RECONNECT_SECONDS` of outage.

A group: the stream is opened first and the group's states read after, so no end between
the two is missed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from trainq.client.api import Api
from trainq.client.transport import iter_lines
from trainq.core.errors import NotFound, Unavailable
from trainq.core.states import TERMINAL

RECONNECT_SECONDS = 120.0
RECONNECT_INTERVAL = 1.0

Event = dict[str, Any]


def parse_event(line: bytes) -> Event | None:
    """An event of the stream; None for a keep-alive (an empty line)."""
    if not line.strip():
        return None
    try:
        event = json.loads(line)
    except ValueError:
        raise Unavailable(f"trainqd sent an event that is not JSON: {line[:80]!r}") from None
    return event if isinstance(event, dict) else None


class Followed:
    """How far following a job has read: the last event's id (to resume after), the job's
    state, and how many lines have come (a stream that delivered something was a working
    one). `on_event` hears each of the job's events."""

    def __init__(self, state: Any = None, on_event: Callable[[Event], None] | None = None) -> None:
        self.since = 0
        self.state = state
        self.lines = 0
        self.on_event = on_event


def _follow_once(api: Api, job_id: int, followed: Followed) -> Event | None:
    """Read events until the job's terminal one (returned) or the stream's end (None)."""
    with api.get_events(job=job_id, since=followed.since) as chunks:
        for line in iter_lines(chunks):
            followed.lines += 1
            event = parse_event(line)
            if event is None:
                continue
            if isinstance(event.get("id"), int):
                followed.since = max(followed.since, event["id"])
            if event.get("job_id", job_id) != job_id:
                continue
            followed.state = event.get("to_state", followed.state)
            if followed.on_event is not None:
                followed.on_event(event)
            if followed.state in TERMINAL:
                return event
    return None


def follow_until_ended(
    api: Api,
    job_id: int,
    followed: Followed | None = None,
    on_lost: Callable[[str], None] | None = None,
) -> Event:
    """Read the job's events until its terminal one (returned), reconnecting from the last
    event seen while trainqd is away, for up to RECONNECT_SECONDS of outage; `on_lost` hears
    the first error of each outage."""
    followed = followed or Followed()
    lost_at: float | None = None  # when trainqd was last seen working, if it is not now
    while True:
        lines_before = followed.lines
        try:
            ended = _follow_once(api, job_id, followed)
            if ended is not None:
                return ended
            problem = "trainqd closed the events stream"
        except Unavailable as exc:  # DaemonUnreachable included
            problem = exc.message
        now = time.monotonic()
        if followed.lines > lines_before:
            lost_at = None  # it worked for a while: this is a new outage
        if lost_at is None:
            lost_at = now
            if on_lost is not None:
                on_lost(problem)
        elif now - lost_at > RECONNECT_SECONDS:
            raise Unavailable(
                f"gave up waiting for job {job_id} after {RECONNECT_SECONDS:g} s "
                f"without trainqd; last error: {problem}"
            )
        time.sleep(RECONNECT_INTERVAL)


def follow_group(api: Api, group: int) -> dict[int, str]:
    """Each job's final state, read from the events stream until none is left unfinished."""
    with api.get_events() as chunks:  # from now on
        listed = api.all_jobs(group=group, include_ended=True)
        if not listed:
            raise NotFound(f"no group {group}")
        states: dict[int, str] = {int(job["id"]): str(job["state"]) for job in listed}
        left = {job_id for job_id, state in states.items() if state not in TERMINAL}
        if not left:
            return states
        for line in iter_lines(chunks):
            if not line.strip():
                continue  # a keep-alive
            event = json.loads(line)
            job_id = event.get("job_id")
            if job_id not in states:
                continue
            states[job_id] = str(event.get("to_state"))
            if states[job_id] in TERMINAL:
                left.discard(job_id)
            else:  # an older event than the listing showed: its later ones follow
                left.add(job_id)
            if not left:
                return states
    raise Unavailable("trainqd closed the events stream")


def wait_for_group(
    api: Api, group: int, on_lost: Callable[[str], None] | None = None
) -> dict[int, str]:
    """`follow_group`, again while trainqd is away, for up to RECONNECT_SECONDS; `on_lost`
    hears the first error."""
    lost_at: float | None = None
    while True:
        try:
            return follow_group(api, group)
        except Unavailable as exc:
            now = time.monotonic()
            if lost_at is None:
                lost_at = now
                if on_lost is not None:
                    on_lost(exc.message)
            elif now - lost_at > RECONNECT_SECONDS:
                raise
        time.sleep(RECONNECT_INTERVAL)
