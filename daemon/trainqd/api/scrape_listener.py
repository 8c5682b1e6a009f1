"""The optional TCP listener for Prometheus scrapers (`metrics_listen = "127.0.0.1:9835"`).

It answers `GET /metrics` (and its HEAD) with the same exposition as GET /v1/metrics and
nothing else: no job records, logs, environments or reasons are reachable over TCP, and
nothing can be changed. Each connection gets one response and is closed; a request must
arrive whole within a few seconds and the whole exchange end within CONNECTION_TIMEOUT, and
only MAX_CONNECTIONS are accepted at once (the others wait in the listen backlog), so a
scanner, a probe that connects and closes, or a flood on the network cannot tie up or end
the daemon.
"""

from __future__ import annotations

import functools
import socket
from collections.abc import Awaitable, Callable

import anyio
import h11
import structlog

from trainqd.api.accepting import serve_connections
from trainqd.api.metrics import CONTENT_TYPE
from trainqd.config import listen_address

log = structlog.get_logger("trainqd.scrape")

REQUEST_TIMEOUT = 5.0
# A connection's whole life, its answer included: a client that reads slowly is cut off too.
CONNECTION_TIMEOUT = 15.0
MAX_CONNECTIONS = 16
MAX_REQUEST_BYTES = 16384


class ScrapeAddressError(ValueError):
    """The configured address cannot be listened on; the message is one line."""


def bind_scrape_socket(text: str) -> socket.socket:
    """A listening socket on the configured address (checked by the configuration)."""
    host, port = listen_address(text)
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        sock = socket.socket(family, socket.SOCK_STREAM)
    except OSError as exc:
        raise ScrapeAddressError(f"metrics_listen {text}: {exc}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(64)
    except OSError as exc:
        sock.close()
        raise ScrapeAddressError(f"metrics_listen {text}: {exc.strerror or exc}") from None
    return sock


async def serve_scrapes(sock: socket.socket, exposition: Callable[[], Awaitable[bytes]]) -> None:
    """Serve scrapers on `sock` until cancelled: at most MAX_CONNECTIONS at once, each within
    CONNECTION_TIMEOUT, and none of them able to end the daemon (api/accepting.py)."""

    def admit(raw: socket.socket) -> Callable[[], Awaitable[None]]:
        return functools.partial(_serve_one, raw, exposition)

    await serve_connections(sock, admit, on_error=_log_failure, most=MAX_CONNECTIONS)


def _log_failure(exc: BaseException) -> None:
    log.warning("metrics listener", error=f"{type(exc).__name__}: {exc}")


async def _serve_one(raw: socket.socket, exposition: Callable[[], Awaitable[bytes]]) -> None:
    with anyio.move_on_after(CONNECTION_TIMEOUT):
        try:
            await _answer(raw, exposition)
        except OSError:  # the client reset or stopped reading: nothing to tell it
            return


async def _answer(raw: socket.socket, exposition: Callable[[], Awaitable[bytes]]) -> None:
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_REQUEST_BYTES)
    request: h11.Request | None = None
    with anyio.move_on_after(REQUEST_TIMEOUT):
        while request is None:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError:
                return
            if event is h11.NEED_DATA:
                conn.receive_data(await _receive(raw))
            elif isinstance(event, h11.Request):
                request = event
            else:  # the client closed its end before a whole request
                return
    if request is None:
        return
    path = request.target.decode("ascii", "replace").split("?", 1)[0]
    method = request.method.decode("ascii", "replace")
    if path != "/metrics":
        status, body, kind = 404, b"only /metrics is served here\n", "text/plain"
    elif method not in ("GET", "HEAD"):
        status, body, kind = 405, b"read-only: GET /metrics\n", "text/plain"
    else:
        status, body, kind = 200, await exposition(), CONTENT_TYPE
    headers = [
        ("content-type", kind),
        ("content-length", str(len(body))),
        ("connection", "close"),
    ]
    if status == 405:
        headers.append(("allow", "GET, HEAD"))
    data = conn.send(h11.Response(status_code=status, headers=headers))
    if method != "HEAD":
        data += conn.send(h11.Data(data=body))
    data += conn.send(h11.EndOfMessage())
    await _send_all(raw, data)


async def _receive(raw: socket.socket) -> bytes:
    """The next bytes the client sent; b"" at its end."""
    while True:
        try:
            return raw.recv(MAX_REQUEST_BYTES)
        except BlockingIOError:
            await anyio.wait_readable(raw)


async def _send_all(raw: socket.socket, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[raw.send(view) :]
        except BlockingIOError:
            await anyio.wait_writable(raw)
