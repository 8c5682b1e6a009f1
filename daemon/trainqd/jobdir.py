"""Where a job's files live on the host, and who owns them.

    <state>/jobs/<id>/                   trainqd's (0755)
    <state>/jobs/<id>/ml/                the ml root: the owner's (0750), laid out by the monitor
    <state>/jobs/<id>/attempts/          trainqd's (0755)
    <state>/jobs/<id>/attempts/<n>/      the monitor's: the owner's for a subprocess job; root's
                                         with the owner's group for a container job (0750):
                                         stdout, stderr, monitor.log, monitor.json, exit.json,
                                         env (a container's --env-file)
    <state>/jobs/<id>/attempts/<n>.stop  trainqd's stop request to that monitor

trainqd only ever creates directories here, each inside one of its own, and hands them over
with chown before anyone else can write to them; it never writes inside a directory a job's
owner controls (the monitor does that, as the owner).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


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

    def ensure_root(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True, mode=0o755)

    def _mkdir(self, path: Path, mode: int, uid: int | None, gid: int | None) -> None:
        try:
            os.mkdir(path, mode)
        except FileExistsError:
            if path.is_symlink() or not path.is_dir():
                raise RuntimeError(f"{path} exists and is not a directory") from None
            return
        os.chmod(path, mode)  # mkdir's mode is filtered by the umask
        if self._as_root and uid is not None:
            os.chown(path, uid, -1 if gid is None else gid)

    def create_attempt(
        self, job_id: int, number: int, owner_uid: int, owner_gid: int, monitor_is_owner: bool
    ) -> AttemptPaths:
        job_dir = self.job_dir(job_id)
        self._mkdir(job_dir, 0o755, None, None)
        self._mkdir(job_dir / "ml", 0o750, owner_uid, owner_gid)
        self._mkdir(job_dir / "attempts", 0o755, None, None)
        attempt = self.attempt_dir(job_id, number)
        if attempt.exists():
            # A launch that died before its monitor ran leaves the directory: start clean.
            _discard(attempt)
        self._mkdir(attempt, 0o750, owner_uid if monitor_is_owner else 0, owner_gid)
        return AttemptPaths(job_dir, job_dir / "ml", attempt, self.stop_file(job_id, number))


def _discard(path: Path) -> None:
    graveyard = path.with_name(f".{path.name}.discarded-{os.getpid()}-{id(path)}")
    os.rename(path, graveyard)
