"""Fair shares of the API server: connections and streams counted per uid.

Every user of the workstation shares one daemon, so no one user may hold what the others
need to reach it. Each uid (from SO_PEERCRED, which nobody can forge) may hold at most
`max_connections_per_user` connections and, of those, `max_streams_per_user` streams (logs,
events); all uids together at most `max_connections`, a cap set well above one user's share
so that a single user never fills it. Root keeps a reserve of one user's share beyond the
global cap, so the administrator can always look. Whatever is over its share is refused
with a short `busy` answer at once: nothing waits in a queue that one user could fill.
"""

from __future__ import annotations

import resource
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

from trainq.core.errors import Busy
from trainqd.api.limits import ServerLimits

ROOT_UID = 0
# Descriptors the daemon needs besides its API connections: the database, job directories,
# monitors' pipes, the GPU library, log files being streamed.
RESERVED_DESCRIPTORS = 256
# Request bodies over the server's usual limit (a route may take more) received at once.
LARGE_BODIES = 4


class Occupancy:
    """Who holds how many connections and streams right now."""

    def __init__(self, limits: ServerLimits) -> None:
        self.shares = limits
        self.total = 0
        self.connections: Counter[int] = Counter()
        self.streams: Counter[int] = Counter()
        self.large_bodies: Counter[int] = Counter()

    def admit(self, uid: int) -> Busy | None:
        """Count a new connection of `uid` (`release` it when it ends), or say why it is
        over a share: then nothing is counted."""
        shares = self.shares
        held = self.connections[uid]
        if held >= shares.max_connections_per_user:
            return Busy(
                f"you already hold {held} connections to trainqd, the most one user may; "
                "close some and try again"
            )
        cap = shares.max_connections
        if uid == ROOT_UID:
            cap += shares.max_connections_per_user
        if self.total >= cap:
            return Busy(f"trainqd is serving its most connections ({self.total}); try again")
        self.connections[uid] += 1
        self.total += 1
        return None

    def release(self, uid: int) -> None:
        self.total -= 1
        self.connections[uid] -= 1
        if not self.connections[uid]:
            del self.connections[uid]

    def take_large_body(self, uid: int) -> Busy | None:
        """Count a body over the server's usual limit that `uid` is sending (a list of jobs
        may be megabytes; `release_large_body` it once answered), or say why not: one such
        body per user at a time and LARGE_BODIES in all, so that the memory they hold is
        bounded whatever one user sends."""
        if self.large_bodies[uid]:
            return Busy("you are already sending trainqd a large request; try again after it")
        if self.large_bodies.total() >= LARGE_BODIES:
            return Busy("trainqd is receiving its most large requests at once; try again")
        self.large_bodies[uid] += 1
        return None

    def release_large_body(self, uid: int) -> None:
        self.large_bodies[uid] -= 1
        if not self.large_bodies[uid]:
            del self.large_bodies[uid]

    @contextmanager
    def stream(self, uid: int) -> Iterator[None]:
        """Hold one of `uid`'s streams for the block; Busy when none is left."""
        held = self.streams[uid]
        if held >= self.shares.max_streams_per_user:
            raise Busy(
                f"you already have {held} streams (logs -f, events) open, the most one user "
                "may; end one and try again"
            )
        self.streams[uid] += 1
        try:
            yield
        finally:
            self.streams[uid] -= 1
            if not self.streams[uid]:
                del self.streams[uid]


def descriptors_needed(limits: ServerLimits) -> int:
    """Open files for every connection `limits` allows (root's reserve included) and the
    daemon's own."""
    return limits.max_connections + limits.max_connections_per_user + RESERVED_DESCRIPTORS


def raise_open_files_limit(wanted: int) -> int:
    """Raise this process's soft limit on open files towards `wanted` (no further: children
    inherit it), as far as the hard limit allows; the soft limit now. Services are often
    started with 1024, fewer than the connections trainqd allows."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return wanted if soft == resource.RLIM_INFINITY else soft
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):
        return soft
    return target


def fit_to_descriptors(limits: ServerLimits, open_files: int) -> ServerLimits:
    """`limits` with the global cap lowered where the descriptors would run out first: a
    connection beyond the cap is refused at once, where one beyond the descriptors would
    stall accepting for everybody."""
    if descriptors_needed(limits) <= open_files:
        return limits
    room = max(open_files - RESERVED_DESCRIPTORS, 16)
    total = max(room - limits.max_connections_per_user, 8)
    return replace(
        limits,
        max_connections=total,
        # Still a share that one user cannot fill the whole cap with.
        max_connections_per_user=min(limits.max_connections_per_user, max(1, total // 4)),
    )
