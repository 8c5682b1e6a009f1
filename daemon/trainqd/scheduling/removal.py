"""Removing an ended job: its directory (logs, ml root, checkpoints) and its rows
(`trainq rm`, and the retention purge of retention.py).

A job's directory holds files its owner wrote and may still be changing: a hostile owner can
plant symlinks to other users' or root's files, swap a directory for a link while the removal
runs, or (root alone, or a mount trainqd did not make) have something mounted inside. So the
tree is removed as root with descriptors alone: every directory is opened relative to its
parent's descriptor with O_NOFOLLOW, checked to be the very directory that was looked at,
emptied through that descriptor, and removed by name from its parent's; a symlink is unlinked,
never followed; a directory on another filesystem, or a mount point, stops the removal before
anything is removed. The walk is blocking I/O of unbounded size, so it runs on a worker thread.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from pathlib import Path

import anyio
import anyio.to_thread

from trainq.core.errors import Conflict
from trainq.core.states import TERMINAL
from trainqd.store import JobRow, Store

# Deeper trees are refused rather than walked: each level holds a descriptor and a frame.
MAX_DEPTH = 256
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
MOUNTINFO = "/proc/self/mountinfo"


class RemovalError(Exception):
    """The directory was left (in part): the message says why, in one line."""


def _unescape(field: str) -> str:
    # mountinfo writes space, tab, newline and backslash as octal escapes (\\040).
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), field)


def mount_points_under(path: Path, mountinfo: str = MOUNTINFO) -> list[str]:
    """Mount points at or below `path` in this process's mount namespace (a bind mount of
    the same filesystem has the same st_dev, so the device check alone would miss it)."""
    top = os.path.realpath(path)
    found = []
    with open(mountinfo, encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            fields = line.split(" ")
            if len(fields) > 4:
                point = _unescape(fields[4])
                if point == top or point.startswith(top + "/"):
                    found.append(point)
    return found


def _remove(parent: int, name: str, device: int, depth: int, where: str) -> int:
    """Remove `name` in the directory `parent` (a descriptor); the number of entries gone."""
    try:
        seen = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return 0
    if not stat.S_ISDIR(seen.st_mode):
        try:
            os.unlink(name, dir_fd=parent)  # a symlink goes, its target stays
        except FileNotFoundError:
            return 0
        return 1
    path = f"{where}/{name}"
    if seen.st_dev != device:
        raise RemovalError(f"{path} is on another filesystem (a mount point); unmount it first")
    if depth >= MAX_DEPTH:
        raise RemovalError(f"{where} is nested more than {MAX_DEPTH} directories deep")
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
    except OSError as exc:  # swapped for a symlink (ELOOP) or a file (ENOTDIR) meanwhile
        raise RemovalError(f"{path} changed while it was being removed: {exc.strerror}") from None
    removed = 0
    try:
        opened = os.fstat(fd)
        if (opened.st_dev, opened.st_ino) != (seen.st_dev, seen.st_ino):
            raise RemovalError(f"{path} was replaced while it was being removed")
        with os.scandir(fd) as entries:
            names = [entry.name for entry in entries]
        for child in names:
            removed += _remove(fd, child, device, depth + 1, path)
    finally:
        os.close(fd)
    try:
        os.rmdir(name, dir_fd=parent)
    except FileNotFoundError:
        return removed
    except OSError as exc:
        if exc.errno == errno.ENOTEMPTY:
            raise RemovalError(f"files were added to {path} while it was being removed") from None
        raise RemovalError(f"{path}: {exc.strerror}") from None
    return removed + 1


def remove_job_dir(jobs_dir: Path, job_id: int) -> int:
    """Remove `<jobs_dir>/<job_id>` without following a link or crossing a mount; the number
    of files and directories removed (0: there was none). Blocking: run it on a thread."""
    job_dir = jobs_dir / str(job_id)
    mounts = mount_points_under(job_dir) if os.path.lexists(job_dir) else []
    if mounts:
        raise RemovalError(f"{mounts[0]} is a mount point; unmount it first")
    try:
        top = os.open(jobs_dir, _DIR_FLAGS)
    except FileNotFoundError:
        return 0
    try:
        return _remove(top, str(job_id), os.fstat(top).st_dev, 0, str(jobs_dir))
    except OSError as exc:
        raise RemovalError(f"{exc.filename or job_dir}: {exc.strerror}") from None
    finally:
        os.close(top)


class Removal:
    """Removes ended jobs, never the same job twice at once, and one job of each owner at a
    time (a walk competes with the event loop for the interpreter). Each owner waits on
    their own walks alone: a user whose directory holds millions of files, or keeps
    growing while it is removed, delays nobody else's `trainq rm`."""

    def __init__(self, store: Store, jobs_dir: Path) -> None:
        self._store = store
        self._jobs_dir = jobs_dir
        self._owners: dict[int, anyio.CapacityLimiter] = {}  # by uid, while in use
        self._busy: set[int] = set()

    async def remove(self, job: JobRow) -> int:
        """Delete an ended job's directory, then its rows; the entries removed from disk.
        Conflict (one line) if it has not ended, or if its directory could not be removed
        safely (its rows then stay, so that it can be tried again)."""
        if job.state not in TERMINAL:
            raise Conflict(
                f"job {job.id} is {job.state}; only an ended job can be removed "
                f"(`trainq stop {job.id}` first)"
            )
        if job.id in self._busy:
            raise Conflict(f"job {job.id} is being removed already")
        uid = job.owner.uid
        limiter = self._owners.setdefault(uid, anyio.CapacityLimiter(1))
        self._busy.add(job.id)
        try:
            try:
                removed = await anyio.to_thread.run_sync(
                    remove_job_dir, self._jobs_dir, job.id, limiter=limiter
                )
            except RemovalError as exc:
                raise Conflict(f"job {job.id} was not removed: {exc}") from None
            self._store.delete_ended(job.id)
        finally:
            self._busy.discard(job.id)
            stats = limiter.statistics()
            if not stats.borrowed_tokens and not stats.tasks_waiting:
                self._owners.pop(uid, None)
        return removed
