"""Becoming a job's owner: the one way the monitor and its children drop root's rights.

Below both privileges.py (the trainer's view of the host) and mounts.py (the engine's
binds), which each need it and one of which uses the other.
"""

from __future__ import annotations

import os


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
