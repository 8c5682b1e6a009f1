"""trainqd with a long history: 100,000 ended and 1,000 pending jobs, against an empty store
measured the same way in the same run.

    .venv/bin/python bench/scale.py [--ended 100000] [--pending 1000] [--n 300] [--source TREE]

The history is written straight into the state database with bulk SQL while trainqd is
stopped (one transaction, well under a second), then trainqd is started on it; the one fake
GPU is held by a long job so that submitted jobs queue. Measured, each on the empty store
first and on the full one after:

- first page: GET /v1/jobs?all=true (100 jobs and the count), p50 over n calls;
- stall: the longest GET /v1/health answer while 10 clients list pages of 1,000 and one
  submits: what any request waits behind the busiest handler and for a CPU; and, from
  trainqd's own event-loop probe (trainq_event_loop_lag_seconds), how many times in that
  window the loop was held more than 10 ms and the bucket bound of the longest hold;
- submit p50 on one connection, and submits/s with 1 and with 8 concurrent connections (with
  the commits they took per submit: group commit shares them), beside the rate of a request
  that reads one job kept in memory, with 8 connections;
- a sweep of 10,000 specs in one request (the answer's time and the longest step trainqd's
  loop ran meanwhile), then the stop of its group;
- restart: from start to the first answered health request; RSS after the listings.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import threading
import time
from multiprocessing.synchronize import Event
from pathlib import Path

from api import cpu_seconds
from common import Client, Daemon, hold_the_gpu, load, machine, running_daemon

QUEUED_JOB = json.dumps({"name": "queued", "gpus": 1, "command": ["/bin/true"]}).encode()
SPEC = json.dumps({"name": "old", "gpus": 1, "command": ["python3", "train.py"]})


def seed(database: Path, ended: int, pending: int) -> None:
    import sqlite3

    db = sqlite3.connect(database)
    now = time.time()
    rows = [
        ("old", "COMPLETED" if n < ended else "PENDING", 0, 1000 + n % 7, 1000, f"user{n % 7}")
        for n in range(ended + pending)
    ]
    with db:
        db.executemany(
            "INSERT INTO jobs(name, state, priority, owner_uid, owner_gid, owner_user, spec,"
            " created_at, ended_at) VALUES (?,?,?,?,?,?,?,?,?)",
            [(*r, SPEC, now, now if r[1] != "PENDING" else None) for r in rows],
        )
    db.close()


def timed(client: Client, method: str, path: str, body: bytes | None = None) -> float:
    began = time.perf_counter()
    status, data = client.request(method, path, body)
    took = time.perf_counter() - began
    if status >= 300:
        raise RuntimeError(f"{method} {path}: {status} {data[:200]!r}")
    return took


def requests_per_second(
    daemon: Daemon, clients: int, each: int, method: str, path: str, *, body: bytes | None = None
) -> float:
    """Requests per second from `clients` threads, each on its own connection."""

    def run() -> None:
        with daemon.client() as client:
            for _ in range(each):
                timed(client, method, path, body)

    threads = [threading.Thread(target=run) for _ in range(clients)]
    began = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return clients * each / (time.perf_counter() - began)


def submits_per_second(daemon: Daemon, clients: int, each: int) -> float:
    return requests_per_second(daemon, clients, each, "POST", "/v1/jobs", body=QUEUED_JOB)


def commits(client: Client) -> float:
    """trainqd's database commits so far (trainq_database_commits_total)."""
    _, body = client.request("GET", "/v1/metrics")
    for line in body.decode().splitlines():
        if line.startswith("trainq_database_commits_total "):
            return float(line.split()[1])
    raise RuntimeError("no trainq_database_commits_total in /v1/metrics")


def grouped_submits(daemon: Daemon, clients: int, each: int) -> dict[str, float]:
    """Submits/s from `clients` connections at once, the commits they took per submit, and
    trainqd's CPU time per submit (steadier than the rate on a busy machine)."""
    assert daemon.proc is not None
    with daemon.client() as client:
        before = commits(client)
        cpu = cpu_seconds(daemon.proc.pid)
        rate = submits_per_second(daemon, clients, each)
        used = cpu_seconds(daemon.proc.pid) - cpu
        taken = commits(client) - before
    return {
        f"submits/s, {clients} clients": rate,
        f"commits per submit, {clients} clients": taken / (clients * each),
        f"trainqd CPU ms per submit, {clients} clients": used / (clients * each) * 1000,
    }


def sweep(daemon: Daemon, size: int) -> dict[str, float]:
    """One POST /v1/jobs of `size` specs (the CLI's shape: a working directory and PATH
    each): its answer's time, the longest step trainqd's loop ran meanwhile; then the
    group's stop, which also leaves the queue as it was for what follows."""
    specs = [
        {
            "name": f"sweep-{n}",
            "gpus": 1,
            "command": ["python3", "train.py"],
            "hyperparameters": {"lr": str(n)},
            "working_dir": "/tmp",
            "environment": {"PATH": "/usr/local/bin:/usr/bin:/bin"},
        }
        for n in range(size)
    ]
    body = json.dumps(specs).encode()
    with daemon.client() as client:
        _, busy_before = loop_probe(client)
        began = time.perf_counter()
        status, answer = client.request("POST", "/v1/jobs", body)
        took = time.perf_counter() - began
        if status != 201:
            raise RuntimeError(f"the sweep: {status} {answer[:200]!r}")
        _, busy_after = loop_probe(client)
        stop = timed(client, "POST", f"/v1/groups/{json.loads(answer)['group_id']}/stop")
    _, busiest = loop_held(busy_before, busy_after)
    return {
        f"sweep of {size:,} in one request, s": took,
        "its longest loop step ≤ ms": busiest * 1000,
        f"stop of the {size:,}-job group, s": stop,
    }


def _load(socket: Path, method: str, path: str, body: bytes | None, done: Event) -> None:
    with Client(socket) as client:
        while not done.is_set():
            timed(client, method, path, body)


Histogram = dict[float, float]  # upper bound -> observations up to it


def loop_probe(client: Client) -> tuple[Histogram, Histogram]:
    """trainqd's event-loop probe: its lateness and its loop-CPU histograms."""
    from prometheus_client.parser import text_string_to_metric_families

    _, body = client.request("GET", "/v1/metrics")
    found: dict[str, Histogram] = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if sample.name.endswith("_bucket"):
                found.setdefault(family.name, {})[float(sample.labels["le"])] = sample.value
    return found["trainq_event_loop_lag_seconds"], found["trainq_event_loop_busy_seconds"]


def loop_held(before: Histogram, after: Histogram) -> tuple[float, float]:
    """Between two readings: observations over 10 ms, and the bucket bound of the largest."""
    counts = {le: after[le] - before.get(le, 0.0) for le in sorted(after)}
    total = counts[float("inf")]
    late = total - counts[0.01]
    worst = min((le for le, n in counts.items() if n == total), default=float("inf"))
    return late, worst


def stall(daemon: Daemon, seconds: float) -> dict[str, float]:
    """While 10 clients list and one submits: the longest health answer; trainqd's loop
    wake-ups later than 10 ms and the bound of the latest; probe windows in which the loop's
    thread used more than 10 ms of CPU and the bound of the largest (that bounds the longest
    step run on the loop; lateness also counts waiting for a CPU)."""
    # The load comes from other processes: threads here would make the probe wait for this
    # process's own interpreter lock, not for trainqd.
    done = multiprocessing.Event()
    listing = ("GET", "/v1/jobs?all=true&limit=1000&after=1000", None)
    loads = [listing] * 10 + [("POST", "/v1/jobs", QUEUED_JOB)]
    threads = [
        multiprocessing.Process(target=_load, args=(daemon.socket, *load, done)) for load in loads
    ]
    for t in threads:
        t.start()
    worst = 0.0
    with daemon.client() as probe:
        lag_before, busy_before = loop_probe(probe)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            worst = max(worst, timed(probe, "GET", "/v1/health"))
            time.sleep(0.002)
        lag_after, busy_after = loop_probe(probe)
    done.set()
    for t in threads:
        t.join()
    late, latest = loop_held(lag_before, lag_after)
    busy, busiest = loop_held(busy_before, busy_after)
    return {
        "longest health answer ms": worst * 1000,
        "loop woke > 10 ms late (times)": late,
        "latest wake-up ≤ ms": latest * 1000,
        "loop busy > 10 ms in a window (times)": busy,
        "longest loop step ≤ ms": busiest * 1000,
    }


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def measure(daemon: Daemon, n: int) -> dict[str, float]:
    out: dict[str, float] = {}
    with daemon.client() as client:
        pages = [timed(client, "GET", "/v1/jobs?all=true") for _ in range(n)]
        out["first page ms"] = statistics.median(pages) * 1000
        submits = [timed(client, "POST", "/v1/jobs", QUEUED_JOB) for _ in range(n)]
        out["submit p50 ms"] = statistics.median(submits) * 1000
    out.update(stall(daemon, 5.0))
    out["submits/s, 1 client"] = submits_per_second(daemon, 1, n)
    out.update(grouped_submits(daemon, 8, n // 8 + 1))
    # The baseline: a request that reads one job kept in memory (the GPU's holder, job 1).
    out["GET one job/s, 8 clients (baseline)"] = requests_per_second(
        daemon, 8, n // 8 + 1, "GET", "/v1/jobs/1"
    )
    assert daemon.proc is not None
    out["RSS MiB"] = rss_mib(daemon.proc.pid)
    out.update(sweep(daemon, 10_000))  # after RSS: its answer alone is 10 MB of records
    daemon.stop()
    began = time.perf_counter()
    daemon.start()
    out["restart s"] = time.perf_counter() - began
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ended", type=int, default=100_000)
    parser.add_argument("--pending", type=int, default=1_000)
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--source", type=Path, help="run trainqd from this copy of the tree")
    args = parser.parse_args()
    print(f"# {machine()}; load {load()}")
    with running_daemon(source=args.source) as daemon:
        with daemon.client() as client:
            hold_the_gpu(client)
        empty = measure(daemon, args.n)
        daemon.stop()
        seed(daemon.state_dir / "trainq.db", args.ended, args.pending)
        daemon.start()
        full = measure(daemon, args.n)
    print(f"| measure | empty store | {args.ended:,} ended + {args.pending:,} pending |")
    print("|---|---:|---:|")
    for key, value in empty.items():
        print(f"| {key} | {value:.2f} | {full[key]:.2f} |")


if __name__ == "__main__":
    main()
