"""The API server: HTTP/1.1 (h11) over anyio streams on a listening unix socket.

The server owns its connections, so it can ask the kernel who is calling (SO_PEERCRED) and
hand handlers a `Caller` nobody can forge. Each connection is one task in the server's task
group and serves requests one after another (keep-alive; see connection.py). Cancelling
`serve()` closes the listener and every connection, streams included.
"""

from __future__ import annotations

import errno
import socket

import anyio
from anyio.abc import SocketAttribute, SocketListener, SocketStream, TaskStatus

from trainqd.api.connection import (
    Connection,
    OnError,
    ServerLimits,
    log_error,
    peer_caller,
    report_error,
)
from trainqd.api.http import Router

DEFAULT_LIMITS = ServerLimits()

__all__ = ["OnError", "ServerLimits", "log_error", "peer_caller", "serve"]

# Running out of descriptors is a passing condition; wait for connections to end, keep serving.
_TRANSIENT_ACCEPT_ERRORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


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
    listener = await SocketListener.from_socket(sock)
    slots = anyio.Semaphore(limits.max_connections)
    try:
        async with anyio.create_task_group() as tg:
            task_status.started()
            while True:
                await slots.acquire()
                try:
                    stream = await listener.accept()
                except anyio.BrokenResourceError as exc:
                    slots.release()
                    cause = exc.__cause__
                    if isinstance(cause, OSError) and cause.errno in _TRANSIENT_ACCEPT_ERRORS:
                        report_error(on_error, None, cause)
                        await anyio.sleep(0.1)
                        continue
                    raise
                except BaseException:
                    slots.release()
                    raise
                tg.start_soon(_serve_connection, stream, router, limits, on_error, slots)
    finally:
        with anyio.CancelScope(shield=True):
            await listener.aclose()


async def _serve_connection(
    stream: SocketStream,
    router: Router,
    limits: ServerLimits,
    on_error: OnError,
    slots: anyio.Semaphore,
) -> None:
    try:
        raw = stream.extra(SocketAttribute.raw_socket)  # noqa: S610 (anyio, not Django)
        await Connection(stream, raw, router, limits, on_error).run()
    except Exception as exc:  # a bug here must not take the whole server down
        report_error(on_error, None, exc)
    finally:
        slots.release()
        with anyio.CancelScope(shield=True):
            await stream.aclose()
