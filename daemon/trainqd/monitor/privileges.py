"""Whose rights a job runs with, and what of the host it may write.

A subprocess job's monitor starts with trainqd's credentials (root on a workstation), does
the one thing that needs them, then becomes the job's owner for good, before it opens any
file of the job: every process of the job belongs to its submitter, and nothing the owner
controls is ever touched with root's rights.

The one privileged thing is the trainer's view of the host: a private mount namespace in
which
- each File mode channel source is bound onto itself read-only, so a trainer cannot damage
  its data even where its owner could, while the same paths stay writable for everyone else.
  Root never resolves a path the owner controls: a child running as the owner opens each
  source (mounts.open_as_owner), and the bind is made from and onto that descriptor, so a
  link the owner swaps meanwhile can only ever name what the owner could open;
- the job's ml root is bound at /opt/ml, where SageMaker code looks for it (checkpoints
  above all, which have no SM_* variable);
- /etc/hosts is the host's plus the job's SageMaker host name (resourceconfig.json's
  `current_host`), which the SageMaker toolkit waits to resolve before it trains.
Nothing else of the host changes for the trainer, and nothing of this shows on the host.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
from collections.abc import Iterator

from trainqd.monitor import libc, mounts
from trainqd.monitor.records import Credentials, FileChannel

SAGEMAKER_ROOT = "/opt/ml"
HOSTS = "/etc/hosts"
LOOPBACK = "127.0.0.1"


RESOURCE_CONFIG = "input/config/resourceconfig.json"
DEFAULT_HOST = "algo-1"
NO_OPT_ML = (
    f"there is no {SAGEMAKER_ROOT} (the ml root is in SAGEMAKER_BASE_DIR) and SageMaker's "
    "host name does not resolve"
)


def without_namespace(why: ViewUnavailable, readonly: list[FileChannel]) -> str:
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


def make_job_view(
    owner: Credentials,
    readonly: list[FileChannel],
    ml_root: str,
    current_host: str,
    *,
    unprivileged: bool = False,
    peers: dict[str, str] | None = None,
) -> list[str]:
    """Move this process into a mount namespace of its own where the source of each of
    `readonly`, as `owner` opens it, is read-only, `ml_root` is at /opt/ml and
    `current_host` resolves to the loopback address.
    Children inherit the namespace; the host's mounts are unchanged.

    `unprivileged`: a monitor that is not root makes the mount namespace inside a user
    namespace of its own, where its uid and gid map to themselves (so files keep their
    owners as far as the job can tell, and its trainer gains no capability). /opt/ml must
    then exist already: only root can make it on the host. `peers`: a node of a job of
    several nodes, every node's host name and address (its own among them).

    Raises ViewUnavailable when no namespace can be made. What cannot be done (a source
    the owner cannot open now, no /opt/ml to mount on) does not stop the rest; the returned
    list holds one line for each, in words fit for the owner (who reads monitor.log): what
    the owner's own open said, never what root could see.
    """
    _enter_private_namespace(unprivileged)
    problems = _bind_readonly(owner, readonly) if readonly else []
    try:
        _bind_hosts(current_host, peers or {})
        scratch_left = True
    except OSError as exc:
        problems.append(f"{current_host} does not resolve: {HOSTS}: {exc.strerror}")
        scratch_left = False
    try:
        _bind_ml_root(ml_root)
    except OSError as exc:
        problems.append(f"no {SAGEMAKER_ROOT}: {exc.filename or ml_root}: {exc.strerror}")
        if scratch_left:  # /opt/ml is then the host's empty directory, as it was
            with contextlib.suppress(OSError):
                libc.umount(SAGEMAKER_ROOT, libc.MNT_DETACH)
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


@contextlib.contextmanager
def _scratch(keep: bool = False) -> Iterator[str]:
    """A small tmpfs of root's, mounted for a moment on /opt/ml (a directory that is there
    anyway): binds made from what is in it outlive it once it is detached, and nothing is
    written to any disk or to a directory the job's owner controls.

    `keep`: left mounted once what is in it is bound, for the ml root's bind to cover it
    (make_job_view): an unmount waits out an RCU grace period (5-12 ms on a busy machine),
    and the namespace's end removes it with the rest. Mode 0700, root's, nosuid, nodev,
    noexec, and under the ml root: the job cannot reach it, nor uncover it without
    CAP_SYS_ADMIN over the namespace."""
    _ensure_mountpoint()
    flags = libc.MS_NOSUID | libc.MS_NODEV | libc.MS_NOEXEC
    libc.mount("tmpfs", SAGEMAKER_ROOT, flags, "tmpfs", "size=1m,mode=0700")
    kept = False
    try:
        yield SAGEMAKER_ROOT
        kept = keep
    finally:
        if not kept:
            libc.umount(SAGEMAKER_ROOT, libc.MNT_DETACH)


def _bind_hosts(current_host: str, peers: dict[str, str]) -> None:
    """Bind a copy of the host's /etc/hosts plus `current_host` (or every node of the job,
    `peers`) over /etc/hosts."""
    with open(HOSTS, "rb") as f:
        text = f.read()
    if text and not text.endswith(b"\n"):
        text += b"\n"
    names = peers or {current_host: LOOPBACK}
    text += "".join(f"{address}\t{name}\n" for name, address in names.items()).encode()
    with _scratch(keep=True) as scratch:
        copy = os.path.join(scratch, "hosts")
        fd = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, text)
        finally:
            os.close(fd)
        os.chmod(copy, 0o644)
        libc.mount(copy, HOSTS, libc.MS_BIND)


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


def _bind_readonly(owner: Credentials, channels: list[FileChannel]) -> list[str]:
    """Make each channel's source read-only in this namespace; one line for each that
    cannot be.

    The sources are opened by a child running as the owner, here, inside the namespace (a
    bind needs its source and target in the caller's namespace). Each is first bound,
    read-only, nosuid and nodev, into root's scratch tmpfs from its descriptor (as a
    container's channel is staged), then that bind is bound onto the descriptor itself:
    both binds go through /proc/self/fd, never through a path the owner could change."""
    try:
        opened = mounts.open_as_owner(owner, channels)
    except mounts.StagingFailed as exc:
        return [f"no read-only view of the data (it stays writable): {exc}"]
    problems = []
    try:
        with _scratch() as scratch:
            for i, (channel, (fd, problem)) in enumerate(zip(channels, opened, strict=True)):
                if fd is None:
                    problems.append(f"cannot make {channel.source} read-only: it {problem}")
                    continue
                try:
                    _bind_onto_itself(fd, os.path.join(scratch, str(i)))
                except OSError as exc:
                    problems.append(f"cannot make {channel.source} read-only: {exc.strerror}")
    except OSError as exc:
        problems.append(f"no read-only view of the data (it stays writable): {exc.strerror}")
    finally:
        for fd, _ in opened:
            if fd is not None:
                os.close(fd)
    return problems


def _bind_onto_itself(fd: int, staged: str) -> None:
    if stat.S_ISDIR(os.fstat(fd).st_mode):
        os.mkdir(staged, 0o700)
    else:
        os.close(os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
    mounts.bind(fd, staged, read_only=True)
    # A bind keeps the flags of the mount it is made from: read-only, nosuid, nodev.
    libc.mount(staged, f"/proc/self/fd/{fd}", libc.MS_BIND)
