"""Accepting connections so that no client and no shortage can end the daemon.

Both of trainqd's listeners (the API's unix socket, `server.py`; the metrics' TCP port,
`scrape_listener.py`) accept here. Accepting never waits on any one client: what the kernel
has queued is taken without awaiting, each connection is handed to a task of its own, and
whatever that task raises is reported and costs that connection alone. An error of one
pending connection (a client that reset before it was taken) skips it; anything else that
`accept()` fails with (out of descriptors or memory) pauses accepting, longer each time it
fails again, and never ends the daemon. With `most` set, no more than that many connections
are open at once: beyond it, connections wait in the listen backlog, never in a descriptor.
"""

from __future__ import annotations

import contextlib
import errno
import socket
from collections.abc import Awaitable, Callable

import anyio
from anyio.abc import TaskGroup

# accept(2): Linux passes on a pending connection's own network errors; the next may be fine.
ONE_CONNECTIONS_ERRORS = frozenset(
    {
        errno.ECONNABORTED,
        errno.ECONNRESET,
        errno.EPROTO,
        errno.EPERM,
        errno.ENETDOWN,
        errno.ENETUNREACH,
        errno.ENONET,
        errno.ENOPROTOOPT,
        errno.EHOSTDOWN,
        errno.EHOSTUNREACH,
        errno.EOPNOTSUPP,
        errno.ETIMEDOUT,
    }
)
# Connections accepted in one go before the loop lets other tasks run.
BATCH = 64
FIRST_PAUSE = 0.01
LONGEST_PAUSE = 1.0

# Given a fresh connection (non-blocking), what serves it in a task of its own; None when it
# has been dealt with already (refused and closed).
Admit = Callable[[socket.socket], Callable[[], Awaitable[None]] | None]
OnError = Callable[[BaseException], None]


class Backoff:
    """How long accepting pauses after a failure: doubling while failures go on."""

    def __init__(self) -> None:
        self.pause = 0.0

    def failed(self) -> float:
        self.pause = min(max(self.pause * 2, FIRST_PAUSE), LONGEST_PAUSE)
        return self.pause

    def succeeded(self) -> None:
        self.pause = 0.0


class Slots:
    """At most `most` connections open at once (None: no bound here)."""

    def __init__(self, most: int | None) -> None:
        self.most = most
        self.open = 0
        self._freed = anyio.Event()

    def free(self) -> int:
        return BATCH if self.most is None else self.most - self.open

    async def wait_for_one(self) -> None:
        while self.free() <= 0:
            self._freed = anyio.Event()
            await self._freed.wait()

    def taken(self) -> None:
        self.open += 1

    def given_back(self) -> None:
        self.open -= 1
        self._freed.set()


async def serve_connections(
    sock: socket.socket, admit: Admit, *, on_error: OnError, most: int | None = None
) -> None:
    """Accept on `sock` (bound and listening) until cancelled, each connection that `admit`
    takes served in its own task; takes over `sock` and closes it at the end."""
    sock.setblocking(False)
    slots = Slots(most)
    backoff = Backoff()
    try:
        async with anyio.create_task_group() as tg:
            while True:
                await slots.wait_for_one()
                await anyio.wait_readable(sock)
                failure = _accept_queued(sock, admit, tg, slots, on_error)
                if failure is None:
                    backoff.succeeded()
                    continue
                _report(on_error, failure)
                await anyio.sleep(backoff.failed())
    finally:
        anyio.notify_closing(sock)
        sock.close()


def _accept_queued(
    sock: socket.socket, admit: Admit, tg: TaskGroup, slots: Slots, on_error: OnError
) -> OSError | None:
    """Accept what the kernel has queued, as far as the slots allow, without awaiting
    anything; the error that should pause accepting, if one came."""
    for _ in range(min(BATCH, slots.free())):
        try:
            raw, _ = sock.accept()
        except BlockingIOError:
            return None
        except OSError as exc:
            if exc.errno in ONE_CONNECTIONS_ERRORS:
                continue
            return exc
        try:
            raw.setblocking(False)
            handle = admit(raw)
        except Exception as exc:
            raw.close()
            _report(on_error, exc)
            continue
        if handle is not None:
            slots.taken()
            tg.start_soon(_serve_one, raw, handle, slots, on_error)
    return None


async def _serve_one(
    raw: socket.socket, handle: Callable[[], Awaitable[None]], slots: Slots, on_error: OnError
) -> None:
    try:
        await handle()
    except Exception as exc:  # one connection's failure, whatever it is, is that one's alone
        _report(on_error, exc)
    finally:
        raw.close()
        slots.given_back()


def _report(on_error: OnError, exc: BaseException) -> None:
    with contextlib.suppress(Exception):  # a broken logger must not end accepting
        on_error(exc)
