"""What the API server allows one request, one connection and one user: sizes, timeouts,
and the fair shares of connections and streams (see quotas.py)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ServerLimits:
    max_body: int = 1 << 20
    max_header_block: int = 16 << 10
    # From a request's first byte to its last, and for a new connection to send its first
    # request: a client that dribbles its request in (slowloris) is cut off here.
    request_timeout: float = 10.0
    keepalive_timeout: float = 30.0  # idle between requests on one connection
    send_timeout: float = 60.0  # a client that stops reading what it asked for
    stream_close_timeout: float = 5.0  # for a stream's iterator to run its cleanup
    # Fair shares: all users together, one uid, and one uid's streams (logs, events).
    max_connections: int = 1024
    max_connections_per_user: int = 64
    max_streams_per_user: int = 16
