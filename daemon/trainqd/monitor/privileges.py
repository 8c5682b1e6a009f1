"""Whose rights a job runs with, and what of the host it may write.

A subprocess job's monitor starts with trainqd's credentials (root on a workstation), does
the one thing that needs them, then becomes the job's owner for good, before it opens any
file of the job: every process of the job belongs to its submitter, and nothing the owner
controls is ever touched with root's rights.

The one privileged thing is the trainer's view of the host: a private mount namespace in
which
- each File mode channel source is bound onto itself read-only, so a trainer cannot damage
  its data even where its owner could, while the same paths stay writable for everyone else;
- the job's ml root is bound at /opt/ml, where SageMaker code looks for it (checkpoints
  above all, which have no SM_* variable);
- /etc/hosts is the host's plus the job's SageMaker host name (resourceconfig.json's
  `current_host`), which the SageMaker toolkit waits to resolve before it trains.
Nothing else of the host changes for the trainer, and nothing of this shows on the host.
"""

from __future__ import annotations

import errno
import json
import os
import stat

from trainqd.monitor import libc

# statvfs flags that a remount must repeat, or it would clear them (same values as MS_*).
_KEPT_FLAGS = (
    os.ST_NOSUID | os.ST_NODEV | os.ST_NOEXEC | os.ST_NOATIME | os.ST_NODIRATIME | os.ST_RELATIME
)
SAGEMAKER_ROOT = "/opt/ml"
HOSTS = "/etc/hosts"
LOOPBACK = "127.0.0.1"


RESOURCE_CONFIG = "input/config/resourceconfig.json"
DEFAULT_HOST = "algo-1"
NO_OPT_ML = (
    f"there is no {SAGEMAKER_ROOT} (the ml root is in SAGEMAKER_BASE_DIR) and SageMaker's "
    "host name does not resolve"
)


def without_namespace(why: ViewUnavailable, readonly: list[str]) -> str:
    """The one warning of a monitor that could not make a mount namespace."""
    data = "no read-only view of the data (it stays writable); " if readonly else ""
    return f"{why}: {data}{NO_OPT_ML}"


def sagemaker_host(ml_files: dict[str, str]) -> str:
    """The host name the job's resourceconfig.json gives it (`current_host`)."""
    try:
        host = json.loads(ml_files[RESOURCE_CONFIG])["current_host"]
    except (KeyError, ValueError, TypeError):
        return DEFAULT_HOST
    return host if isinstance(host, str) and host else DEFAULT_HOST


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


def make_job_view(
    readonly: list[str], ml_root: str, current_host: str, *, unprivileged: bool = False
) -> list[str]:
    """Move this process into a mount namespace of its own where each of `readonly` is
    read-only, `ml_root` is at /opt/ml and `current_host` resolves to the loopback address.
    Children inherit the namespace; the host's mounts are unchanged.

    `unprivileged`: a monitor that is not root makes the mount namespace inside a user
    namespace of its own, where its uid and gid map to themselves (so files keep their
    owners as far as the job can tell, and its trainer gains no capability). /opt/ml must
    then exist already: only root can make it on the host.

    Raises ViewUnavailable when no namespace can be made. What cannot be done (a path gone
    since trainqd checked it, no /opt/ml to mount on) does not stop the rest; the returned
    list holds one line for each.
    """
    _enter_private_namespace(unprivileged)
    problems = []
    for path in readonly:
        try:
            _bind_readonly(path)
        except OSError as exc:
            problems.append(f"cannot make {path} read-only: {exc.strerror}")
    try:
        _bind_hosts(current_host)
    except OSError as exc:
        problems.append(f"{current_host} does not resolve: {HOSTS}: {exc.strerror}")
    try:
        _bind_ml_root(ml_root)
    except OSError as exc:
        problems.append(f"no {SAGEMAKER_ROOT}: {exc.filename or ml_root}: {exc.strerror}")
    return problems


def _enter_private_namespace(unprivileged: bool) -> None:
    try:
        if unprivileged:
            _enter_user_namespace()
        else:
            libc.unshare(libc.CLONE_NEWNS)
        # Slave, not shared: binds made here never show on the host, while the host's own
        # unmounts still reach this namespace (a private copy would keep a filesystem the
        # administrator unmounted busy for as long as the job runs).
        libc.mount(None, "/", libc.MS_REC | libc.MS_SLAVE)
    except OSError as exc:
        raise ViewUnavailable(f"no private mount namespace ({exc.strerror})") from None


def _enter_user_namespace() -> None:
    uid, gid = os.getuid(), os.getgid()
    libc.unshare(libc.CLONE_NEWUSER | libc.CLONE_NEWNS)
    # An unprivileged process may map only its own ids, and a gid map needs setgroups(2)
    # turned off first; its supplementary groups stay what they were for every access check.
    _write_proc("/proc/self/setgroups", "deny")
    _write_proc("/proc/self/uid_map", f"{uid} {uid} 1")
    _write_proc("/proc/self/gid_map", f"{gid} {gid} 1")


def _write_proc(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _bind_hosts(current_host: str) -> None:
    """Bind a copy of the host's /etc/hosts plus `current_host` over /etc/hosts.

    The copy lives on a small tmpfs mounted for a moment on /opt/ml (a directory that is
    there anyway): the bind keeps the file alive once that tmpfs is detached, and nothing
    is written to any disk or to a directory the job's owner controls."""
    with open(HOSTS, "rb") as f:
        text = f.read()
    if text and not text.endswith(b"\n"):
        text += b"\n"
    text += f"{LOOPBACK}\t{current_host}\n".encode()
    _ensure_mountpoint()
    flags = libc.MS_NOSUID | libc.MS_NODEV | libc.MS_NOEXEC
    libc.mount("tmpfs", SAGEMAKER_ROOT, flags, "tmpfs", "size=1m,mode=0755")
    try:
        copy = os.path.join(SAGEMAKER_ROOT, "hosts")
        fd = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, text)
        finally:
            os.close(fd)
        libc.mount(copy, HOSTS, libc.MS_BIND)
    finally:
        libc.umount(SAGEMAKER_ROOT, libc.MNT_DETACH)


def _bind_ml_root(ml_root: str) -> None:
    _ensure_mountpoint()
    # Bound through a descriptor opened without following links: the owner owns the ml
    # root and must not be able to point root's bind at some other directory.
    fd = os.open(ml_root, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        libc.mount(f"/proc/self/fd/{fd}", SAGEMAKER_ROOT, libc.MS_BIND)
    finally:
        os.close(fd)


def _ensure_mountpoint() -> None:
    """/opt/ml, empty, on the host: a mountpoint only, made once by a root monitor."""
    os.makedirs(SAGEMAKER_ROOT, mode=0o755, exist_ok=True)
    if not stat.S_ISDIR(os.lstat(SAGEMAKER_ROOT).st_mode):
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), SAGEMAKER_ROOT)


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
