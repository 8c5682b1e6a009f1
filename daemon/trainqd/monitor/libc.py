"""The few kernel calls the monitor needs that Python 3.11's standard library lacks.

prctl(PR_SET_CHILD_SUBREAPER), unshare(CLONE_NEWNS), mount(2), umount2(2) and
mount_setattr(2), through ctypes on the C library the interpreter already has loaded. Each
failure raises OSError with the errno, as the os module's own calls do.
"""

from __future__ import annotations

import ctypes
import errno
import os

PR_SET_CHILD_SUBREAPER = 36
CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000

MS_RDONLY = 0x1
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
MS_SLAVE = 1 << 19
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MNT_DETACH = 0x2

AT_FDCWD = -100
AT_RECURSIVE = 0x8000
MOUNT_ATTR_RDONLY = 0x1
# mount_setattr(2) has the same number on every architecture with the generic table;
# elsewhere the caller falls back to a plain remount.
_MOUNT_SETATTR = {"x86_64": 442, "aarch64": 442}

_libc = ctypes.CDLL(None, use_errno=True)
_libc.prctl.argtypes = [
    ctypes.c_int,
    ctypes.c_ulong,
    ctypes.c_ulong,
    ctypes.c_ulong,
    ctypes.c_ulong,
]
_libc.unshare.argtypes = [ctypes.c_int]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
_libc.mount.argtypes = [
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_ulong,
    ctypes.c_void_p,
]


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


def _check(result: int, path: str | None = None) -> None:
    if result == -1:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)


def set_child_subreaper() -> None:
    """Orphans below this process are reparented to it, not to init."""
    _check(_libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0))


def unshare(flags: int) -> None:
    _check(_libc.unshare(flags))


def mount(
    source: str | None,
    target: str,
    flags: int,
    fstype: str | None = None,
    data: str | None = None,
) -> None:
    _check(
        _libc.mount(
            None if source is None else os.fsencode(source),
            os.fsencode(target),
            None if fstype is None else fstype.encode(),
            flags,
            None if data is None else ctypes.c_char_p(data.encode()),
        ),
        target,
    )


def umount(target: str, flags: int = 0) -> None:
    _check(_libc.umount2(os.fsencode(target), flags), target)


def set_readonly_recursive(path: str) -> None:
    """Make the mount at `path` and every mount below it read-only, leaving their other
    flags (nosuid, nodev, noexec) alone. ENOSYS where the kernel or machine lacks it."""
    set_attributes_recursive(path, MOUNT_ATTR_RDONLY)


MOUNT_ATTR_NOSUID = 0x2
MOUNT_ATTR_NODEV = 0x4


def set_attributes_recursive(path: str, attributes: int) -> None:
    """Set MOUNT_ATTR_* `attributes` on the mount at `path` and every mount below it,
    leaving the others alone. ENOSYS where the kernel or machine lacks mount_setattr(2)."""
    number = _MOUNT_SETATTR.get(os.uname().machine)
    if number is None:
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS), path)
    attr = _MountAttr(attr_set=attributes)
    _check(
        _libc.syscall(
            ctypes.c_long(number),
            ctypes.c_int(AT_FDCWD),
            ctypes.c_char_p(os.fsencode(path)),
            ctypes.c_uint(AT_RECURSIVE),
            ctypes.byref(attr),
            ctypes.c_size_t(ctypes.sizeof(attr)),
        ),
        path,
    )
