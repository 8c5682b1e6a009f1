"""POST /v1/jobs on one keep-alive connection: latency (p50, p99) and sustained submits/s,
on a short queue and on long ones, against GET /v1/health on the same connection.

    .venv/bin/python bench/api.py [--n 1000] [--depths 0,1000,5000]

The daemon has one fake GPU, held by a long job; every submitted job asks for that GPU, so
it queues and the measurement is about submitting, never about starting (the holder is
checked after every turn). For each depth the queue is first filled (untimed) to that many
pending jobs, then:

- latency: n rounds of one health request, one submit and one fdatasync, so all three see the
  same noise. The fdatasync (300 bytes appended to a file in the state dir, then synced) is
  the disk's floor under a submission: trainqd acknowledges a job only once it is on disk,
  and on this shared machine a sync costs from 0.15 ms to several ms, depending on who
  else writes;
- rate: n health requests back to back, then n submits back to back. The queue grows by 2n
  during a depth's turn: the table says where it started.

Beside the rate, the daemon's CPU time per request (from /proc): it moves less with the
noise than the clock does, and it includes the scheduler's planning that each submit wakes,
which a submit's own latency may not (the answer is sent first).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from common import (
    Client,
    Daemon,
    Summary,
    check_holding,
    hold_the_gpu,
    load,
    machine,
    ratio,
    running_daemon,
)

QUEUED_JOB = json.dumps({"name": "queued", "gpus": 1, "command": ["/bin/true"]}).encode()
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """user + system CPU time of process `pid` so far, threads included."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def health(client: Client) -> float:
    began = time.perf_counter()
    status, body = client.request("GET", "/v1/health")
    took = time.perf_counter() - began
    if status != 200:
        raise RuntimeError(f"health: {status} {body[:200]!r}")
    return took


def submit(client: Client) -> float:
    began = time.perf_counter()
    status, body = client.request("POST", "/v1/jobs", QUEUED_JOB)
    took = time.perf_counter() - began
    if status != 201:
        raise RuntimeError(f"submit: {status} {body[:200]!r}")
    return took


class SyncFloor:
    """What one durable append costs on the state dir's file system right now."""

    def __init__(self, directory: Path) -> None:
        self.fd = os.open(directory / "sync-floor", os.O_WRONLY | os.O_CREAT | os.O_APPEND)

    def __call__(self) -> float:
        began = time.perf_counter()
        os.write(self.fd, b"x" * 300)
        os.fdatasync(self.fd)
        return time.perf_counter() - began

    def close(self) -> None:
        os.close(self.fd)


def pending(client: Client) -> int:
    counts: dict[str, int] = client.json("GET", "/v1/health")["jobs"]
    return counts.get("PENDING", 0)


class Block:
    """n requests back to back: their rate, and the daemon's CPU time per request."""

    def __init__(self, daemon: Daemon, client: Client, call: str, n: int) -> None:
        assert daemon.proc is not None
        request = health if call == "health" else submit
        cpu_before = cpu_seconds(daemon.proc.pid)
        began = time.perf_counter()
        for _ in range(n):
            request(client)
        self.seconds = time.perf_counter() - began
        self.cpu_per_request = (cpu_seconds(daemon.proc.pid) - cpu_before) / n
        self.rate = n / self.seconds


def one_depth(daemon: Daemon, client: Client, floor: SyncFloor, depth: int, n: int) -> list[str]:
    while (have := pending(client)) < depth:
        for _ in range(min(500, depth - have)):
            submit(client)
    start_depth = pending(client)
    health_times: list[float] = []
    submit_times: list[float] = []
    sync_times: list[float] = []
    for _ in range(n):
        health_times.append(health(client))
        submit_times.append(submit(client))
        sync_times.append(floor())
    health_block = Block(daemon, client, "health", n)
    submit_block = Block(daemon, client, "submit", n)
    h, s, f = Summary.of(health_times), Summary.of(submit_times), Summary.of(sync_times)
    return [
        f"| {start_depth} | GET /v1/health | {h.median * 1e3:.2f} | {h.p99 * 1e3:.2f} | "
        f"{health_block.rate:.0f} | {health_block.cpu_per_request * 1e3:.2f} | baseline |",
        f"| {start_depth} | fdatasync (floor) | {f.median * 1e3:.2f} | {f.p99 * 1e3:.2f} | | | |",
        f"| {start_depth} | POST /v1/jobs | {s.median * 1e3:.2f} | {s.p99 * 1e3:.2f} | "
        f"{submit_block.rate:.0f} | {submit_block.cpu_per_request * 1e3:.2f} | "
        f"p50 {ratio(s.median, h.median)}, rate {ratio(submit_block.rate, health_block.rate)} |",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1000, help="requests of each kind per depth")
    parser.add_argument("--depths", default="0,1000", help="pending jobs before each turn")
    parser.add_argument("--warmup", type=int, default=200, help="health requests first")
    parser.add_argument("--source", type=Path, help="run trainqd from this copy of the tree")
    args = parser.parse_args()
    print(machine())
    print(load())
    with running_daemon("fake:1", args.source) as daemon, daemon.client() as client:
        holder = hold_the_gpu(client)
        floor = SyncFloor(daemon.state_dir)
        for _ in range(args.warmup):
            health(client)
        print(
            "| pending at start | request | p50 ms | p99 ms | per s (back to back) | "
            "daemon CPU ms/request | vs health |"
        )
        print("|---|---|---|---|---|---|---|")
        for depth in sorted(int(d) for d in args.depths.split(",")):
            lines = one_depth(daemon, client, floor, depth, args.n)
            check_holding(client, holder)
            print("\n".join(lines), flush=True)
        floor.close()
        client.stop(holder)
    print(load())


if __name__ == "__main__":
    main()
