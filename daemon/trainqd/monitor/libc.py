"""The few kernel calls the monitor needs that Python 3.11's standard library lacks.

prctl(PR_SET_CHILD_SUBREAPER), unshare(CLONE_NEWNS), mount(2) and umount2(2), through
ctypes on the C library the interpreter already has loaded. Each failure raises OSError
with the errno, as the os module's own calls do.
"""

from __future__ import annotations

import ctypes
import os

PR_SET_CHILD_SUBREAPER = 36
CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
CLONE_NEWUTS = 0x04000000

MS_RDONLY = 0x1
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
MS_SLAVE = 1 << 19
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MNT_DETACH = 0x2

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
