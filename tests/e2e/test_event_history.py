"""The event history has bounds: events past `max_events` are pruned (all but each job's
latest), at start-up as while trainqd runs, the bound and what was pruned outlive a
restart, a replay older than the history kept is told so in a header, and `trainq wait` on
an ended job whose earlier events are gone still answers."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

import pytest

from tests.support.daemon import Daemon, running_daemon
from tests.support.waiting import wait_for

MAX_EVENTS = 40
PRUNED_HEADER = "trainq-events-pruned-before"


@pytest.fixture
def bounded() -> Iterator[Daemon]:
    config = {"max_events": MAX_EVENTS, "default_stop_grace_seconds": 1}
    with running_daemon(gpus="fake:1", config=config) as daemon:
        drain = daemon.cli("drain", "--reason", "this test queues only")
        assert drain.returncode == 0, drain.stderr
        yield daemon


def stored_ids(daemon: Daemon) -> list[int]:
    db = sqlite3.connect(f"{daemon.state_dir.as_uri()}/trainq.db?mode=ro", uri=True)
    try:
        return [row[0] for row in db.execute("SELECT id FROM events ORDER BY id")]
    finally:
        db.close()


def replay(daemon: Daemon, since: int, until: int) -> tuple[str | None, list[int]]:
    """The pruned header of a stream from `since`, and the ids it sends up to `until`."""
    ids: list[int] = []
    with (
        daemon.client() as client,
        client.stream("GET", "/v1/events", params={"since": since}) as answer,
    ):
        assert answer.status_code == 200, answer.read()
        for line in answer.iter_lines():
            if line.strip():
                ids.append(int(line.split('"id":')[1].split(",")[0]))
                if ids[-1] >= until:
                    break
        return answer.headers.get(PRUNED_HEADER), ids


def test_events_are_pruned_to_their_bounds_across_a_restart(bounded: Daemon) -> None:
    cwd = bounded.base
    lone = bounded.submit({"command": ["true"], "working_dir": str(cwd)})["id"]  # event 1
    sweep = [{"command": ["true"], "working_dir": str(cwd)}] * 30
    group = bounded.post("/v1/jobs", json=sweep).json()["group_id"]  # events 2-31
    stopped = bounded.post(f"/v1/groups/{group}/stop", json={})
    assert stopped.status_code == 202, stopped.text  # events 32-61
    wait_for(lambda: stored_ids(bounded) == list(range(1, 62)), timeout=20, what="the stops")
    header, ids = replay(bounded, 0, 61)
    assert header is None
    assert ids == list(range(1, 62))

    # Pruned at start-up: the newest 40, and the lone job's only event, its latest.
    bounded.restart()
    kept = [1, *range(22, 62)]
    wait_for(lambda: stored_ids(bounded) == kept, timeout=20, what="the events to be pruned")
    header, ids = replay(bounded, 0, 61)
    assert header == "22"
    assert ids == kept
    header, ids = replay(bounded, 21, 61)
    assert header is None
    assert ids == list(range(22, 62))

    # A sweep job's submission is gone, its end is not: waiting on it ends at once.
    done = bounded.cli("wait", str(group))
    assert done.returncode == 3, done.stderr  # STOPPED
    assert bounded.job(lone)["state"] == "PENDING"

    # What was pruned is remembered: the next trainqd says so as well.
    bounded.restart()
    assert stored_ids(bounded) == kept
    assert replay(bounded, 0, 61)[0] == "22"
