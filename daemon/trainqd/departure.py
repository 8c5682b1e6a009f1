"""A request's work stops when its client leaves.

The connection marks the client of the request it is handling (`handling`); work that may
wait long on the client's behalf (a child such as the submit-time path check) runs through
`unless_client_leaves`, which cancels it once the client has closed its connection. Only a
client gone entirely counts: one that shut down its writing end alone still reads, and gets
its answer.
"""

from __future__ import annotations

import select
import socket
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TypeVar

import anyio

T = TypeVar("T")

# The client's socket and the task handling its request. Tasks started meanwhile copy the
# variable (a stop's scancel, a Slurm hand-off), but their work is not the request's: only
# the task that handles it is cancelled with it.
_CLIENT: ContextVar[tuple[socket.socket, int] | None] = ContextVar("trainq_client", default=None)


class ClientLeft(Exception):
    """The client of the request being handled closed its connection; its work was
    cancelled and nobody is left to answer."""


@contextmanager
def handling(raw: socket.socket) -> Iterator[None]:
    """Within the block, the request being handled is `raw`'s client's."""
    token = _CLIENT.set((raw, anyio.get_current_task().id))
    try:
        yield
    finally:
        _CLIENT.reset(token)


def peer_closed(sock: socket.socket) -> bool:
    """True once the peer has closed its end entirely, not just shut down its writing."""
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)
    return any(events & (select.POLLHUP | select.POLLERR) for _, events in poller.poll(0))


async def unless_client_leaves(work: Callable[[], Awaitable[T]]) -> T:
    """`work()`'s result, or ClientLeft once the client of the request being handled has
    left (`work` is then cancelled). Outside the task handling a request, `work()` alone."""
    client = _CLIENT.get()
    if client is None or client[1] != anyio.get_current_task().id or client[0].fileno() < 0:
        return await work()
    raw = client[0]
    left = False
    outcome: list[T] = []
    failure: Exception | None = None

    async def watch(scope: anyio.CancelScope) -> None:
        nonlocal left
        await anyio.wait_readable(raw)
        # Readable and still there: a pipelined request or a half close, left for later.
        if peer_closed(raw):
            left = True
            scope.cancel()

    async with anyio.create_task_group() as tg:
        tg.start_soon(watch, tg.cancel_scope)
        try:
            outcome.append(await work())
        except Exception as exc:  # kept out of the task group's exception group
            failure = exc
        tg.cancel_scope.cancel()
    if left:
        raise ClientLeft
    if failure is not None:
        raise failure
    return outcome[0]
