"""Whose rights a job runs with, and what of the host it may write.

A subprocess job's monitor starts with trainqd's credentials (root on a workstation), does
the one thing that needs them, then becomes the job's owner for good, before it opens any
file of the job: every process of the job belongs to its submitter, and nothing the owner
controls is ever touched with root's rights.

The one privileged thing is the read-only view: a private mount namespace in which each
File mode channel source is bound onto itself read-only, so a trainer cannot damage its
data even where its owner could, while the same paths stay writable for everyone else.
"""

from __future__ import annotations

import errno
import os

from trainqd.monitor import libc

# statvfs flags that a remount must repeat, or it would clear them (same values as MS_*).
_KEPT_FLAGS = (
    os.ST_NOSUID | os.ST_NODEV | os.ST_NOEXEC | os.ST_NOATIME | os.ST_NODIRATIME | os.ST_RELATIME
)


class ViewUnavailable(Exception):
    """The mount namespace cannot be made here (not root, or the kernel refuses)."""


def is_root() -> bool:
    return os.geteuid() == 0


def drop_to(uid: int, gid: int, groups: list[int]) -> None:
    """Become `uid`/`gid` with exactly `groups`, irrevocably (real, effective and saved ids).

    Without root there is nothing to drop, and nobody else to become: a monitor of a
    personal trainqd refuses to run another user's job as itself.
    """
    if not is_root():
        if os.getuid() != uid:
            raise PermissionError(f"cannot run as uid {uid}: the monitor is not root")
        return
    os.setgroups(groups)
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid):
        raise PermissionError(f"could not switch to uid {uid} gid {gid}")


def make_readonly_view(paths: list[str]) -> list[str]:
    """Move this process into a mount namespace of its own where each of `paths` is
    read-only. Children inherit the namespace; the host's mounts are unchanged.

    Raises ViewUnavailable when no namespace can be made. A path that cannot be bound
    (gone since trainqd checked it) does not stop the others; the returned list holds one
    line per such path.
    """
    try:
        libc.unshare(libc.CLONE_NEWNS)
        # Slave, not shared: binds made here never show on the host, while the host's own
        # unmounts still reach this namespace (a private copy would keep a filesystem the
        # administrator unmounted busy for as long as the job runs).
        libc.mount(None, "/", libc.MS_REC | libc.MS_SLAVE)
    except OSError as exc:
        raise ViewUnavailable(
            f"no read-only view of the data ({exc.strerror}); it stays writable"
        ) from None
    problems = []
    for path in paths:
        try:
            _bind_readonly(path)
        except OSError as exc:
            problems.append(f"cannot make {path} read-only: {exc.strerror}")
    return problems


def _bind_readonly(path: str) -> None:
    libc.mount(path, path, libc.MS_BIND | libc.MS_REC)
    try:
        libc.set_readonly_recursive(path)
    except OSError as exc:
        if exc.errno not in (errno.ENOSYS, errno.EINVAL):  # a kernel before 5.12
            raise
        # A plain remount covers the top mount only, and resets the flags it is not given.
        kept = os.statvfs(path).f_flag & _KEPT_FLAGS
        libc.mount(None, path, libc.MS_BIND | libc.MS_REMOUNT | libc.MS_RDONLY | kept)
