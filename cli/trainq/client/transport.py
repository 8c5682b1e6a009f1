"""HTTP/1.1 over trainqd's unix socket, one connection per request: the bottom of the
client layer (`Transport.request`, `Transport.stream`); `trainq.client.api` names the
endpoints on top of it.

Why not httpx: `import httpx` alone costs ~140 ms on the lab's 2-core machines, more than the
whole budget of `trainq submit` (<= 120 ms median). h11 is the HTTP/1.1 state machine the
daemon itself serves with, so both ends frame messages the same way and no HTTP is parsed by
hand here; the socket is a plain blocking AF_UNIX one.

A request may wait `response_timeout` seconds for its answer (a wedged daemon must not hang
`trainq ls` forever); a stream (`logs -f`, events) has no time limit once it has started,
because a training run may stay quiet for hours. Connecting always has a time limit.

Errors come back as trainq's own classes (`trainq.core.errors.from_wire`), so the CLI's exit
status follows the daemon's verdict; a socket nobody answers on is `DaemonUnreachable` with a
line that says how to start the daemon.

A busy daemon (a `busy` 503: the caller holds its share of connections or streams, or the
daemon all it serves; or a listen backlog too full to connect) did nothing with the request,
so it is sent again with growing pauses for up to `busy_retry_seconds` before the error
stands.
"""

from __future__ import annotations

import contextlib
import errno
import json as jsonlib
import os
import random
import socket
import stat
import time
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import quote, urlencode

import h11

from trainq.core import __version__
from trainq.core.errors import Busy, DaemonUnreachable, Forbidden, Unavailable, from_wire
from trainq.core.paths import client_socket

CONNECT_TIMEOUT = 5.0
BUSY_RETRY_SECONDS = 3.0
_FIRST_PAUSE = 0.05
_LONGEST_PAUSE = 0.5
RESPONSE_TIMEOUT = 60.0
RECV_SIZE = 64 * 1024
UNIX_PATH_MAX = 108  # sun_path, its terminating NUL included
START_HINT = "Is it running? Start it with `trainqd` (or `systemctl start trainqd`)."

QueryValue = str | int | float | bool | None
T = TypeVar("T")


def build_target(path: str, query: Mapping[str, QueryValue] | None = None) -> str:
    """The request target: `path?k=v&...`, booleans as `true`/`false`, None values left out."""
    if not query:
        return path
    pairs = [
        (key, ("true" if value else "false") if isinstance(value, bool) else str(value))
        for key, value in query.items()
        if value is not None
    ]
    return f"{path}?{urlencode(pairs, quote_via=quote)}" if pairs else path


def iter_lines(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """Split a byte stream into lines (without their newline), however the chunks fall."""
    pending = b""
    for chunk in chunks:
        pending += chunk
        *lines, pending = pending.split(b"\n")
        yield from lines
    if pending:
        yield pending


def _decode_json(data: bytes, headers: Mapping[str, str]) -> Any:
    """The body as JSON, or None when it is empty or not JSON (a proxy's HTML, say)."""
    if not data or "json" not in headers.get("content-type", "application/json"):
        return None
    try:
        return jsonlib.loads(data)
    except ValueError:
        return None


def _group_name(gid: int) -> str:
    import grp  # noqa: PLC0415 (only on the EACCES path)

    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def connect_error(socket_path: Path, exc: OSError, timeout: float | None = None) -> Exception:
    """Turn a failed connect into one line a person can act on."""
    where = f"cannot reach trainqd at {socket_path}"
    if isinstance(exc, TimeoutError):
        return DaemonUnreachable(
            f"{where}: it did not accept the connection within {timeout or CONNECT_TIMEOUT:g} s "
            "(overloaded or hung?)"
        )
    if exc.errno in (errno.EACCES, errno.EPERM):
        try:
            st = socket_path.stat()
        except OSError:
            return Forbidden(f"{where}: permission denied (on the socket or its directory)")
        group = _group_name(st.st_gid)
        return Forbidden(
            f"{where}: permission denied (the socket is mode {st.st_mode & 0o777:04o}, "
            f"group {group}; ask an administrator to add you to group {group})"
        )
    if exc.errno == errno.ENOENT:
        return DaemonUnreachable(f"{where}: no such file. {START_HINT}")
    if exc.errno == errno.ECONNREFUSED:
        with contextlib.suppress(OSError):
            if not stat.S_ISSOCK(socket_path.stat().st_mode):
                return DaemonUnreachable(f"{where}: the path is not a socket")
        return DaemonUnreachable(
            f"{where}: connection refused (a socket left by a daemon that exited). {START_HINT}"
        )
    if exc.errno == errno.EAGAIN:  # a unix socket's backlog is full
        return Busy(f"{where}: it is too busy to accept connections; try again")
    if len(os.fsencode(socket_path)) >= UNIX_PATH_MAX:
        return DaemonUnreachable(
            f"{where}: the path is too long for a unix socket (at most {UNIX_PATH_MAX - 1} bytes)"
        )
    reason = exc.strerror or str(exc)
    if reason[1:2].islower():  # "Not a directory" -> "not a directory"; "AF_UNIX ..." stays
        reason = reason[:1].lower() + reason[1:]
    return DaemonUnreachable(f"{where}: {reason}")


class _Exchange:
    """One request and its response on a fresh connection."""

    def __init__(self, socket_path: Path, connect_timeout: float) -> None:
        self.socket_path = socket_path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.conn = h11.Connection(our_role=h11.CLIENT)
        self.eof = False
        self.answered = False
        try:
            self.sock.settimeout(connect_timeout)
            self.sock.connect(os.fspath(socket_path))
        except OSError as exc:
            self.sock.close()
            raise connect_error(socket_path, exc, connect_timeout) from None

    def close(self) -> None:
        self.sock.close()

    def send(
        self, method: str, target: str, body: bytes | None, extra: Iterable[tuple[str, str]] = ()
    ) -> None:
        headers = [
            ("Host", "trainq"),
            ("User-Agent", f"trainq/{__version__}"),
            ("Accept", "application/json"),
            ("Connection", "close"),
            *extra,
        ]
        if body is not None:
            headers += [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
        data = self.conn.send(h11.Request(method=method, target=target, headers=headers)) or b""
        if body:
            data += self.conn.send(h11.Data(data=body)) or b""
        data += self.conn.send(h11.EndOfMessage()) or b""
        # The daemon may answer (413, say) and close before reading all we sent: its answer
        # is still waiting to be read, and says more than EPIPE would.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.sock.sendall(data)

    def _closed(self) -> Unavailable:
        when = "mid-answer" if self.answered else "without answering"
        return Unavailable(
            f"trainqd at {self.socket_path} closed the connection {when} (is it restarting?)"
        )

    def next_event(self) -> Any:
        while True:
            try:
                event = self.conn.next_event()
            except h11.RemoteProtocolError as exc:
                if self.eof:  # h11's way of saying the peer hung up too early
                    raise self._closed() from None
                raise Unavailable(f"trainqd sent a malformed HTTP response: {exc}") from None
            if isinstance(event, h11.ConnectionClosed):
                raise self._closed()
            if event is not h11.NEED_DATA:
                return event
            try:
                data = self.sock.recv(RECV_SIZE)
            except TimeoutError:
                raise Unavailable(
                    f"trainqd at {self.socket_path} did not answer in time (overloaded or hung?)"
                ) from None
            except ConnectionResetError:
                data = b""
            self.eof = not data
            self.conn.receive_data(data)

    def response_head(self) -> h11.Response:
        while True:
            event = self.next_event()
            if isinstance(event, h11.Response):
                self.answered = True
                return event
            # InformationalResponse (1xx): nothing to do but wait for the real answer.

    def body_chunks(self) -> Generator[bytes, None, None]:
        while True:
            event = self.next_event()
            if isinstance(event, h11.Data):
                yield bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                return


def _headers(response: h11.Response) -> dict[str, str]:
    return {name.decode().lower(): value.decode("latin-1") for name, value in response.headers}


class ResponseStream(Iterator[bytes]):
    """The body of a streamed response, chunk by chunk as the daemon sends it.

    Close it (or use it as a context manager) to hang up early; the daemon sees the
    connection close and stops producing.
    """

    def __init__(self, exchange: _Exchange, headers: dict[str, str]) -> None:
        self._exchange = exchange
        self._chunks = exchange.body_chunks()
        self.headers = headers

    def __next__(self) -> bytes:
        try:
            return next(self._chunks)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        self._chunks.close()
        self._exchange.close()

    def __enter__(self) -> ResponseStream:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class Transport:
    """Requests to trainqd on `socket_path` (default: the socket `trainq` would use:
    $TRAINQ_SOCKET, your own daemon's, else the system's). Holds no connection between
    calls."""

    def __init__(
        self,
        socket_path: str | os.PathLike[str] | None = None,
        *,
        connect_timeout: float = CONNECT_TIMEOUT,
        response_timeout: float | None = RESPONSE_TIMEOUT,
        busy_retry_seconds: float = BUSY_RETRY_SECONDS,
    ) -> None:
        self.socket_path = client_socket(None if socket_path is None else os.fspath(socket_path))
        self.connect_timeout = connect_timeout
        self.response_timeout = response_timeout
        self.busy_retry_seconds = busy_retry_seconds

    def _retrying_busy(self, attempt: Callable[[], T]) -> T:
        """`attempt()`, again after a pause each time the daemon is busy, until
        `busy_retry_seconds` have passed; then its Busy error stands."""
        give_up_at = time.monotonic() + self.busy_retry_seconds
        pause = _FIRST_PAUSE
        while True:
            try:
                return attempt()
            except Busy:
                left = give_up_at - time.monotonic()
                if left <= 0:
                    raise
            # Jittered, so clients turned away together do not all come back together.
            time.sleep(min(left, pause * random.uniform(0.5, 1.0)))  # noqa: S311 (not crypto)
            pause = min(pause * 2, _LONGEST_PAUSE)

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        query: Mapping[str, QueryValue] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> tuple[int, Any]:
        """Send one request and return (status, parsed JSON body or None).

        Raises the error the daemon's answer stands for when the status is 400 or more.
        """
        body = None if json is None else jsonlib.dumps(json).encode()
        target, extra = build_target(path, query), list((headers or {}).items())
        return self._retrying_busy(lambda: self._request(method, target, body, extra))

    def _request(
        self,
        method: str,
        target: str,
        body: bytes | None,
        headers: Iterable[tuple[str, str]] = (),
    ) -> tuple[int, Any]:
        exchange = _Exchange(self.socket_path, self.connect_timeout)
        try:
            exchange.sock.settimeout(self.response_timeout)
            exchange.send(method, target, body, headers)
            response = exchange.response_head()
            data = b"".join(exchange.body_chunks())
        finally:
            exchange.close()
        parsed = _decode_json(data, _headers(response))
        if response.status_code >= 400:
            raise from_wire(response.status_code, parsed)
        return response.status_code, parsed

    def stream(
        self, method: str, path: str, query: Mapping[str, QueryValue] | None = None
    ) -> ResponseStream:
        """Send one request and return its body as an iterator of chunks.

        The answer's head is read before this returns, so a refused request raises here,
        not at the first chunk. No time limit applies once the answer has begun.
        """
        return self._retrying_busy(lambda: self._stream(method, build_target(path, query)))

    def _stream(self, method: str, target: str) -> ResponseStream:
        exchange = _Exchange(self.socket_path, self.connect_timeout)
        try:
            exchange.sock.settimeout(self.response_timeout)
            exchange.send(method, target, None)
            response = exchange.response_head()
            headers = _headers(response)
            error_body = b"".join(exchange.body_chunks()) if response.status_code >= 400 else None
        except BaseException:
            exchange.close()
            raise
        if error_body is not None:
            exchange.close()
            raise from_wire(response.status_code, _decode_json(error_body, headers))
        exchange.sock.settimeout(None)
        return ResponseStream(exchange, headers)
