"""One client connection of the API server: the h11 state machine from the first byte of a
request to the last byte of its response, keep-alive, limits and timeouts, streams that end
when their client goes away, and a request's own waits that end when its client leaves
(departure.py). Whatever one client does wrong costs it its connection and nothing else; a
handler's crash costs one 500 and a traceback in the log. A stream holds one of its user's
stream shares (quotas.py) for as long as it runs; a HEAD is answered without a body, and a
stream's HEAD without starting the stream.
"""

from __future__ import annotations

import logging
import math
import re
import socket
import struct
from collections.abc import AsyncIterator, Callable

import anyio
import anyio.lowlevel
import h11
from anyio.abc import SocketStream

from trainq.core.errors import Busy, Forbidden, InvalidRequest, PayloadTooLarge, TrainqError
from trainqd.api.limits import ServerLimits
from trainqd.api.quotas import Occupancy
from trainqd.api.responses import common_headers, encoded, json_response, reason_phrase
from trainqd.api.routing import (
    Caller,
    Request,
    Response,
    Router,
    StreamResponse,
    WrongMethod,
    split_target,
)
from trainqd.departure import ClientLeft, handling, peer_closed

_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
_RECV_SIZE = 65536
_LINGER_SECONDS = 1.0
_LINGER_BYTES = 16 << 20
_INTERNAL = TrainqError("internal error; see the trainqd log")

OnError = Callable[[Request | None, BaseException], None]


def log_error(request: Request | None, exc: BaseException) -> None:
    """The default `on_error`: the standard library logger, with the traceback."""
    where = f"{request.method} {request.path}" if request is not None else "connection"
    logging.getLogger("trainqd.api").error("%s failed", where, exc_info=exc)


def peer_caller(sock: socket.socket) -> Caller:
    pid, uid, gid = _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    return Caller(uid=uid, gid=gid, pid=pid)


def busy_reply(error: Busy) -> bytes:
    """The whole answer to a connection refused before its request is read: a 503 with
    the one-line `busy` error, after which the connection is closed."""
    conn = h11.Connection(h11.SERVER)
    head, body = json_response(
        error.http_status, error.to_wire(), [("connection", "close"), ("retry-after", "1")]
    )
    return b"".join(
        conn.send(event) or b"" for event in (head, h11.Data(data=body), h11.EndOfMessage())
    )


def report_error(on_error: OnError, request: Request | None, exc: BaseException) -> None:
    try:
        on_error(request, exc)
    except Exception:  # a broken logger must not break serving
        log_error(request, exc)


class _PeerGone(Exception):
    """The client went away or stopped reading; the connection ends quietly."""


class Connection:
    def __init__(
        self,
        stream: SocketStream,
        raw: socket.socket,
        caller: Caller,
        *,
        router: Router,
        limits: ServerLimits,
        on_error: OnError,
        occupancy: Occupancy,
    ) -> None:
        self.stream = stream
        self.raw = raw
        self.caller = caller
        self.occupancy = occupancy
        self.router = router
        self.limits = limits
        self.on_error = on_error
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=limits.max_header_block)
        # One deadline for the connection's whole life, moved as it goes from idle to reading
        # a request to handling it (none then): cheaper than a scope per read.
        self.deadline = anyio.CancelScope()
        self.reading_request = False
        self.served = 0
        self.waited = False  # for the request being read: did it wait for the socket?
        self.hung_up = False
        self.head_only = False  # the request being answered is a HEAD: no body goes back
        self.large_body = False  # holds one of the large bodies (quotas.py) for this request

    async def run(self) -> None:
        try:
            with self.deadline:
                await self._serve_requests()
            if self.deadline.cancelled_caught and self.reading_request:
                timeout = self.limits.request_timeout
                message = f"request not received completely within {timeout:g} s"
                await self._refuse(408, InvalidRequest(message))
        except _PeerGone:
            return

    async def _serve_requests(self) -> None:
        while True:
            try:
                request = await self._receive_request()
                if request is None:
                    return
                await self._respond(request)
            finally:
                if self.large_body:
                    self.large_body = False
                    self.occupancy.release_large_body(self.caller.uid)
            self.served += 1
            if self.h11.our_state is not h11.DONE or self.h11.their_state is not h11.DONE:
                return
            self.h11.start_next_cycle()

    # -- receiving -------------------------------------------------------------------------

    async def _receive_request(self) -> Request | None:
        """The next complete request, or None once the connection should end (any error
        response already sent)."""
        conn, limits = self.h11, self.limits
        self.reading_request = bool(conn.trailing_data[0])
        # The first request gets the short timeout: a client that connects and says nothing
        # has no keep-alive to protect.
        short = self.reading_request or not self.served
        wait = limits.request_timeout if short else limits.keepalive_timeout
        self.deadline.deadline = anyio.current_time() + wait
        self.waited = False
        self.head_only = False
        head: h11.Request | None = None
        body: list[bytes] = []
        size = 0
        max_body = limits.max_body
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                if conn.trailing_data[1]:  # the client hung up mid-request: nobody to tell
                    return None
                if exc.error_status_hint == 431:
                    await self._refuse(431, self._header_too_large())
                else:
                    await self._refuse(400, InvalidRequest(f"malformed HTTP request: {exc}"))
                return None
            if event is h11.NEED_DATA:
                data = await self._receive()
                if not self.reading_request:
                    self.reading_request = True
                    self.deadline.deadline = anyio.current_time() + limits.request_timeout
                conn.receive_data(data)
            elif isinstance(event, h11.Request):
                head = event
                self.head_only = event.method == b"HEAD"
                if not local_host(event):
                    await self._refuse(403, Forbidden(_NOT_LOCAL))
                    return None
                if cross_origin(event):
                    await self._refuse(403, Forbidden(_CROSS_ORIGIN))
                    return None
                # h11 bounds only an incomplete header block; one that arrived whole in a
                # single read is measured here.
                if _head_size(event) > limits.max_header_block:
                    await self._refuse(431, self._header_too_large())
                    return None
                max_body = self._body_limit(event)
                if _declared_length(event) > max_body:
                    await self._refuse(413, self._too_large(max_body))
                    return None
                if conn.they_are_waiting_for_100_continue:
                    await self._send(
                        conn.send(h11.InformationalResponse(status_code=100, headers=[]))
                    )
            elif isinstance(event, h11.Data):
                size += len(event.data)
                if size > max_body:
                    await self._refuse(413, self._too_large(max_body))
                    return None
                if size > limits.max_body and not self.large_body:
                    busy = self.occupancy.take_large_body(self.caller.uid)
                    if busy is not None:
                        await self._refuse(busy.http_status, busy)
                        return None
                    self.large_body = True
                body.append(event.data)
            elif isinstance(event, h11.EndOfMessage):
                assert head is not None
                self.reading_request = False
                self.deadline.deadline = math.inf  # handlers take the time they need
                if not self.waited:
                    # Pipelined requests come out of the buffer without awaiting anything: let
                    # other connections have a turn.
                    await anyio.lowlevel.checkpoint()
                return self._request(head, b"".join(body))
            else:  # ConnectionClosed, or PAUSED (never: a cycle ends before the next read)
                return None

    def _header_too_large(self) -> InvalidRequest:
        return InvalidRequest(
            f"request header block is larger than {self.limits.max_header_block} bytes"
        )

    def _too_large(self, max_body: int) -> PayloadTooLarge:
        return PayloadTooLarge(f"request body is larger than {max_body} bytes")

    def _body_limit(self, head: h11.Request) -> int:
        """The server's body limit, or the larger one of the route asked for (a list of
        jobs in one submission)."""
        path, _ = split_target(head.target.decode("latin-1"))
        try:
            route, _ = self.router.match(head.method.decode("ascii", "replace"), path)
        except TrainqError:  # answered once the request is read
            return self.limits.max_body
        return max(self.limits.max_body, route.max_body or 0)

    def _request(self, head: h11.Request, body: bytes) -> Request:
        path, query = split_target(head.target.decode("latin-1"))
        return Request(
            method=head.method.decode("ascii"),
            path=path,
            query=query,
            headers=[(k.decode("latin-1"), v.decode("latin-1")) for k, v in head.headers],
            body=body,
            caller=self.caller,
        )

    async def _receive(self) -> bytes:
        """The next bytes from the client; b"" at its end or on a broken connection.

        Straight from the socket, waiting with `anyio.wait_readable` only when nothing is
        there: the stream's own receive costs a trip round the event loop first, and on
        asyncio a cancellation that races the socket turning readable makes it log an
        InvalidStateError from its reader callback."""
        while True:
            try:
                return self.raw.recv(_RECV_SIZE)
            except BlockingIOError:
                pass
            except OSError:
                return b""
            self.waited = True
            await anyio.wait_readable(self.raw)

    # -- responding ------------------------------------------------------------------------

    async def _respond(self, request: Request) -> None:
        try:
            route, request.params = self.router.match(request.method, request.path)
            if request.query:
                route.check_query(request.query)
            with handling(self.raw):
                result = await route.handler(request)
            if isinstance(result, StreamResponse):
                await self._stream(request, result)
                return
            response = _checked(result)
            head, body = json_response(response.status, response.body, response.headers)
        except _PeerGone:
            raise
        except ClientLeft:  # its work was cancelled; nobody is left to answer
            raise _PeerGone from None
        except Exception as exc:
            if self.h11.our_state is not h11.SEND_RESPONSE:
                raise  # a response is already under way: no status left to change
            error = _as_trainq_error(exc)
            if error is None:
                report_error(self.on_error, request, exc)
                error = _INTERNAL
            extra = [("allow", ", ".join(error.allowed))] if isinstance(error, WrongMethod) else []
            if isinstance(error, Busy):  # over a share: this connection is given back too
                extra.append(("connection", "close"))
            head, body = json_response(error.http_status, error.to_wire(), extra)
        await self._send_whole(head, body)

    async def _send_whole(self, head: h11.Response, body: bytes) -> None:
        if self.head_only:  # the headers GET would have had (its length too), no body
            body = b""
        await self._send(self.h11.send(head) + self.h11.send(h11.Data(data=body)) + self._end())

    def _end(self) -> bytes:
        return self.h11.send(h11.EndOfMessage()) or b""

    async def _refuse(self, status: int, error: TrainqError) -> None:
        """Answer a request that cannot be served; the caller then ends the connection."""
        self.reading_request = False  # answered: the request deadline has nothing to add
        if self.h11.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            return
        head, body = json_response(status, error.to_wire(), [("connection", "close")])
        await self._send_whole(head, body)
        await self._linger()

    async def _linger(self) -> None:
        """Read and drop what the client is still sending, for a moment, before closing:
        closing on unread data makes the kernel reset the connection, and a client still
        writing its body would get the reset instead of the answer."""
        try:
            await self.stream.send_eof()
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            return
        dropped = 0
        with anyio.move_on_after(_LINGER_SECONDS):
            while dropped < _LINGER_BYTES and (data := await self._receive()):
                dropped += len(data)

    async def _send(self, data: bytes | None) -> None:
        if not data:
            return
        # The socket first: a reply nearly always fits its buffer, and the stream's send would
        # begin with a trip round the event loop. Only a full buffer waits, with a limit.
        try:
            sent = self.raw.send(data)
        except BlockingIOError:
            sent = 0
        except OSError:
            raise _PeerGone from None
        if sent == len(data):
            return
        with anyio.move_on_after(self.limits.send_timeout):
            try:
                await self.stream.send(data[sent:])
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                raise _PeerGone from None
            return
        raise _PeerGone  # the client stopped reading

    async def _stream(self, request: Request, response: StreamResponse) -> None:
        """Send a stream while holding one of the caller's streams; Busy (before anything is
        sent) when the caller holds all its share. A HEAD gets the head alone, holding none."""
        try:
            if self.head_only:
                await self._send(self.h11.send(_stream_head(response)) + self._end())
                return
            with self.occupancy.stream(self.caller.uid):
                await self._send_stream(request, response)
        finally:
            await _close_chunks(response.chunks, self.limits, request, self.on_error)

    async def _send_stream(self, request: Request, response: StreamResponse) -> None:
        chunks = response.chunks
        await self._send(self.h11.send(_stream_head(response)))
        failure: BaseException | None = None
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._watch_for_hangup, tg.cancel_scope)
            try:
                async for chunk in chunks:
                    if chunk:
                        await self._send(self.h11.send(h11.Data(data=chunk)))
            except Exception as exc:  # _PeerGone included: it must not become a group
                failure = exc
            tg.cancel_scope.cancel()
        if self.hung_up or isinstance(failure, _PeerGone):
            raise _PeerGone
        if failure is not None:
            if _as_trainq_error(failure) is None:
                report_error(self.on_error, request, failure)
            raise _PeerGone  # cut short: no final chunk, so the client sees it broke
        await self._send(self._end())

    async def _watch_for_hangup(self, scope: anyio.CancelScope) -> None:
        """While a stream is being sent, notice the client leaving even when no chunk comes,
        so the producer is cancelled at once rather than at its next chunk."""
        while True:
            data = await self._receive()
            if not data:
                if peer_closed(self.raw):
                    self.hung_up = True
                    scope.cancel()
                else:  # only half-closed: it still reads, so the stream goes on
                    self.h11.receive_data(b"")
                return
            self.h11.receive_data(data)  # a pipelined request, kept for after the stream
            if len(self.h11.trailing_data[0]) > self.limits.max_body:
                return  # its own size check will refuse it; memory stays bounded


def _stream_head(response: StreamResponse) -> h11.Response:
    return h11.Response(
        status_code=response.status,
        reason=reason_phrase(response.status),
        headers=[
            (b"content-type", response.content_type.encode("latin-1")),
            *common_headers(),
            *encoded(response.headers),
        ],
    )


def _checked(result: object) -> Response:
    if not isinstance(result, Response):
        raise TypeError(f"handler returned {type(result).__name__}, not a Response")
    return result


_NOT_LOCAL = (
    "the request's Host is not a local name: trainqd answers requests made for this host "
    "(a browser's page of another site that rebinds its name to a forward of the socket is "
    "refused)"
)
_LOOPBACK_V4 = re.compile(r"127(\.\d{1,3}){3}")


def local_host(head: h11.Request) -> bool:
    """Whether the request was made for this host: no Host, a name without a dot
    (`localhost`, `trainq`), `*.localhost`, or a loopback address, any port. A site's page
    that rebinds its own name to 127.0.0.1 (where `ssh -L` forwards the socket) sends its
    own, dotted, name: its reads are refused, so it learns nothing of the user's jobs."""
    hosts = [value for name, value in head.headers if name == b"host"]
    if not hosts:
        return True  # HTTP/1.0 without one: no browser sends that
    host = hosts[0].decode("latin-1").strip().lower()
    if host.startswith("["):
        return host.partition("]")[0] == "[::1"
    name = host.rpartition(":")[0] if host.rpartition(":")[2].isdigit() else host
    name = name.removesuffix(".")
    return (
        "." not in name or name.endswith(".localhost") or _LOOPBACK_V4.fullmatch(name) is not None
    )


_CROSS_ORIGIN = (
    "a browser's page of another origin may not change anything here (its request's Origin "
    "is not the address it was sent to)"
)
_SAFE_METHODS = (b"GET", b"HEAD", b"OPTIONS")


def cross_origin(head: h11.Request) -> bool:
    """Whether a browser sent this request, one that changes something, for a page of
    another origin: a site the user's browser visits can POST to a forward of the socket
    (`ssh -L`, Host `localhost`) without a preflight (no Content-Type, `no-cors`), and trainqd
    would act as that user. Browsers say where a request comes from (`Sec-Fetch-Site`, else
    `Origin`, which must then name the Host it was sent to); the CLI and the library send
    neither. Reads are not refused: the browser keeps their answers from other origins."""
    if head.method.upper() in _SAFE_METHODS:
        return False
    site = _header(head, b"sec-fetch-site")
    if site is not None:
        return site.lower() not in {"same-origin", "none"}
    origin = _header(head, b"origin")
    if origin is None:
        return False
    scheme, _, address = origin.lower().partition("://")
    host = (_header(head, b"host") or "").lower()
    return scheme not in {"http", "https"} or not host or address != host


def _header(head: h11.Request, name: bytes) -> str | None:
    for key, value in head.headers:
        if key == name:
            return value.decode("latin-1").strip()
    return None


def _head_size(head: h11.Request) -> int:
    size = len(head.method) + len(head.target) + 12  # request line: spaces, version, CRLF
    for name, value in head.headers:
        size += len(name) + len(value) + 4
    return size


def _declared_length(head: h11.Request) -> int:
    for name, value in head.headers:
        if name == b"content-length":
            return int(value)  # h11 has checked it is a number
    return 0


def _as_trainq_error(exc: BaseException) -> TrainqError | None:
    """The caller-facing error in `exc`, looking inside a group of exactly one."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc if isinstance(exc, TrainqError) else None


async def _close_chunks(
    chunks: AsyncIterator[bytes], limits: ServerLimits, request: Request, on_error: OnError
) -> None:
    aclose = getattr(chunks, "aclose", None)
    if aclose is None:
        return
    with anyio.move_on_after(limits.stream_close_timeout, shield=True):
        try:
            await aclose()
        except Exception as exc:
            report_error(on_error, request, exc)
