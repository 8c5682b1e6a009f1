"""What a container job's engine mounts, made by its root monitor (docs/security.md).

The engine runs as root and would mount a channel by its path, following links with root's
rights, whenever it gets to it: a channel whose link its owner re-points at another user's
data after submit would hand that data to the container. So the engine mounts only binds
the monitor made in the attempt's staging directory, `<attempt>/mounts` (root's, 0700: no
user reaches what is bound there):

    mounts/ml               the ml root, nosuid,nodev
    mounts/channels/<name>  each File mode channel, read-only, nosuid,nodev, bound from a
                            descriptor that a child running as the owner opened: the source
                            the owner could open at the start, whatever its path names later

docker's `--mount` cannot ask for nosuid or nodev; a bind keeps the flags of the mount it
is made from, so the engine's binds of these carry them (podman is told them as well).
The binds are detached when the attempt ends (`release`), and by trainqd's clean-up of an
attempt whose monitor vanished.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import stat

from trainqd.monitor import libc
from trainqd.monitor.owner import drop_to
from trainqd.monitor.records import Credentials, FileChannel, Launch

STAGING = "mounts"
ML = "ml"
CHANNELS = "channels"
_MESSAGE_BYTES = 4096
# statvfs flags that a remount must repeat, or it would clear them (same values as MS_*).
_KEPT_FLAGS = os.ST_RDONLY | os.ST_NOEXEC | os.ST_NOATIME | os.ST_NODIRATIME | os.ST_RELATIME


def staging_dir(attempt_dir: str) -> str:
    return os.path.join(attempt_dir, STAGING)


def ml_root_source(attempt_dir: str) -> str:
    """What the engine mounts at /opt/ml."""
    return os.path.join(staging_dir(attempt_dir), ML)


def channel_source(attempt_dir: str, name: str) -> str:
    """What the engine mounts for File mode channel `name`."""
    return os.path.join(staging_dir(attempt_dir), CHANNELS, name)


class StagingFailed(Exception):
    """A bind the container needs cannot be made; the message is one line."""


def stage(launch: Launch) -> None:
    """Bind the ml root and the File mode channels into the staging directory."""
    top = staging_dir(launch.attempt_dir)
    os.mkdir(top, 0o700)
    os.mkdir(os.path.join(top, CHANNELS), 0o700)
    # The ml root's path is trainqd's own (jobs/<id>/ml); the directory is the owner's, and
    # bound through a descriptor opened without following a link in its place.
    fd = os.open(launch.ml_root, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        target = ml_root_source(launch.attempt_dir)
        os.mkdir(target, 0o700)
        bind(fd, target, read_only=False)
    finally:
        os.close(fd)
    opened = open_as_owner(launch.owner, launch.file_channels)
    try:
        for channel, (source_fd, problem) in zip(launch.file_channels, opened, strict=True):
            if source_fd is None:
                raise StagingFailed(f"channel {channel.name}: {channel.source} {problem}")
            _stage_channel(launch.attempt_dir, channel, source_fd)
    finally:
        for source_fd, _ in opened:
            if source_fd is not None:
                os.close(source_fd)


def _stage_channel(attempt_dir: str, channel: FileChannel, fd: int) -> None:
    """The channel as a directory for the engine to mount: the source itself, or one that
    holds a single file's bind. Whether the source is a directory is asked of the owner's
    descriptor, never of root's view of the path."""
    target = channel_source(attempt_dir, channel.name)
    os.mkdir(target, 0o700)  # a directory source's own mode shows once bound on it
    if not stat.S_ISDIR(os.fstat(fd).st_mode):
        # Root's directory holding the file alone: the trainer must enter and list it.
        os.chmod(target, 0o755)  # noqa: S103
        target = os.path.join(target, os.path.basename(channel.source.rstrip("/")))
        os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
    bind(fd, target, read_only=True)


def bind(fd: int, target: str, *, read_only: bool) -> None:
    """Bind what `fd` refers to onto `target`, nosuid and nodev (and read-only), through
    /proc/self/fd: the object the descriptor holds, not whatever its path names now.

    Not recursive: filesystems mounted below a channel's source are not part of it. A
    recursive bind would also copy every other attempt's binds below the source (a channel
    of "/" holds them all), and each attempt more would double what the next one copies."""
    libc.mount(f"/proc/self/fd/{fd}", target, libc.MS_BIND)
    # A remount sets the mount's flags to exactly these: those of the filesystem are kept.
    flags = libc.MS_BIND | libc.MS_REMOUNT | libc.MS_NOSUID | libc.MS_NODEV
    flags |= os.statvfs(target).f_flag & _KEPT_FLAGS
    if read_only:
        flags |= libc.MS_RDONLY
    libc.mount(None, target, flags)


def open_as_owner(owner: Credentials, channels: list[FileChannel]) -> list[tuple[int | None, str]]:
    """Each channel's source opened by a child running as `owner`: (descriptor, "") or
    (None, what stopped the owner from opening it, in words fit for the owner). The
    descriptors are O_PATH ones, in the caller's mount namespace at the time of the call."""
    if not channels:
        return []
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pid = os.fork()
    if pid == 0:  # the child, from here to os._exit
        code = 1
        try:
            mine.close()
            signal.set_wakeup_fd(-1)
            for sig in (signal.SIGTERM, signal.SIGCHLD, signal.SIGINT, signal.SIGHUP):
                signal.signal(sig, signal.SIG_DFL)
            drop_to(owner.uid, owner.gid, owner.groups)
            for channel in channels:
                _send_opened(theirs, channel.source)
            code = 0
        finally:
            os._exit(code)
    theirs.close()
    found: list[tuple[int | None, str]] = []
    try:
        for _ in channels:
            data, fds, _flags, _addr = socket.recv_fds(mine, _MESSAGE_BYTES, 1)
            if not data:
                break
            problem = str(json.loads(data)["problem"])
            found.append((fds[0], "") if fds else (None, problem or "cannot be opened"))
    finally:
        mine.close()
        os.waitpid(pid, 0)
    if len(found) != len(channels):
        for fd, _ in found:
            if fd is not None:
                os.close(fd)
        raise StagingFailed("the child that opens the channels as their owner failed")
    return found


def _send_opened(sock: socket.socket, source: str) -> None:
    """Open `source` as the owner, following links as they see them, and send the
    descriptor, or the problem in its place."""
    fd, problem = _open_source(source)
    message = json.dumps({"problem": problem}).encode()
    try:
        socket.send_fds(sock, [message], [] if fd is None else [fd])
    finally:
        if fd is not None:
            os.close(fd)


def _open_source(source: str) -> tuple[int | None, str]:
    # O_PATH: nothing is opened for real yet (a device or FIFO planted there does nothing);
    # the kernel still checks the search permission of every directory on the way.
    try:
        fd = os.open(source, os.O_PATH | os.O_CLOEXEC)
    except PermissionError:
        return None, "is not readable by you"
    except OSError as exc:
        return None, f"cannot be opened: {exc.strerror}"
    mode = os.fstat(fd).st_mode
    problem = ""
    if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
        problem = "is not a regular file or a directory"
    else:
        # Reading it, as the owner: the very object the descriptor holds.
        try:
            os.close(os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC))
        except PermissionError:
            problem = "is not readable by you"
        except OSError as exc:
            problem = f"cannot be read: {exc.strerror}"
        if not problem and stat.S_ISDIR(mode) and not os.access(f"/proc/self/fd/{fd}", os.X_OK):
            problem = "is not readable by you"
    if problem:
        os.close(fd)
        return None, problem
    return fd, ""


def release(attempt_dir: str) -> list[str]:
    """Detach every bind of the attempt's staging directory; one line for each that could
    not be. Called by the monitor at the end and by trainqd for a vanished monitor's
    attempt: a second call finds nothing left to do."""
    top = staging_dir(attempt_dir)
    problems: list[str] = []
    _detach(os.path.join(top, ML), problems)
    for channel in _entries(os.path.join(top, CHANNELS)):  # none: no channels, never staged
        if not _detach(channel, problems):
            # No mount itself: a channel staged for a single file, whose bind is inside.
            for inside in _entries(channel):
                _detach(inside, problems)
    return problems


def _entries(directory: str) -> list[str]:
    try:
        return [os.path.join(directory, name) for name in os.listdir(directory)]
    except OSError:
        return []


def _detach(target: str, problems: list[str]) -> bool:
    """Detach `target`; False when it is no mount at all (a failure is noted in
    `problems`)."""
    try:
        libc.umount(target, libc.MNT_DETACH)
    except OSError as exc:
        if exc.errno in (errno.EINVAL, errno.ENOENT):  # not mounted, or never made
            return False
        problems.append(f"cannot unmount {target}: {exc.strerror}")
    return True
