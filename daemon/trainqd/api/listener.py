"""Binding trainqd's unix socket: once, safely, with exactly the permissions asked for.

The socket is the daemon's front door and SO_PEERCRED its only authentication, so binding it
is careful: a second daemon is refused rather than silently stealing the path; a socket left
by a crashed daemon is replaced; nothing that is not a socket is ever removed; the socket never
exists with wider permissions than asked (the umask covers the bind, and the group is set
before the mode opens it up); and a socket directory that another user could tamper with (a
pre-created /tmp/trainq-<uid>, say) is refused. Rivals starting at the same moment are
serialised by a lock on the directory, so exactly one wins. At shutdown the file is removed
unless a successor is already accepting on it.
"""

from __future__ import annotations

import contextlib
import fcntl
import grp
import os
import socket
import stat
import struct
from pathlib import Path

# Deep enough that a burst of clients is queued rather than bounced: the accept loop never
# waits on any one client (server.py), so the queue keeps moving.
BACKLOG = 1024
SUN_PATH_MAX = 107  # sockaddr_un.sun_path is 108 bytes, one for the terminating NUL
_PROBE_TIMEOUT = 1.0
_UCRED = struct.Struct("3i")


class SocketSetupError(Exception):
    """The socket cannot be bound as asked; the message is one line for the operator."""


class SocketInUse(SocketSetupError):
    """A live process is accepting connections on the path."""


def bind_unix_socket(
    path: Path, *, mode: int, group: str | None, parent_mode: int | None = None
) -> socket.socket:
    """A listening unix socket at `path` with permissions `mode` and group `group`.

    The parent directory is created if missing, with `parent_mode` (default 0755 for root's
    system daemon, 0700 for a personal one). Call this before starting threads: the umask is
    process-wide and is narrowed for the duration of the bind."""
    gid = None if group is None else group_id(group)
    encoded = os.fsencode(path)
    if len(encoded) > SUN_PATH_MAX:
        raise SocketSetupError(
            f"socket path {path} is {len(encoded)} bytes; unix sockets allow {SUN_PATH_MAX}"
        )
    _prepare_parent(path.parent, parent_mode)
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(dir_fd, fcntl.LOCK_EX)  # released when dir_fd closes
        _clear_path(path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        bound = False
        try:
            # Owner bits only (as asked) until the group is right; then the full mode.
            old_umask = os.umask(0o777 & ~(mode & 0o700))
            try:
                sock.bind(encoded)
                bound = True
            finally:
                os.umask(old_umask)
            if gid is not None:
                os.chown(path, -1, gid)
            os.chmod(path, mode)
            sock.listen(BACKLOG)
        except BaseException:
            sock.close()
            if bound:  # only ever our own file
                with contextlib.suppress(OSError):
                    os.unlink(path)
            raise
    finally:
        os.close(dir_fd)
    return sock


def remove_unix_socket(path: Path) -> bool:
    """At shutdown: remove the socket file at `path` unless another process is accepting on
    it (a newer daemon that took over the path keeps its socket). True when removed."""
    try:
        dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(dir_fd, fcntl.LOCK_EX)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return False
        if not stat.S_ISSOCK(st.st_mode):
            return False
        owner = _listener_pid(path)
        if owner is not None and owner != os.getpid():
            return False
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return True
    finally:
        os.close(dir_fd)


def group_id(group: str) -> int:
    """The gid of a group given by name (or as a number)."""
    try:
        return grp.getgrnam(group).gr_gid
    except KeyError:
        if group.isdigit():
            return int(group)
        raise SocketSetupError(f"socket group {group!r} does not exist") from None


def _default_parent_mode() -> int:
    # The system daemon's /run/trainq is for everyone to reach the socket in; a personal
    # daemon's directory is nobody else's business.
    return 0o755 if os.geteuid() == 0 else 0o700


def _prepare_parent(parent: Path, parent_mode: int | None) -> None:
    if not os.path.lexists(parent):
        wanted = _default_parent_mode() if parent_mode is None else parent_mode
        try:
            parent.mkdir(parents=True, mode=wanted)
        except FileExistsError:
            pass  # a rival made it first; checked below like any existing directory
        else:
            os.chmod(parent, wanted)  # mkdir's mode is cut by the umask
    try:
        st = os.stat(parent)
    except OSError as exc:
        raise SocketSetupError(f"socket directory {parent}: {exc.strerror}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise SocketSetupError(f"socket directory {parent} is not a directory")
    if st.st_uid not in (0, os.geteuid()):
        raise SocketSetupError(
            f"socket directory {parent} belongs to uid {st.st_uid}; refusing to use a "
            "directory another user controls"
        )
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        raise SocketSetupError(
            f"socket directory {parent} is writable by others (mode {st.st_mode & 0o7777:04o}) "
            "without the sticky bit; refusing to use it"
        )


def _clear_path(path: Path) -> None:
    """Make way for the bind: remove a dead daemon's socket, refuse anything else."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise SocketSetupError(f"{path} exists and is not a socket; refusing to replace it")
    pid = _listener_pid(path)
    if pid is None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # nobody accepts on it: left by a daemon that died
        return
    owner = f" (pid {pid})" if pid > 0 else ""
    raise SocketInUse(f"another process{owner} is accepting on {path}; is trainqd already running?")


def _listener_pid(path: Path) -> int | None:
    """Who accepts connections on the socket at `path`: a pid, 0 when someone does but the
    kernel cannot say who (another pid namespace, or a backlog too full to get in), None
    when nobody does."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(_PROBE_TIMEOUT)
        try:
            probe.connect(os.fsencode(path))
        except (ConnectionRefusedError, FileNotFoundError):
            return None
        except (TimeoutError, BlockingIOError):
            return 0
        pid: int = _UCRED.unpack(probe.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[0]
        return pid
