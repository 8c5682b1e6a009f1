"""The API server: HTTP/1.1 (h11) over anyio streams on a listening unix socket.

The server owns its connections, so it can ask the kernel who is calling (SO_PEERCRED) and
hand handlers a `Caller` nobody can forge. Each connection is one task in the server's task
group and serves requests one after another (keep-alive; see connection.py). Cancelling
`serve()` closes the listener and every connection, streams included.

Accepting never waits on any one client (accepting.py, shared with the metrics listener):
it accepts whatever the kernel has queued, answers a connection over its user's share
(quotas.py) with a `busy` 503 written straight into the fresh socket's empty buffer, and
hands every other one to a task of its own. So a user who holds connections, streams or
half-sent requests fills their own share and nothing else: the listen backlog keeps moving
for everybody.
"""

from __future__ import annotations

import contextlib
import functools
import socket
from collections.abc import Awaitable, Callable

import anyio
from anyio.abc import TaskStatus, UNIXSocketStream

from trainq.core.errors import Busy
from trainqd.api.accepting import serve_connections
from trainqd.api.connection import (
    Connection,
    OnError,
    busy_reply,
    log_error,
    peer_caller,
    report_error,
)
from trainqd.api.limits import ServerLimits
from trainqd.api.quotas import Occupancy
from trainqd.api.routing import Caller, Router

DEFAULT_LIMITS = ServerLimits()

__all__ = ["OnError", "ServerLimits", "log_error", "peer_caller", "serve"]

# What a refused client may have sent already, read and dropped (never waited for).
_DRAIN_READS = 4
_DRAIN_SIZE = 65536


async def serve(
    sock: socket.socket,
    router: Router,
    *,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    limits: ServerLimits = DEFAULT_LIMITS,
    on_error: OnError = log_error,
) -> None:
    """Serve `router` on `sock` (bound and listening) until cancelled; takes over `sock`.

    `task_status.started()` is called once connections are being accepted. `on_error` gets
    every failure that is not the caller's doing, with its traceback (`request` is None when
    no request was at hand); callers see only a 500 that points at the log."""
    occupancy = Occupancy(limits)

    def admit(raw: socket.socket) -> Callable[[], Awaitable[None]] | None:
        try:
            caller = peer_caller(raw)
        except OSError:
            raw.close()
            return None
        refusal = occupancy.admit(caller.uid)
        if refusal is not None:
            _refuse(raw, refusal)
            return None
        return functools.partial(
            _serve_connection, raw, caller, router, limits, on_error, occupancy
        )

    task_status.started()
    await serve_connections(sock, admit, on_error=functools.partial(report_error, on_error, None))


def _refuse(raw: socket.socket, error: Busy) -> None:
    """Answer `busy` and close, in one non-blocking write: a fresh socket's send buffer is
    empty, so the short answer fits, and a client that reads nothing costs nothing. What the
    client already sent is dropped first, without waiting for more: closing on unread data
    would make its next read a reset instead of the end of the answer."""
    with contextlib.suppress(OSError):
        raw.send(busy_reply(error))
        for _ in range(_DRAIN_READS):
            if not raw.recv(_DRAIN_SIZE):
                break
    raw.close()


async def _serve_connection(  # noqa: PLR0917 (the server's state, passed along as it is)
    raw: socket.socket,
    caller: Caller,
    router: Router,
    limits: ServerLimits,
    on_error: OnError,
    occupancy: Occupancy,
) -> None:
    stream: UNIXSocketStream | None = None
    try:
        stream = await UNIXSocketStream.from_socket(raw)
        connection = Connection(
            stream,
            raw,
            caller,
            router=router,
            limits=limits,
            on_error=on_error,
            occupancy=occupancy,
        )
        await connection.run()
    except Exception as exc:  # a bug here must not take the whole server down
        report_error(on_error, None, exc)
    finally:
        occupancy.release(caller.uid)
        with anyio.CancelScope(shield=True):
            if stream is not None:
                await stream.aclose()
            else:
                raw.close()
