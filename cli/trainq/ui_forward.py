"""`trainq ui`: the web pages in a local browser, through a forwarder run as the user.

It listens on 127.0.0.1 only, on a port the kernel picks, and prints a URL carrying a secret
token (as Jupyter does) in its fragment, which no request carries. The page keeps it in its
own origin's storage (this port's alone) and sends it as `X-Trainq-Token` with every API
request; a request without it gets 403 and nothing reaches trainqd. No cookie: the browser
would send one to every port of 127.0.0.1, another user's listener included. The pages'
own files, public anyway, load without it.
Accepted connections are relayed byte for byte to trainqd's unix socket, which this
process connects to: trainqd learns the caller from SO_PEERCRED, so the pages see what this
user may see, never more.

Other users of the box can reach the port, but it does not answer them: a connection whose
other end is not a socket of this user's or root's (the kernel's own table, /proc/net/tcp,
says whose each loopback socket is) is closed as accepted, so strangers can neither use the
token-free files nor wear the forwarder out (descriptors here, this user's connections at
trainqd).
The token keeps this user's other programs, and pages of other sites in this user's browser,
from the API; a request whose `Host` is not this forwarder's own address is refused, so a
site that rebinds its name to 127.0.0.1 reaches nothing, the public files included.
"""

from __future__ import annotations

import asyncio
import hmac
import os
import re
import secrets
import socket
import sys
from pathlib import Path
from typing import TextIO

TOKEN_HEADER = "x-trainq-token"  # noqa: S105 (a header name, not a secret)
# /ui/ and its files, plain names only (no query, no escapes, no dots up).
_PAGE_FILE = re.compile(r"/ui/?|/ui/[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*")
MAX_HEAD = 64 * 1024  # bytes; a larger request head is refused
HEAD_TIMEOUT = 10.0  # seconds a client may take to send its request head
PUBLIC_DEADLINE = 60.0  # seconds a public file's whole relay may take
_PROC_NET_TCP = Path("/proc/net/tcp")
_CHUNK = 64 * 1024


class Forwarder:
    """Relays authorized browser connections to trainqd's socket."""

    def __init__(self, socket_path: Path, token: str | None = None) -> None:
        self.socket_path = socket_path
        self.token = token or secrets.token_urlsafe(32)
        self._token_bytes = self.token.encode()
        self._hosts: set[str] = set()

    async def serve(self, port: int, out: TextIO) -> None:
        server = await asyncio.start_server(self._accept, "127.0.0.1", port, limit=MAX_HEAD)
        bound = server.sockets[0].getsockname()[1]
        self._hosts = {f"127.0.0.1:{bound}", f"localhost:{bound}"}
        print(f"trainq pages: http://127.0.0.1:{bound}/ui/#token={self.token}", file=out)
        print("(only this URL opens them; Ctrl-C stops the forwarder)", file=out, flush=True)
        async with server:
            await server.serve_forever()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # Root may anyway read the token from this process; nobody else gets a byte.
        uid = peer_uid(writer.get_extra_info("peername"), writer.get_extra_info("sockname"))
        if uid not in {os.getuid(), 0}:
            writer.close()
            return
        await self._handle(reader, writer)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT)
        except asyncio.LimitOverrunError:
            await _answer(writer, 431, "request head too large")
            return
        except (asyncio.IncompleteReadError, TimeoutError):
            await _answer(writer, 400, "bad request head")
            return
        except ConnectionError:
            writer.close()
            return
        method, target, headers = _request(head)
        if target is None:
            await _answer(writer, 400, "bad request line")
            return
        if method not in {"GET", "HEAD"}:  # the pages only read
            await _answer(
                writer, 405, "the forwarder relays GET and HEAD only", [("Allow", "GET, HEAD")]
            )
            return
        if headers.get("host", "").lower() not in self._hosts:
            await _answer(writer, 403, "not this forwarder's address")
            return
        # The pages' own files are the package's, public to every user of the box: they load
        # without the token, so the page can read it from the address. Everything else (the
        # API) needs it in the header the page sends.
        if self._is_token(headers.get(TOKEN_HEADER, "")):
            await self._relay(head, reader, writer)
        elif _PAGE_FILE.fullmatch(target):
            try:
                await asyncio.wait_for(self._relay(head, reader, writer), PUBLIC_DEADLINE)
            except TimeoutError:
                writer.close()
        else:
            await _answer(writer, 403, "no token: open the URL `trainq ui` printed")

    def _is_token(self, given: str) -> bool:
        return hmac.compare_digest(given.encode(), self._token_bytes)

    async def _relay(
        self, head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            up_reader, up_writer = await asyncio.open_unix_connection(str(self.socket_path))
        except OSError as exc:
            await _answer(writer, 502, f"cannot reach trainqd at {self.socket_path}: {exc}")
            return
        # One request per connection: later ones on a kept-alive connection would pass
        # unchecked, so each must come on a connection of its own.
        up_writer.write(_closing(head))
        # Either side ending ends both: a browser leaving a live page must end the stream.
        pipes = [
            asyncio.ensure_future(_pipe(reader, up_writer)),
            asyncio.ensure_future(_pipe(up_reader, writer)),
        ]
        try:
            await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pipe in pipes:
                pipe.cancel()
            writer.close()
            up_writer.close()


def peer_uid(peer: tuple[str, int] | None, local: tuple[str, int] | None) -> int | None:
    """The uid owning the other end of a loopback TCP connection from `peer` to `local`
    (None if the kernel's table has no such socket: it closed already)."""
    if not peer or not local:
        return None

    def entry(address: tuple[str, int]) -> str:
        # /proc/net/tcp writes an IPv4 address as the hex of its 32 bits in host order.
        return f"{socket.inet_aton(address[0])[::-1].hex().upper()}:{address[1]:04X}"

    wanted = (entry(peer), entry(local))
    try:
        with _PROC_NET_TCP.open() as table:
            for line in table:
                fields = line.split()
                if len(fields) > 7 and (fields[1], fields[2]) == wanted:
                    return int(fields[7])
    except (OSError, ValueError):
        return None
    return None


def _closing(head: bytes) -> bytes:
    """The head with `Connection: close`, so trainqd ends the connection after answering,
    and without the token, which is the forwarder's alone."""
    lines = head[:-4].split(b"\r\n")
    dropped = (b"connection:", TOKEN_HEADER.encode() + b":")
    kept = [line for line in lines[1:] if not line.lower().startswith(dropped)]
    return b"\r\n".join([lines[0], *kept, b"Connection: close"]) + b"\r\n\r\n"


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    try:
        while data := await source.read(_CHUNK):
            sink.write(data)
            await sink.drain()
    except OSError:  # a side that went away ends the relay like an EOF
        pass


def _request(head: bytes) -> tuple[str, str | None, dict[str, str]]:
    """The method, the target (None if the request line is not one) and the headers (names
    in lower case, the first of each)."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    target = parts[1] if len(parts) == 3 and parts[1].startswith("/") else None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers.setdefault(name.strip().lower(), value.strip())
    return parts[0], target, headers


async def _answer(
    writer: asyncio.StreamWriter,
    status: int,
    message: str,
    headers: list[tuple[str, str]] | None = None,
) -> None:
    body = (message + "\n").encode() if message else b""
    lines = [f"HTTP/1.1 {status} {_REASONS.get(status, '')}"]
    lines += [f"{name}: {value}" for name, value in headers or []]
    lines += [
        "Content-Type: text/plain; charset=utf-8",
        f"Content-Length: {len(body)}",
        "Connection: close",
    ]
    try:
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


_REASONS = {
    400: "Bad Request",
    403: "Forbidden",
    405: "Method Not Allowed",
    431: "Request Header Fields Too Large",
    502: "Bad Gateway",
}


def run(socket_path: Path, port: int, out: TextIO = sys.stdout) -> int:
    """Serve until interrupted."""
    try:
        asyncio.run(Forwarder(socket_path).serve(port, out))
    except OSError as exc:
        print(f"trainq ui: cannot listen on 127.0.0.1:{port}: {exc.strerror}", file=sys.stderr)
        return 1
    return 0
