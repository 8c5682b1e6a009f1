"""Where the socket and the state live when nobody says (docs/architecture.md).

root (the system service):  /run/trainq/trainq.sock, /var/lib/trainq
anyone else:                $XDG_RUNTIME_DIR/trainq/trainq.sock (or /tmp/trainq-<uid>/...),
                            $XDG_STATE_HOME/trainq (or ~/.local/state/trainq)

The client looks for a daemon in this order: --socket, $TRAINQ_SOCKET, the user's own
daemon's socket if it exists, then the system socket; so a personal trainqd and the
workstation's service can coexist without flags.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

SYSTEM_SOCKET = Path("/run/trainq/trainq.sock")
SYSTEM_STATE_DIR = Path("/var/lib/trainq")
SYSTEM_CONFIG = Path("/etc/trainq/trainqd.toml")
SOCKET_ENV = "TRAINQ_SOCKET"


def user_socket(uid: int | None = None) -> Path:
    uid = os.getuid() if uid is None else uid
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and Path(runtime).is_absolute():
        return Path(runtime) / "trainq" / "trainq.sock"
    return Path(f"/tmp/trainq-{uid}") / "trainq.sock"  # noqa: S108 (private 0700 dir)


def user_state_dir() -> Path:
    state = os.environ.get("XDG_STATE_HOME")
    base = Path(state) if state and Path(state).is_absolute() else Path.home() / ".local" / "state"
    return base / "trainq"


def default_daemon_socket() -> Path:
    if os.environ.get(SOCKET_ENV):
        return Path(os.environ[SOCKET_ENV])
    return SYSTEM_SOCKET if os.geteuid() == 0 else user_socket()


def default_state_dir() -> Path:
    return SYSTEM_STATE_DIR if os.geteuid() == 0 else user_state_dir()


def client_socket(flag: str | None = None) -> Path:
    if flag:
        return Path(flag)
    if os.environ.get(SOCKET_ENV):
        return Path(os.environ[SOCKET_ENV])
    if os.geteuid() != 0:
        mine = user_socket()
        if mine.exists() and _private_to_me(mine.parent):
            return mine
    return SYSTEM_SOCKET


def _private_to_me(directory: Path) -> bool:
    """Whether only this user (or root) can have put a socket there, as trainqd requires of
    its own: /tmp/trainq-<uid> may have been made by another user, who listens in it."""
    try:
        st = directory.stat()
    except OSError:
        return False
    owner_ok = st.st_uid in (0, os.geteuid())
    return owner_ok and not (st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX)
