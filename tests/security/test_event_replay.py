"""A hostile user replays a long event history in every stream trainqd allows them: the
replays query and encode in pages on worker threads, so another user's `trainq ls` is
answered while those streams are still replaying, where it used to wait for all of them
(19 s for 16 streams over 105,000 events)."""

from __future__ import annotations

import sqlite3
import subprocess
import threading
from collections.abc import Iterator

import pytest

from tests.support.accounts import ADMINS, Accounts
from tests.support.daemon import Daemon, running_daemon
from tests.support.users import SYSTEM_PYTHON, trainq_as
from tests.support.waiting import wait_for

pytestmark = pytest.mark.multiuser

STREAMS = 16  # max_streams_per_user's default
ROUNDS = 3  # sweeps of 10,000 jobs queued and stopped: 60,000 events

# Standard library only, run as the attacker: one events stream from id 0, read as fast as
# it comes, saying when its replay has begun, passed a quarter of the history, and reached
# the last event.
_REPLAYER = """
import socket, sys
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.connect(sys.argv[1])
sock.sendall(b"GET /v1/events?since=0 HTTP/1.1\\r\\nHost: trainq\\r\\n\\r\\n")
last = int(sys.argv[2])
marks = [(b'"id":1,', "replaying"), (b'"id":%d,' % (last // 4), "quarter"),
         (b'"id":%d,' % last, "done")]
tail = b""
while marks:
    data = sock.recv(1 << 16)
    if not data:
        sys.exit("the stream ended")
    while marks and marks[0][0] in tail + data:
        print(marks.pop(0)[1], flush=True)
    tail = data[-32:]
"""


@pytest.fixture
def history(accounts: Accounts) -> Iterator[Daemon]:
    """A root trainqd with a long event history, its host drained."""
    config = {"admin_group": ADMINS, "default_stop_grace_seconds": 1}
    with running_daemon(gpus="fake:4", config=config) as daemon:
        assert daemon.cli("drain", "--reason", "this test queues only").returncode == 0
        spec = {"command": ["true"], "working_dir": str(daemon.base)}
        for _ in range(ROUNDS):
            answer = daemon.post("/v1/jobs", json=[spec] * 10_000, timeout=120)
            assert answer.status_code == 201, answer.text[:200]
            group = answer.json()["group_id"]
            assert daemon.post(f"/v1/groups/{group}/stop", json={}).status_code == 202
            wait_for(
                lambda group=group: (
                    not daemon.get("/v1/jobs", params={"group": group, "limit": 1}).json()["jobs"]
                ),
                timeout=120,
                what="the sweep to be stopped",
            )
        yield daemon


def last_event(daemon: Daemon) -> int:
    db = sqlite3.connect(f"{daemon.state_dir.as_uri()}/trainq.db?mode=ro", uri=True)
    try:
        (last,) = db.execute("SELECT max(id) FROM events").fetchone()
    finally:
        db.close()
    return int(last)


def test_replays_of_one_user_do_not_hold_another_users_listing(
    history: Daemon, accounts: Accounts
) -> None:
    """tq-alice replays the whole history in 16 streams; tq-bob's `trainq ls`, made once
    all of them are replaying, is answered before any of them has passed a quarter of it
    (on the loop, the replays held it until two had ended) and every stream ends whole."""
    alice, bob = accounts.alice, accounts.bob
    last = last_event(history)
    assert last >= ROUNDS * 20_000
    argv = [SYSTEM_PYTHON, "-I", "-c", _REPLAYER, str(history.socket), str(last)]
    said: list[tuple[str, int]] = []  # what happened, in order
    replays = [alice.popen(argv, stdout=subprocess.PIPE, text=True) for _ in range(STREAMS)]
    readers = [
        threading.Thread(target=_follow, args=(replay, index, said), daemon=True)
        for index, replay in enumerate(replays)
    ]
    try:
        for reader in readers:
            reader.start()
        wait_for(
            lambda: sum(what == "replaying" for what, _ in said) == STREAMS,
            timeout=60,
            what="every replay to begin",
        )
        listed = trainq_as(history, bob, "ls")
        said.append(("listed", -1))
        assert listed.returncode == 0, listed.stderr
        for reader in readers:
            reader.join(timeout=300)
        assert sorted(i for what, i in said if what == "done") == list(range(STREAMS)), said
        order = [what for what, _ in said]
        assert "quarter" not in order[: order.index("listed")], "tq-bob waited for the replays"
    finally:
        for replay in replays:
            replay.kill()
            replay.wait()
            if replay.stdout is not None:
                replay.stdout.close()


def _follow(replay: subprocess.Popen[str], index: int, said: list[tuple[str, int]]) -> None:
    assert replay.stdout is not None
    said.extend((line.strip(), index) for line in replay.stdout)  # each as it comes
