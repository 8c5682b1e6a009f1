"""The API server against real clients on a real unix socket.

A toy router (defined here) runs under `serve()` on an event loop in a thread; clients are
httpx over the socket, raw sockets for what no polite client sends, curl, and a process
running as `nobody` for SO_PEERCRED.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import anyio
import httpx
import pytest
from anyio.abc import TaskGroup, TaskStatus
from anyio.from_thread import BlockingPortal, start_blocking_portal
from pydantic import BaseModel, ConfigDict, Field

from tests.support.waiting import wait_for
from trainq.core.errors import Conflict, NotFound
from trainq.core.spec import JobSpec
from trainqd.api.listener import bind_unix_socket
from trainqd.api.routing import QueryParam, Request, Response, Route, Router, StreamResponse
from trainqd.api.server import ServerLimits, serve
from trainqd.departure import ClientLeft, unless_client_leaves

INTERNAL = {"error": {"code": "internal", "message": "internal error; see the trainqd log"}}


class Item(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    count: int = Field(ge=0)


class StreamProbe:
    """A producer the test drives: it yields one line, then waits for a permit before the
    next, and records when it is closed."""

    def __init__(self) -> None:
        self.permits = anyio.Semaphore(0)
        self.opened = threading.Event()
        self.closed = threading.Event()
        self.yielded = 0
        self.held: AsyncIterator[bytes] | None = None

    async def lines(self, count: int) -> AsyncIterator[bytes]:
        self.opened.set()
        try:
            for tick in range(count):
                yield json.dumps({"tick": tick}).encode() + b"\n"
                self.yielded += 1
                await self.permits.acquire()
        finally:
            self.closed.set()

    def flood(self) -> AsyncIterator[bytes]:
        # Held here as a subscriber list would hold it, so garbage collection cannot close
        # it for the server: only the server's own aclose() runs its finally block.
        self.held = self._flood()
        return self.held

    async def _flood(self) -> AsyncIterator[bytes]:
        """As fast as the client takes it, so it is mostly parked at `yield`, not `await`."""
        self.opened.set()
        try:
            while True:
                yield b"x" * 65536
                self.yielded += 1
        finally:
            self.closed.set()


@dataclass
class Departing:
    started: threading.Event = field(default_factory=threading.Event)
    work_ended: threading.Event = field(default_factory=threading.Event)
    beside: list[str] = field(default_factory=list)  # what became of the task it started


@dataclass
class Toy:
    probes: dict[str, StreamProbe] = field(default_factory=dict)
    background: TaskGroup | None = None  # the server's lifetime, as the scheduler's group
    departing: Departing = field(default_factory=Departing)

    async def echo(self, request: Request) -> Response:
        return Response(
            body={
                "id": request.params["id"],
                "uid": request.caller.uid,
                "gid": request.caller.gid,
                "pid": request.caller.pid,
                "verbose": request.query_bool("verbose"),
                "limit": request.query_int("limit", 10, 1, 100),
            }
        )

    async def create_item(self, request: Request) -> Response:
        return Response(201, request.model(Item))

    async def submit(self, request: Request) -> Response:
        spec = request.model(JobSpec)
        return Response(201, {"runtime": spec.runtime, "gpus": spec.gpus})

    async def any_json(self, request: Request) -> Response:
        return Response(body={"got": request.json()})

    async def crash(self, request: Request) -> Response:
        raise RuntimeError("the handler's own bug")

    async def conflict(self, request: Request) -> Response:
        raise Conflict("job 7 is COMPLETED; only PENDING or RUNNING jobs can be stopped")

    async def grouped(self, request: Request) -> Response:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._missing)
        return Response()

    async def _missing(self) -> None:
        raise NotFound("no job 42")

    async def not_a_response(self, request: Request) -> Any:
        return {"oops": True}

    async def unserializable(self, request: Request) -> Response:
        return Response(body={"handle": object()})

    async def slow(self, request: Request) -> Response:
        await anyio.sleep((request.query_int("ms", 0) or 0) / 1000)  # a handler at work
        return Response(body={"slept": True})

    async def nothing(self, request: Request) -> Response:
        return Response(204)

    async def wait_on_client(self, request: Request) -> Response:
        """Work that waits until its client leaves, beside a task it started (as a stop
        starts its scancel) that waits for the request's work to end."""
        seen = self.departing
        ended = anyio.Event()
        assert self.background is not None
        self.background.start_soon(self._beside, ended)
        seen.started.set()
        try:
            await unless_client_leaves(anyio.sleep_forever)
        finally:
            seen.work_ended.set()
            ended.set()
        return Response(204)

    async def _beside(self, ended: anyio.Event) -> None:
        try:
            await unless_client_leaves(ended.wait)
        except ClientLeft:
            self.departing.beside.append("cancelled")
        else:
            self.departing.beside.append("done")

    async def stream(self, request: Request) -> StreamResponse:
        probe = self.probes[request.params["name"]]
        if request.query_bool("flood"):
            return StreamResponse("application/octet-stream", probe.flood())
        count = request.query_int("n", 3) or 0
        return StreamResponse("application/x-ndjson", probe.lines(count))

    def router(self) -> Router:
        verbose = QueryParam("verbose", "boolean")
        stream_query = [QueryParam("n", "integer"), QueryParam("flood", "boolean")]
        limit = QueryParam("limit", "integer", minimum=1, maximum=100)
        return Router(
            [
                Route("GET", "/v1/echo/{id}", self.echo, "echo", query=[verbose, limit]),
                Route("POST", "/v1/items", self.create_item, "create", request_model=Item),
                Route("POST", "/v1/jobs", self.submit, "submit", request_model=JobSpec),
                Route("POST", "/v1/json", self.any_json, "any JSON"),
                Route("GET", "/v1/crash", self.crash, "crash"),
                Route("POST", "/v1/conflict", self.conflict, "conflict"),
                Route("GET", "/v1/grouped", self.grouped, "grouped"),
                Route("GET", "/v1/not-a-response", self.not_a_response, "bad"),
                Route("GET", "/v1/unserializable", self.unserializable, "bad"),
                Route("DELETE", "/v1/nothing", self.nothing, "no content"),
                Route("GET", "/v1/wait-on-client", self.wait_on_client, "departure"),
                Route("GET", "/v1/slow", self.slow, "slow", query=[QueryParam("ms", "integer")]),
                Route("GET", "/v1/streams/{name}", self.stream, "stream", query=stream_query),
            ]
        )


@dataclass
class Harness:
    path: str
    toy: Toy
    portal: BlockingPortal
    future: Future[None]
    stopped: threading.Event
    errors: list[tuple[str, BaseException]] = field(default_factory=list)

    def stop(self) -> float:
        """Cancel serve(), as the daemon's root task group would on SIGTERM; seconds taken."""
        started = time.monotonic()
        self.future.cancel()
        assert self.stopped.wait(5), "serve() did not stop within 5 s of cancellation"
        return time.monotonic() - started

    def client(self) -> httpx.Client:
        return httpx.Client(
            transport=httpx.HTTPTransport(uds=self.path), base_url="http://trainq", timeout=10
        )

    def raw(self) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(10)
        try:
            sock.connect(self.path)
        except OSError:
            sock.close()
            raise
        return sock

    def probe(self, name: str) -> StreamProbe:
        probe: StreamProbe = self.portal.call(StreamProbe)  # its semaphore lives on the loop
        self.toy.probes[name] = probe
        return probe

    def release(self, probe: StreamProbe) -> None:
        self.portal.call(probe.permits.release)


@contextlib.contextmanager
def running_server(limits: ServerLimits | None = None) -> Iterator[Harness]:
    directory = tempfile.mkdtemp(prefix="tqh", dir="/tmp")
    os.chmod(directory, 0o755)  # noqa: S103 (so `nobody` can reach the socket)
    path = Path(directory) / "api.sock"
    sock = bind_unix_socket(path, mode=0o666, group=None)
    toy = Toy()
    stopped = threading.Event()
    errors: list[tuple[str, BaseException]] = []
    loop_errors: list[dict[str, Any]] = []

    def on_error(request: Request | None, exc: BaseException) -> None:
        errors.append((request.path if request else "-", exc))

    async def run(*, task_status: TaskStatus[None]) -> None:
        # Anything the event loop itself complains about (a callback that raised, a task
        # that died unobserved) fails the test that caused it.
        asyncio.get_running_loop().set_exception_handler(lambda _, ctx: loop_errors.append(ctx))
        try:
            async with anyio.create_task_group() as background:
                toy.background = background
                await serve(
                    sock,
                    toy.router(),
                    task_status=task_status,
                    limits=limits or ServerLimits(),
                    on_error=on_error,
                )
        finally:
            stopped.set()

    try:
        with start_blocking_portal() as portal:
            future, _ = portal.start_task(run)
            harness = Harness(str(path), toy, portal, future, stopped, errors)
            try:
                yield harness
            finally:
                if not stopped.is_set():
                    harness.stop()
    finally:
        shutil.rmtree(directory)
    assert loop_errors == []


@pytest.fixture
def server() -> Iterator[Harness]:
    with running_server() as harness:
        yield harness


# -- raw HTTP helpers -----------------------------------------------------------------------


def read_response(stream: BinaryIO) -> tuple[int, dict[str, str], bytes]:
    """One response off a buffered socket file (so pipelined responses stay intact)."""
    status_line = stream.readline()
    assert status_line.startswith(b"HTTP/1."), status_line
    status = int(status_line.split()[1])
    headers: dict[str, str] = {}
    while (line := stream.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    if status == 100:
        return status, headers, b""
    if headers.get("transfer-encoding") == "chunked":
        body = b""
        while size := int(stream.readline().strip(), 16):
            body += stream.read(size)
            stream.readline()
        stream.readline()
        return status, headers, body
    return status, headers, stream.read(int(headers.get("content-length", "0")))


def ask(sock: socket.socket, data: bytes) -> tuple[int, dict[str, str], bytes]:
    sock.sendall(data)
    with sock.makefile("rb") as stream:
        return read_response(stream)


def read_to_eof(sock: socket.socket) -> bytes:
    data = b""
    # A peer that closed with our bytes unread ends in ECONNRESET after what it sent.
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(65536):
            data += chunk
    return data


def get(path: str, extra: str = "") -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: trainq\r\n{extra}\r\n".encode()


def error_of(body: bytes) -> dict[str, str]:
    parsed = json.loads(body)
    assert set(parsed) == {"error"}
    error: dict[str, str] = parsed["error"]
    return error


# -- JSON in and out ------------------------------------------------------------------------


def test_json_in_and_out_with_caller_and_parameters(server: Harness) -> None:
    with server.client() as client:
        r = client.get("/v1/echo/job-7", params={"verbose": "yes", "limit": "5"})
        assert r.status_code == 200
        assert r.headers["content-type"] == "application/json"
        assert r.headers["server"].startswith("trainqd/")
        assert r.json() == {
            "id": "job-7",
            "uid": os.getuid(),
            "gid": os.getgid(),
            "pid": os.getpid(),
            "verbose": True,
            "limit": 5,
        }
        r = client.post("/v1/items", json={"name": "a", "count": 2})
        assert (r.status_code, r.json()) == (201, {"name": "a", "count": 2})
        r = client.post("/v1/json", json=[1, {"x": None}])
        assert r.json() == {"got": [1, {"x": None}]}


def test_percent_encoded_path_is_decoded(server: Harness) -> None:
    with server.client() as client:
        assert client.get("/v1/echo/a%20b").json()["id"] == "a b"


def test_no_content(server: Harness) -> None:
    with server.client() as client:
        r = client.delete("/v1/nothing")
        assert (r.status_code, r.content) == (204, b"")
        assert "content-length" not in r.headers


def test_keep_alive_serves_many_requests_on_one_connection(server: Harness) -> None:
    with server.client() as client:
        streams = set()
        for n in range(200):
            r = client.get(f"/v1/echo/{n}")
            assert r.json()["id"] == str(n)
            streams.add(id(r.extensions["network_stream"]))
        assert len(streams) == 1


def test_pipelined_requests_are_answered_in_order(server: Harness) -> None:
    with server.raw() as sock, sock.makefile("rb") as stream:
        sock.sendall(get("/v1/echo/1") + get("/v1/echo/2") + get("/v1/echo/3"))
        ids = [json.loads(read_response(stream)[2])["id"] for _ in range(3)]
        assert ids == ["1", "2", "3"]


def test_http10_client_gets_its_answer_and_a_close(server: Harness) -> None:
    with server.raw() as sock:
        sock.sendall(b"GET /v1/echo/9 HTTP/1.0\r\n\r\n")
        head, _, body = read_to_eof(sock).partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 ")
        assert json.loads(body)["id"] == "9"


def test_curl_over_the_unix_socket(server: Harness) -> None:
    out = subprocess.run(
        ["curl", "-sS", "-i", "--unix-socket", server.path, "http://trainq/v1/echo/5?limit=7"],
        capture_output=True,
        timeout=10,
        check=True,
    ).stdout
    head, _, body = out.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK")
    assert b"content-type: application/json" in head.lower()
    assert json.loads(body)["limit"] == 7


# -- caller mistakes: 4xx with one line -----------------------------------------------------


def test_unknown_path_is_404_and_wrong_method_405_with_allow(server: Harness) -> None:
    with server.client() as client:
        r = client.get("/v1/jobz")
        assert r.status_code == 404
        assert error_of(r.content) == {"code": "not_found", "message": "no such path: /v1/jobz"}
        r = client.get("/v1/items")
        assert r.status_code == 405
        assert r.headers["allow"] == "POST"
        assert error_of(r.content) == {
            "code": "method_not_allowed",
            "message": "GET /v1/items: use POST",
        }


@pytest.mark.parametrize(
    ("path", "body", "headers", "code", "message"),
    [
        ("/v1/items", b'{"name": "a", "count": ', {}, "invalid_request", "not valid JSON"),
        (
            "/v1/json",
            b"{'single': 1}",
            {},
            "invalid_request",
            "JSON: key must be a string",
        ),
        ("/v1/items", b"", {}, "invalid_request", "request body is empty"),
        ("/v1/json", b"[" * 100_000 + b"]" * 100_000, {}, "invalid_request", "recursion limit"),
        ("/v1/items", b'{"name": 5, "count": 1}', {}, "invalid_request", "request body: name:"),
        ("/v1/items", b'{"name": "a", "count": -1}', {}, "invalid_request", "count: Input"),
        ("/v1/items", b'{"name": "a", "count": 1, "x": 0}', {}, "invalid_request", "x: unknown"),
        ("/v1/jobs", b'{"gpus": "two"}', {}, "invalid_spec", "spec: gpus:"),
        ("/v1/jobs", b"[]", {}, "invalid_spec", "spec: "),
        (
            "/v1/items",
            b'{"name": "a", "count": 1}',
            {"content-type": "text/plain"},
            "invalid_request",
            "Content-Type: application/json, not 'text/plain'",
        ),
    ],
)
def test_bad_bodies_are_400_with_one_line(  # noqa: PLR0917 (a parameter per table column)
    server: Harness, path: str, body: bytes, headers: dict[str, str], code: str, message: str
) -> None:
    with server.client() as client:
        r = client.post(path, content=body, headers=headers)
        assert r.status_code == 400
        error = error_of(r.content)
        assert error["code"] == code
        assert message in error["message"]
        assert "\n" not in error["message"]


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("limit=ten", "query parameter 'limit' must be an integer"),
        ("limit=1000", "query parameter 'limit' must be between 1 and 100"),
        ("verbose=maybe", "query parameter 'verbose' must be true or false"),
        (
            "folow=1",
            "unknown query parameter 'folow' for GET /v1/echo/{id}; it takes verbose, limit",
        ),
    ],
)
def test_bad_query_parameters_are_400(server: Harness, query: str, message: str) -> None:
    with server.client() as client:
        r = client.get(f"/v1/echo/1?{query}")
        assert r.status_code == 400
        assert error_of(r.content) == {"code": "invalid_request", "message": message}


def test_trainq_errors_keep_their_status_even_inside_a_task_group(server: Harness) -> None:
    with server.client() as client:
        r = client.post("/v1/conflict")
        assert r.status_code == 409
        assert error_of(r.content)["code"] == "conflict"
        r = client.get("/v1/grouped")
        assert r.status_code == 404
        assert error_of(r.content) == {"code": "not_found", "message": "no job 42"}
    assert server.errors == []


def test_body_over_the_limit_is_413_and_others_are_still_served(server: Harness) -> None:
    with server.client() as client:
        r = client.post("/v1/json", content=b"[" + b"0," * (1 << 19) + b"0]")
        assert r.status_code == 413
        assert error_of(r.content)["code"] == "payload_too_large"
    with server.raw() as sock:  # the same without a Content-Length to check up front
        sock.sendall(b"POST /v1/json HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n")
        chunk = b"x" * 65536
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            for _ in range(20):
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        assert read_to_eof(sock).startswith(b"HTTP/1.1 413 ")
    with server.client() as client:
        assert client.get("/v1/echo/1").status_code == 200


def test_expect_100_continue(server: Harness) -> None:
    body = b'{"name": "a", "count": 3}'
    with server.raw() as sock, sock.makefile("rb") as stream:
        sock.sendall(
            b"POST /v1/items HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
            b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body)
        )
        assert read_response(stream)[0] == 100
        sock.sendall(body)
        assert read_response(stream)[0] == 201


def test_garbage_is_400_and_the_connection_is_closed(server: Harness) -> None:
    with server.raw() as sock:
        sock.sendall(b"\x16\x03\x01\x02\x00 not http at all\r\n\r\n")
        head, _, body = read_to_eof(sock).partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 400 ")
        assert b"connection: close" in head.lower()
        error = error_of(body)
        assert error["code"] == "invalid_request"
        assert error["message"].startswith("malformed HTTP request")
    assert server.errors == []


def test_a_huge_header_block_is_431(server: Harness) -> None:
    with server.raw() as sock:
        sock.sendall(get("/v1/echo/1", "X-Big: " + "a" * 20000 + "\r\n"))
        reply = read_to_eof(sock)
        assert reply.startswith(b"HTTP/1.1 431 ")
        assert b"larger than 16384 bytes" in reply


# -- timeouts -------------------------------------------------------------------------------

SHORT = ServerLimits(request_timeout=0.3, keepalive_timeout=0.5)


@pytest.mark.parametrize(
    "partial_request",
    [
        b"GET /v1/echo/1 HTTP/1.1\r\nHo",  # stalls inside the header block
        b"POST /v1/json HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\n[1,",  # inside the body
    ],
)
def test_a_stalled_request_is_cut_off_with_408(partial_request: bytes) -> None:
    with running_server(SHORT) as server, server.raw() as sock:
        started = time.monotonic()
        sock.sendall(partial_request)
        reply = read_to_eof(sock)
        elapsed = time.monotonic() - started
        assert reply.startswith(b"HTTP/1.1 408 ")
        assert b"not received completely within 0.3 s" in reply
        assert 0.25 <= elapsed < 3
        with server.client() as client:  # and nobody else noticed
            assert client.get("/v1/echo/2").status_code == 200


def test_a_slow_handler_is_not_subject_to_the_request_timeout() -> None:
    with running_server(SHORT) as server, server.client() as client:
        started = time.monotonic()
        assert client.get("/v1/slow?ms=800").json() == {"slept": True}
        assert time.monotonic() - started >= 0.8


def test_a_silent_client_is_disconnected_without_a_word() -> None:
    with running_server(SHORT) as server, server.raw() as sock:
        started = time.monotonic()
        assert read_to_eof(sock) == b""
        assert 0.25 <= time.monotonic() - started < 3


def test_an_idle_keep_alive_connection_is_closed() -> None:
    with running_server(SHORT) as server, server.raw() as sock:
        assert ask(sock, get("/v1/echo/1"))[0] == 200
        started = time.monotonic()
        assert read_to_eof(sock) == b""
        assert 0.45 <= time.monotonic() - started < 3


# -- handler failures -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("/v1/crash", RuntimeError),
        ("/v1/not-a-response", TypeError),
        ("/v1/unserializable", Exception),
    ],
)
def test_a_handler_failure_is_a_logged_500_and_serving_goes_on(
    server: Harness, path: str, kind: type[BaseException]
) -> None:
    with server.client() as client:
        r = client.get(path)
        assert r.status_code == 500
        assert r.json() == INTERNAL
        assert client.get("/v1/echo/1").status_code == 200  # same connection, still fine
    assert len(server.errors) == 1
    assert server.errors[0][0] == path
    assert isinstance(server.errors[0][1], kind)


# -- who is calling -------------------------------------------------------------------------

PEER_CLIENT = """
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(b"GET /v1/echo/1 HTTP/1.1\\r\\nHost: t\\r\\nConnection: close\\r\\n\\r\\n")
data = b""
while chunk := s.recv(65536):
    data += chunk
sys.stdout.write(data.decode())
"""


def test_peer_credentials_of_a_process_running_as_nobody(server: Harness) -> None:
    proc = subprocess.Popen(
        ["/usr/bin/python3", "-S", "-I", "-c", PEER_CLIENT, server.path],
        stdout=subprocess.PIPE,
        user=65534,
        group=65534,
        extra_groups=[],
    )
    out, _ = proc.communicate(timeout=10)
    assert proc.returncode == 0
    body = json.loads(out.partition(b"\r\n\r\n")[2])
    assert (body["uid"], body["gid"], body["pid"]) == (65534, 65534, proc.pid)


# -- streaming ------------------------------------------------------------------------------


def test_stream_chunks_arrive_as_they_are_produced(server: Harness) -> None:
    probe = server.probe("a")
    with server.client() as client, client.stream("GET", "/v1/streams/a?n=3") as r:
        assert r.status_code == 200
        assert r.headers["content-type"] == "application/x-ndjson"
        assert r.headers["transfer-encoding"] == "chunked"
        lines = r.iter_lines()
        # Each line arrives while the producer is parked waiting for the next permit.
        assert json.loads(next(lines)) == {"tick": 0}
        server.release(probe)
        assert json.loads(next(lines)) == {"tick": 1}
        server.release(probe)
        assert json.loads(next(lines)) == {"tick": 2}
        server.release(probe)
        assert list(lines) == []
    assert probe.closed.wait(5)


def test_a_departing_client_stops_the_producer(server: Harness) -> None:
    probe = server.probe("b")
    with server.client() as client:
        with client.stream("GET", "/v1/streams/b?n=1000") as r:
            assert json.loads(next(r.iter_lines())) == {"tick": 0}
        # The client is gone; the producer, parked on a permit that never comes, must stop.
        wait_for(probe.closed.is_set, timeout=5, what="the producer's finally block")
        assert probe.yielded == 1
        assert client.get("/v1/echo/1").status_code == 200


def test_a_departing_raw_client_stops_the_producer_between_chunks(server: Harness) -> None:
    probe = server.probe("c")
    with server.raw() as sock:
        sock.sendall(get("/v1/streams/c?n=1000"))
        wait_for(probe.opened.is_set, timeout=5)
    wait_for(probe.closed.is_set, timeout=5, what="the producer's finally block")
    assert server.errors == []


def test_a_client_leaving_a_fast_stream_closes_the_producer(server: Harness) -> None:
    probe = server.probe("f")
    with server.client() as client:
        with client.stream("GET", "/v1/streams/f?flood=1") as r:
            assert next(r.iter_raw()).startswith(b"x")
        wait_for(probe.closed.is_set, timeout=5, what="the producer's finally block")
        assert client.get("/v1/echo/1").status_code == 200
    assert server.errors == []


def test_a_half_closed_client_still_gets_the_whole_stream(server: Harness) -> None:
    probe = server.probe("d")
    with server.raw() as sock:
        sock.sendall(get("/v1/streams/d?n=2"))
        sock.shutdown(socket.SHUT_WR)  # done talking, still listening
        wait_for(lambda: probe.yielded == 1, timeout=5)
        server.release(probe)
        wait_for(lambda: probe.yielded == 2, timeout=5)
        server.release(probe)
        reply = read_to_eof(sock)
    assert reply.endswith(b"0\r\n\r\n")
    assert b'{"tick": 0}\n' in reply
    assert b'{"tick": 1}\n' in reply


# -- fair shares ----------------------------------------------------------------------------

SHARES = ServerLimits(max_connections=8, max_connections_per_user=3, max_streams_per_user=1)


def assert_busy(reply: bytes) -> None:
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503 "), reply
    assert b"connection: close" in head.lower()
    assert error_of(body)["code"] == "busy"


def test_a_connection_over_the_users_share_is_told_busy_at_once() -> None:
    with running_server(SHARES) as server:
        held = [server.raw() for _ in range(3)]  # connected, never saying a word
        try:
            with server.raw() as fourth:
                started = time.monotonic()
                assert_busy(read_to_eof(fourth))  # without sending anything: no waiting on it
                assert time.monotonic() - started < 1
            held.pop().close()
            # A share given back is taken again (the server notices the close at once).
            wait_for(lambda: not read_busy(server), timeout=5, what="the freed connection")
        finally:
            for sock in held:
                sock.close()


def read_busy(server: Harness) -> bool:
    with server.raw() as sock:
        # A server still over the share answers 503 and closes at once, maybe before the
        # request is written: the answer is still there to read, as trainq's client reads it.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(get("/v1/echo/1", "Connection: close\r\n"))
        return read_to_eof(sock).startswith(b"HTTP/1.1 503 ")


def test_root_has_a_reserve_beyond_the_global_cap() -> None:
    # The test runs as root, whose connections may go one user's share past the global cap.
    limits = ServerLimits(max_connections=2, max_connections_per_user=3)
    with running_server(limits) as server:
        held = [server.raw() for _ in range(3)]
        try:
            for sock in held:
                assert ask(sock, get("/v1/echo/1"))[0] == 200
        finally:
            for sock in held:
                sock.close()


def test_a_stream_over_the_users_share_is_busy_and_the_first_one_goes_on() -> None:
    with running_server(SHARES) as server:
        probe = server.probe("one")
        server.probe("two")
        with server.raw() as first, server.raw() as second:
            first.sendall(get("/v1/streams/one?n=1000"))
            wait_for(probe.opened.is_set, timeout=5)
            second.sendall(get("/v1/streams/two?n=3"))
            reply = read_to_eof(second)
            assert_busy(reply)
            assert b"streams" in reply
            assert not server.toy.probes["two"].opened.is_set()
            server.release(probe)
        wait_for(probe.closed.is_set, timeout=5, what="the first stream to end")
        # Its share is back once the first stream has ended.
        third = server.probe("three")
        with server.client() as client, client.stream("GET", "/v1/streams/three?n=1") as r:
            assert r.status_code == 200
            assert json.loads(next(r.iter_lines())) == {"tick": 0}
            server.release(third)


def test_head_is_answered_like_get_without_a_body(server: Harness) -> None:
    with server.raw() as sock:
        sock.sendall(b"HEAD /v1/echo/7 HTTP/1.1\r\nHost: t\r\n\r\n" + get("/v1/echo/8"))
        with sock.makefile("rb") as stream:
            status, headers, _ = read_response_to_head(stream)
            assert status == 200
            assert int(headers["content-length"]) > 0  # what GET would send, not sent
            status, _, body = read_response(stream)  # the next answer follows at once
            assert status == 200
            assert json.loads(body)["id"] == "8"
    with server.raw() as sock:
        sock.sendall(b"HEAD /v1/nowhere HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        reply = read_to_eof(sock)
        assert reply.startswith(b"HTTP/1.1 404 ")
        assert reply.endswith(b"\r\n\r\n")
    probe = server.probe("h")
    with server.raw() as sock:
        sock.sendall(b"HEAD /v1/streams/h HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        reply = read_to_eof(sock)
        assert reply.startswith(b"HTTP/1.1 200 ")
        assert reply.endswith(b"\r\n\r\n")
    assert not probe.opened.is_set()
    assert server.errors == []


def read_response_to_head(stream: BinaryIO) -> tuple[int, dict[str, str], bytes]:
    """A HEAD's answer: the status line and headers, never a body."""
    status_line = stream.readline()
    headers: dict[str, str] = {}
    while (line := stream.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(status_line.split()[1]), headers, b""


# -- load and shutdown ----------------------------------------------------------------------


def test_many_concurrent_connections() -> None:
    with running_server(ServerLimits(max_connections_per_user=200)) as server:
        many_concurrent_connections(server)


def many_concurrent_connections(server: Harness) -> None:
    socks = [server.raw() for _ in range(100)]
    try:
        for n, sock in enumerate(socks):
            sock.sendall(get(f"/v1/echo/{n}"))
        for n, sock in enumerate(socks):
            with sock.makefile("rb") as stream:
                assert json.loads(read_response(stream)[2])["id"] == str(n)
    finally:
        for sock in socks:
            sock.close()

    def client_session(worker: int) -> int:
        with server.client() as client:
            for n in range(25):
                assert client.get(f"/v1/echo/{worker}-{n}").json()["id"] == f"{worker}-{n}"
        return worker

    with ThreadPoolExecutor(8) as pool:
        assert sorted(pool.map(client_session, range(8))) == list(range(8))


def test_cancelling_serve_closes_everything_promptly() -> None:
    with running_server() as server:
        probes = [server.probe(f"s{n}") for n in range(3)]
        socks = [server.raw() for _ in range(5)]
        try:
            for n, sock in enumerate(socks[:3]):
                sock.sendall(get(f"/v1/streams/s{n}?n=1000"))
            assert ask(socks[3], get("/v1/echo/1"))[0] == 200  # one idle on keep-alive
            # socks[4] connected and silent
            for probe in probes:
                wait_for(probe.opened.is_set, timeout=5)
            elapsed = server.stop()
            for probe in probes:
                assert probe.closed.is_set()
            for sock in socks:
                read_to_eof(sock)  # every connection ends: EOF, not the 10 s socket timeout
            with pytest.raises(ConnectionRefusedError):
                server.raw()
        finally:
            for sock in socks:
                sock.close()
    # Not a speed: a shutdown that waited for the idle connections would take their 10 s.
    assert elapsed < 5.0, f"shutdown took {elapsed:.3f} s"


def test_a_request_whose_client_left_is_cancelled_and_nothing_else(server: Harness) -> None:
    """The handler's work stops when its client hangs up; a task it started, which outlives
    the request, is not the request's and goes on."""
    seen = server.toy.departing
    with server.raw() as sock:
        sock.sendall(b"GET /v1/wait-on-client HTTP/1.1\r\nHost: t\r\n\r\n")
        assert seen.started.wait(10)
    wait_for(seen.work_ended.is_set, timeout=10, what="the request's work to be cancelled")
    wait_for(lambda: seen.beside, timeout=10, what="the task it started to end")
    assert seen.beside == ["done"]
    assert server.errors == []
    with server.client() as client:  # and the server goes on
        assert client.delete("/v1/nothing").status_code == 204


def test_a_half_closed_client_still_gets_its_answer(server: Harness) -> None:
    """A client that shut down its writing end only is still there to read: its request's
    work goes on to the answer."""
    with server.raw() as sock:
        sock.sendall(b"GET /v1/slow?ms=300 HTTP/1.1\r\nHost: t\r\n\r\n")
        sock.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200"), answer
    assert b'"slept":true' in answer.replace(b" ", b"")
