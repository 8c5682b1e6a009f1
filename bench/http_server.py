"""The API server framework alone: what one request costs on one keep-alive connection.

    .venv/bin/python bench/http_server.py

A toy router (a trivial GET, and a POST that validates a JobSpec) served by
trainqd.api.server in its own process; no store, no scheduler (bench/api.py measures the real
daemon). Two clients: a raw socket with prebuilt requests, which shows the server's own cost,
and httpx, which shows what a typical Python client adds.
"""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import anyio
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support.waiting import wait_for

from trainq.core.spec import JobSpec
from trainqd.api.listener import bind_unix_socket
from trainqd.api.routing import Request, Response, Route, Router
from trainqd.api.server import serve

ROOT = Path(__file__).resolve().parents[1]
SPEC = (
    b'{"name": "resnet-a", "gpus": 2, "priority": 10, "command": ["python3", "train.py"], '
    b'"hyperparameters": {"lr": 0.1, "epochs": 90}, '
    b'"channels": {"train": {"source": "/data/train", "mode": "Pipe"}}}'
)


async def health(request: Request) -> Response:
    return Response(body={"status": "ok"})


async def submit(request: Request) -> Response:
    spec = request.model(JobSpec)
    return Response(201, {"id": 1, "name": spec.name, "state": "PENDING"})


def main(path: str) -> None:
    sock = bind_unix_socket(Path(path), mode=0o600, group=None)
    router = Router(
        [
            Route("GET", "/v1/health", health, "health"),
            Route("POST", "/v1/jobs", submit, "submit", request_model=JobSpec),
        ]
    )
    anyio.run(serve, sock, router)


def receive_more(sock: socket.socket, buffer: bytearray) -> None:
    data = sock.recv(65536)
    if not data:
        raise ConnectionError("the server closed the connection mid-response")
    buffer += data


def read_one(sock: socket.socket, buffer: bytearray) -> int:
    """Read one Content-Length response off `sock`; return its status."""
    while (end := buffer.find(b"\r\n\r\n")) < 0:
        receive_more(sock, buffer)
    head = bytes(buffer[:end]).lower()
    start = head.index(b"content-length:") + 15
    length = int(head[start : head.index(b"\r\n", start)])
    while len(buffer) < end + 4 + length:
        receive_more(sock, buffer)
    del buffer[: end + 4 + length]
    return int(head[9:12])


def time_raw(path: str, request: bytes, count: int, expect: int) -> list[float]:
    latencies = []
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(path)
        buffer = bytearray()
        for _ in range(count):
            started = time.perf_counter()
            sock.sendall(request)
            assert read_one(sock, buffer) == expect
            latencies.append(time.perf_counter() - started)
    return latencies


def time_httpx(path: str, count: int) -> list[float]:
    latencies = []
    transport = httpx.HTTPTransport(uds=path)
    with httpx.Client(transport=transport, base_url="http://trainq") as client:
        for _ in range(count):
            started = time.perf_counter()
            r = client.post("/v1/jobs", content=SPEC, headers={"content-type": "application/json"})
            assert r.status_code == 201
            latencies.append(time.perf_counter() - started)
    return latencies


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time the process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def report(what: str, server_pid: int, run: Callable[[], list[float]]) -> None:
    cpu_before, client_before = cpu_seconds(server_pid), time.process_time()
    latencies = run()
    server_cpu = (cpu_seconds(server_pid) - cpu_before) / len(latencies) * 1e6
    client_cpu = (time.process_time() - client_before) / len(latencies) * 1e6
    latencies = latencies[len(latencies) // 10 :]  # the first tenth warms up
    p50 = statistics.median(latencies) * 1e6
    p99 = statistics.quantiles(latencies, n=100)[98] * 1e6
    rate = len(latencies) / sum(latencies)
    print(
        f"{what:<34} p50 {p50:5.0f} us  p99 {p99:5.0f} us  {rate:5.0f} req/s  "
        f"CPU per request: server {server_cpu:3.0f} us, client {client_cpu:3.0f} us"
    )


def run() -> None:
    with tempfile.TemporaryDirectory(prefix="tqp", dir="/tmp") as directory:
        path = os.path.join(directory, "api.sock")
        server = subprocess.Popen([sys.executable, __file__, path], cwd=ROOT)
        try:
            wait_for(lambda: os.path.exists(path), timeout=10, what="the server's socket")
            trivial = b"GET /v1/health HTTP/1.1\r\nHost: trainq\r\n\r\n"
            submit = (
                b"POST /v1/jobs HTTP/1.1\r\nHost: trainq\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(SPEC), SPEC)
            )
            print()
            pid = server.pid
            report("raw socket, GET trivial route", pid, lambda: time_raw(path, trivial, 5000, 200))
            report(
                "raw socket, POST spec (validated)", pid, lambda: time_raw(path, submit, 3000, 201)
            )
            report("httpx, POST spec (validated)", pid, lambda: time_httpx(path, 2000))
        finally:
            server.terminate()
            server.wait(10)


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sys.argv[1])
    else:
        run()
