"""Event replays against listing: 16 streams replay a long event history from id 0 while
another client lists jobs, on trainqd as it is and on the tree of `--before` (a commit),
measured the same way in the same run.

    .venv/bin/python bench/replay.py [--events 100000] [--before ee3905e]

The history (one job, then its events) is written straight into the stopped daemon's
`trainq.db`. Measured for each: how long a `GET /v1/jobs` page takes while the replays run
(the first, and the longest of those made until the replays end), and how long the 16
replays took to reach the last event.
"""

from __future__ import annotations

import argparse
import multiprocessing
import socket
import sqlite3
import subprocess
import tempfile
import time
from multiprocessing.synchronize import Event
from pathlib import Path

from common import load, machine, ratio, running_daemon

STREAMS = 16
SPEC = '{"command": ["/bin/true"]}'


def seed(database: Path, events: int) -> None:
    db = sqlite3.connect(database)
    now = time.time()
    with db:
        db.execute(
            "INSERT INTO jobs(id, name, state, priority, owner_uid, owner_gid, owner_user, spec,"
            " created_at) VALUES (1, NULL, 'PENDING', 0, 0, 0, 'root', ?, ?)",
            (SPEC, now),
        )
        db.executemany(
            "INSERT INTO events(time, job_id, from_state, to_state, reason)"
            " VALUES (?, 1, 'PENDING', 'PENDING', ?)",
            ((now, f"updated by root: priority {n} -> {n + 1}") for n in range(events)),
        )
    db.close()


def replay(path: Path, last: int, begun: Event) -> None:
    """One stream from id 0, read as fast as it comes, until the event `last`."""
    mark = b'"id":%d,' % last
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(str(path))
        sock.sendall(b"GET /v1/events?since=0 HTTP/1.1\r\nHost: trainq\r\n\r\n")
        tail = b""
        while True:
            data = sock.recv(1 << 16)
            if not data:
                raise RuntimeError("the stream ended")
            begun.set()
            if mark in tail + data:
                return
            tail = data[-32:]


def measure(source: Path | None, events: int) -> dict[str, float]:
    with running_daemon(source=source) as daemon:
        daemon.stop()
        seed(daemon.state_dir / "trainq.db", events)
        daemon.start()
        starts = [multiprocessing.Event() for _ in range(STREAMS)]
        streams = [
            multiprocessing.Process(target=replay, args=(daemon.socket, events, begun))
            for begun in starts
        ]
        began = time.perf_counter()
        for stream in streams:
            stream.start()
        for begun in starts:
            begun.wait(60)
        pages: list[float] = []
        with daemon.client() as client:
            while any(stream.is_alive() for stream in streams):
                asked = time.perf_counter()
                client.request("GET", "/v1/jobs?all=true")
                pages.append(time.perf_counter() - asked)
        for stream in streams:
            stream.join()
        took = time.perf_counter() - began
    return {
        "first GET /v1/jobs during the replays, ms": pages[0] * 1000,
        "longest GET /v1/jobs during the replays, ms": max(pages) * 1000,
        "listings answered during the replays": len(pages),
        "16 replays to the last event, s": took,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--before", default="ee3905e", help="the commit to compare with")
    args = parser.parse_args()
    print(f"# {machine()}; {load()}")
    with tempfile.TemporaryDirectory(prefix="tqbefore") as tree:
        archive = subprocess.run(
            ["git", "archive", args.before, "cli", "daemon"], check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", tree], input=archive, check=True)
        before = measure(Path(tree), args.events)
    after = measure(None, args.events)
    title = f"measure ({args.events:,} events, {STREAMS} streams)"
    print(f"| {title} | {args.before} | now | now/before |")
    print("|---|---:|---:|---:|")
    for key, value in before.items():
        print(f"| {key} | {value:.1f} | {after[key]:.1f} | {ratio(after[key], value)} |")


if __name__ == "__main__":
    main()
