"""Where a job's files live on the host, and who owns them.

    <state>/jobs/<id>/                   trainqd's (0755)
    <state>/jobs/<id>/ml/                the ml root: the owner's (0700), laid out by the monitor
    <state>/jobs/<id>/attempts/          trainqd's (0755)
    <state>/jobs/<id>/attempts/<n>/      the monitor's: the owner's for a subprocess job (0700);
                                         root's for a container job (0700, and readable by the
                                         owner through an ACL where the filesystem has them):
                                         stdout, stderr, monitor.log, exit.json,
                                         env (a container's --env-file)
    <state>/jobs/<id>/attempts/<n>.stop  trainqd's stop request to that monitor
    <state>/jobs/<id>/attempts/<n>.monitor  that monitor's pid, written before it drops to
                                         the owner (the only place a later trainqd takes it)
    <state>/jobs/<id>/attempts/<n>.slurm  the Slurm job trainqd handed that attempt to
                                         (backend = "slurm"; a later trainqd follows it)
    <state>/jobs/<id>/attempts/<n>.loopback  the loopback block a personal trainqd gave that
                                         attempt of a job of several nodes (loopback.py)
A job of several nodes (trainqd.attempts.nodes) has, besides, one ml root per node and one
directory per node in each attempt; its attempt directory is root's (its monitor is):
    <state>/jobs/<id>/nodes/             trainqd's (0755)
    <state>/jobs/<id>/nodes/<host>/      that node's ml root: the owner's (0700)
    <state>/jobs/<id>/attempts/<n>/nodes/         trainqd's (0755)
    <state>/jobs/<id>/attempts/<n>/nodes/<host>/  that node's stdout, stderr, exit.json:
                                         the owner's (0700)

trainqd only ever creates directories here, each inside one of its own, and hands them over
with chown before anyone else can write to them; it never writes inside a directory a job's
owner controls (the monitor does that, as the owner).

A job's files are its owner's alone (and root's): users often share a primary group, so no
directory of a job grants its group anything, and whatever the trainer creates inside, with
whatever umask, stays out of other users' reach.
"""

from __future__ import annotations

import contextlib
import errno
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import structlog

from trainqd.monitor.records import monitor_info_path

log = structlog.get_logger("trainqd.jobdir")

# The kernel's binary form of a POSIX access ACL (linux/posix_acl_xattr.h): a version, then
# (tag, permissions, id) entries sorted by tag.
_ACL_XATTR = "system.posix_acl_access"
_ACL_VERSION = 2
_ACL_USER_OBJ, _ACL_USER, _ACL_GROUP_OBJ, _ACL_MASK, _ACL_OTHER = 0x01, 0x02, 0x04, 0x10, 0x20
_ACL_UNDEFINED_ID = 0xFFFFFFFF
_RWX, _RX, _NONE = 7, 5, 0


@dataclass(frozen=True)
class AttemptPaths:
    job_dir: Path
    ml_root: Path
    attempt_dir: Path
    stop_file: Path


class JobDirs:
    def __init__(self, jobs_dir: Path) -> None:
        self.root = jobs_dir
        self._as_root = os.geteuid() == 0

    def job_dir(self, job_id: int) -> Path:
        return self.root / str(job_id)

    def ml_root(self, job_id: int) -> Path:
        return self.job_dir(job_id) / "ml"

    def attempt_dir(self, job_id: int, number: int) -> Path:
        return self.job_dir(job_id) / "attempts" / str(number)

    def stop_file(self, job_id: int, number: int) -> Path:
        return self.job_dir(job_id) / "attempts" / f"{number}.stop"

    def monitor_info_file(self, job_id: int, number: int) -> Path:
        return Path(monitor_info_path(str(self.job_dir(job_id) / "attempts"), number))

    def slurm_record_file(self, job_id: int, number: int) -> Path:
        return self.job_dir(job_id) / "attempts" / f"{number}.slurm"

    def loopback_file(self, job_id: int, number: int) -> Path:
        return self.job_dir(job_id) / "attempts" / f"{number}.loopback"

    def ensure_root(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True, mode=0o755)

    def _mkdir(self, path: Path, mode: int, uid: int | None, gid: int | None) -> None:
        try:
            os.mkdir(path, mode)
        except FileExistsError:
            if path.is_symlink() or not path.is_dir():
                raise RuntimeError(f"{path} exists and is not a directory") from None
            # Made by an older trainqd with looser modes: tightened. (Safe to follow: every
            # directory here sits in one of trainqd's own, which no owner can rename into.)
            if self._as_root and os.stat(path).st_mode & 0o777 != mode:
                os.chmod(path, mode)
            return
        os.chmod(path, mode)  # mkdir's mode is filtered by the umask
        if self._as_root and uid is not None:
            os.chown(path, uid, -1 if gid is None else gid)

    def node_ml_root(self, job_id: int, node: str) -> Path:
        return self.job_dir(job_id) / "nodes" / node

    def create_nodes(
        self,
        paths: AttemptPaths,
        nodes: list[str],
        owner_uid: int,
        owner_gid: int,
        monitor_is_owner: bool = True,
    ) -> None:
        """Each node's ml root and attempt directory, in directories of trainqd's own (the
        attempt directory of a job of several nodes is root's: create_attempt); a container
        node's attempt directory is root's too, as a container job's is."""
        self._mkdir(paths.job_dir / "nodes", 0o755, None, None)
        self._mkdir(paths.attempt_dir / "nodes", 0o755, None, None)
        for node in nodes:
            self._mkdir(paths.job_dir / "nodes" / node, 0o700, owner_uid, owner_gid)
            where = paths.attempt_dir / "nodes" / node
            if monitor_is_owner:
                self._mkdir(where, 0o700, owner_uid, owner_gid)
            else:
                self._mkdir(where, 0o700, 0, 0)
                if self._as_root:
                    self._let_owner_read(where, owner_uid)

    def create_attempt(
        self, job_id: int, number: int, owner_uid: int, owner_gid: int, monitor_is_owner: bool
    ) -> AttemptPaths:
        job_dir = self.job_dir(job_id)
        self._mkdir(job_dir, 0o755, None, None)
        self._mkdir(job_dir / "ml", 0o700, owner_uid, owner_gid)
        self._mkdir(job_dir / "attempts", 0o755, None, None)
        attempt = self.attempt_dir(job_id, number)
        if attempt.exists():
            # A launch that died before its monitor ran leaves the directory: start clean.
            _discard(attempt)
        with contextlib.suppress(FileNotFoundError):  # nor name an earlier monitor
            os.unlink(self.monitor_info_file(job_id, number))
        if monitor_is_owner:
            self._mkdir(attempt, 0o700, owner_uid, owner_gid)
        else:
            # A root monitor writes here (the container's env file among others), so the
            # directory stays root's; its owner may still read their logs where they are.
            self._mkdir(attempt, 0o700, 0, 0)
            if self._as_root:
                self._let_owner_read(attempt, owner_uid)
        return AttemptPaths(job_dir, job_dir / "ml", attempt, self.stop_file(job_id, number))

    def _let_owner_read(self, path: Path, uid: int) -> None:
        entries = (
            (_ACL_USER_OBJ, _RWX, _ACL_UNDEFINED_ID),
            (_ACL_USER, _RX, uid),
            (_ACL_GROUP_OBJ, _NONE, _ACL_UNDEFINED_ID),
            (_ACL_MASK, _RX, _ACL_UNDEFINED_ID),
            (_ACL_OTHER, _NONE, _ACL_UNDEFINED_ID),
        )
        acl = struct.pack("<I", _ACL_VERSION) + b"".join(
            struct.pack("<HHI", tag, perm, ident) for tag, perm, ident in entries
        )
        try:
            os.setxattr(path, _ACL_XATTR, acl, follow_symlinks=False)
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.ENOTSUP):
                raise
            # Without ACLs the owner reads a container job's logs through `trainq logs` only.
            log.info("no ACLs on the state dir's filesystem: attempt dirs are root's alone")


def _discard(path: Path) -> None:
    graveyard = path.with_name(f".{path.name}.discarded-{os.getpid()}-{id(path)}")
    os.rename(path, graveyard)
