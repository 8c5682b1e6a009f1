"""The API server: HTTP/1.1 (h11) over anyio streams on a listening unix socket.

The server owns its connections, so it can ask the kernel who is calling (SO_PEERCRED) and
hand handlers a `Caller` nobody can forge. Each connection is one task in the server's task
group and serves requests one after another (keep-alive; see connection.py). Cancelling
`serve()` closes the listener and every connection, streams included.

Accepting never waits on any one client: the loop accepts whatever the kernel has queued,
answers a connection over its user's share (quotas.py) with a `busy` 503 written straight
into the fresh socket's empty buffer, and hands every other one to a task of its own. So a
user who holds connections, streams or half-sent requests fills their own share and nothing
else: the listen backlog keeps moving for everybody.
"""

from __future__ import annotations

import contextlib
import errno
import socket

import anyio
from anyio.abc import TaskGroup, TaskStatus, UNIXSocketStream

from trainq.core.errors import Busy
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

# Running out of descriptors is a passing condition; wait for connections to end, keep serving.
_TRANSIENT_ACCEPT_ERRORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
# Connections accepted in one go before the loop lets other tasks run.
_ACCEPT_BATCH = 64
_PAUSE_WHEN_OUT_OF_DESCRIPTORS = 0.1
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
    sock.setblocking(False)
    occupancy = Occupancy(limits)
    try:
        async with anyio.create_task_group() as tg:
            task_status.started()
            while True:
                await anyio.wait_readable(sock)
                if not _accept_queued(sock, tg, router, limits, on_error, occupancy):
                    await anyio.sleep(_PAUSE_WHEN_OUT_OF_DESCRIPTORS)
    finally:
        anyio.notify_closing(sock)
        sock.close()


def _accept_queued(  # noqa: PLR0917 (the server's state, passed along as it is)
    sock: socket.socket,
    tg: TaskGroup,
    router: Router,
    limits: ServerLimits,
    on_error: OnError,
    occupancy: Occupancy,
) -> bool:
    """Accept what the kernel has queued, without awaiting anything; False when the process
    is out of descriptors (or memory) and accepting should pause."""
    for _ in range(_ACCEPT_BATCH):
        try:
            raw, _ = sock.accept()
        except BlockingIOError:
            return True
        except OSError as exc:
            if exc.errno in _TRANSIENT_ACCEPT_ERRORS:
                report_error(on_error, None, exc)
                return False
            if exc.errno == errno.ECONNABORTED:
                continue
            raise
        raw.setblocking(False)
        try:
            caller = peer_caller(raw)
        except OSError:
            raw.close()
            continue
        refusal = occupancy.admit(caller.uid)
        if refusal is not None:
            _refuse(raw, refusal)
            continue
        tg.start_soon(_serve_connection, raw, caller, router, limits, on_error, occupancy)
    return True


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
