"""A stand-in for trainqd's API in the CLI's unit tests: a real HTTP/1.1 peer (h11) on a real
unix socket, answering what each test tells it to and recording what it was sent."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import h11


@dataclass
class Reply:
    status: int = 200
    body: Any = None  # sent as JSON
    chunks: Iterable[bytes] | None = None  # sent chunked, one write each, instead of body
    content_type: str = "application/json"
    raw: bytes | None = None  # sent as it is, instead of body
    hang_up: bool = False  # close without answering


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any


Handler = Callable[[Seen], Reply]


@dataclass
class ApiStub:
    """A stand-in for trainqd's API on `socket_path`; close() it when done."""

    socket_path: str
    routes: dict[tuple[str, str], Handler] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(self.socket_path)
        self._listener.listen(16)
        self._threads: list[threading.Thread] = []
        self._closing = threading.Event()
        self._accepter = threading.Thread(target=self._accept, daemon=True)
        self._accepter.start()

    def on(self, method: str, path: str, reply: Reply | Handler) -> None:
        self.routes[(method, path)] = reply if callable(reply) else (lambda _seen: reply)

    def requests_to(self, path: str) -> list[Seen]:
        return [seen for seen in self.seen if seen.path == path]

    def close(self) -> None:
        self._closing.set()
        self._listener.shutdown(socket.SHUT_RDWR)  # wakes accept()
        self._listener.close()
        for thread in [self._accepter, *self._threads]:
            thread.join(timeout=5)

    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _read_request(self, conn: socket.socket, server: h11.Connection) -> Seen | None:
        request, body = None, b""
        while True:
            event = server.next_event()
            if event is h11.NEED_DATA:
                server.receive_data(conn.recv(65536))
            elif isinstance(event, h11.Request):
                request = event
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage) and request is not None:
                url = urlsplit(request.target.decode())
                headers = {k.decode().lower(): v.decode() for k, v in request.headers}
                parsed = json.loads(body) if body else None
                return Seen(
                    request.method.decode(), url.path, dict(parse_qsl(url.query)), headers, parsed
                )
            elif isinstance(event, h11.ConnectionClosed):
                return None

    def _serve(self, conn: socket.socket) -> None:
        server = h11.Connection(our_role=h11.SERVER)
        try:
            seen = self._read_request(conn, server)
            if seen is None:
                return
            self.seen.append(seen)
            handler = self.routes.get((seen.method, seen.path))
            not_found = Reply(
                404, {"error": {"code": "not_found", "message": f"no route {seen.path}"}}
            )
            reply = handler(seen) if handler else not_found
            if reply.hang_up:
                return
            headers = [("Content-Type", reply.content_type)]
            if reply.chunks is None:
                data = reply.raw if reply.raw is not None else json.dumps(reply.body).encode()
                headers.append(("Content-Length", str(len(data))))
                out = server.send(h11.Response(status_code=reply.status, headers=headers))
                conn.sendall(
                    out + server.send(h11.Data(data=data)) + server.send(h11.EndOfMessage())
                )
                return
            conn.sendall(server.send(h11.Response(status_code=reply.status, headers=headers)))
            for chunk in reply.chunks:
                conn.sendall(server.send(h11.Data(data=chunk)))
            conn.sendall(server.send(h11.EndOfMessage()))
        except OSError:
            pass  # the client hung up: what a stream's reader may do at any time
        finally:
            conn.close()


def events(*states: str, first_id: int = 1) -> list[bytes]:
    """The lines of /v1/events for job 5 going through `states`, ids from `first_id`."""
    return [
        json.dumps(
            {"id": first_id + i, "job_id": 5, "time": "2026-05-01T12:00:00Z", "to_state": s}
        ).encode()
        + b"\n"
        for i, s in enumerate(states)
    ]


# Job 5 as the stub shows it running.
RUNNING_JOB: dict[str, Any] = {
    "id": 5,
    "name": "resnet-a",
    "state": "RUNNING",
    "priority": 0,
    "owner": {"uid": 0, "user": "root"},
    "runtime": "subprocess",
    "gpus": [0],
    "job_dir": "/var/lib/trainq/jobs/5/ml",
    "attempts": [],
    "created_at": "2026-05-01T12:00:00Z",
    "started_at": "2026-05-01T12:00:01Z",
    "spec": {"gpus": 1, "command": ["python3", "train.py"]},
}
