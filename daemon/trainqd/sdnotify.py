"""systemd's notify protocol (sd_notify(3)) for Type=notify: READY=1 once the socket accepts,
STOPPING=1 on shutdown, STATUS= lines for `systemctl status`. A datagram to $NOTIFY_SOCKET;
nothing at all when trainqd is not run by systemd.

The address is taken out of the environment as this module is imported, which trainqd's
entry point does before it starts anything (sd_notify's `unset_environment`). Every process
trainqd starts would otherwise inherit the variable, and a container engine that finds it
speaks for the service: podman tells systemd that its conmon is the main process and that
the service is ready. NotifyAccess=main in the unit makes systemd ignore such a message;
taking the variable away means none is ever sent.
"""

from __future__ import annotations

import os
import socket

ENV = "NOTIFY_SOCKET"
# A notification must never hold up the daemon: systemd reads its socket at once, and if it
# does not, losing a STATUS line is better than a stalled event loop.
_SEND_TIMEOUT = 2.0


def _socket_address(value: str | None) -> str | None:
    """The address to send to: an absolute path, or "@name" in the abstract namespace."""
    if not value:
        return None
    if value.startswith("@"):
        return "\0" + value[1:]
    if value.startswith("/"):
        return value
    return None  # sd_notify(3) accepts nothing else a unix socket could be


_ADDRESS = _socket_address(os.environ.pop(ENV, None))


def notify(*fields: str) -> bool:
    """Send `fields` ("READY=1", "STATUS=...") to systemd as one message; True if sent."""
    if _ADDRESS is None or not fields:
        return False
    message = "\n".join(fields).encode()
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
        sock.settimeout(_SEND_TIMEOUT)
        try:
            sock.sendto(message, _ADDRESS)
        except OSError:
            return False
    return True
