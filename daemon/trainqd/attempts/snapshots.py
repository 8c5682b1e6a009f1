"""The trainer's source directory as it was at submit (`--snapshot`, the spec's `snapshot`).

A subprocess job whose spec names a source (`source_dir`, or a host path in the
`sagemaker_submit_directory` hyperparameter) gets a copy of it at submit, unless the spec
says `snapshot = false`. The copy is made by `snapshot_child.py` running as the submitter
(the kernel judges what they may read; links out of the source and oversized trees are
refused in one line) into a staging directory of theirs under `<jobs>/.staging`, which is
trainqd's; once the job is committed, the staging directory becomes `<job>/code`. At launch
the job runs the copy: its working directory, command arguments and submit directory that
named the source name the copy instead (`run_spec`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import uuid
from dataclasses import replace
from pathlib import Path

import anyio

from trainq.core.errors import InvalidSpec
from trainq.core.spec import JobSpec
from trainqd.access.identity import Account
from trainqd.attempts.contract import CONTAINER_BASE
from trainqd.attempts.jobdir import JobDirs
from trainqd.children import child_failure, module_child
from trainqd.config import Config
from trainqd.store.rows import JobRow

SUBMIT_DIRECTORY = "sagemaker_submit_directory"

CODE = "code"
_CHILD = module_child("attempts.snapshot_child")


def source_of(spec: JobSpec) -> str | None:
    """The directory to copy, or None: no source, snapshot off, or a container job (its code
    is its image's)."""
    if spec.snapshot is False or spec.image is not None:
        return None
    if spec.source_dir is not None:
        return spec.source_dir
    raw = spec.hyperparameters.get(SUBMIT_DIRECTORY)
    if raw is None:
        return None
    try:
        value = json.loads(raw)  # the SageMaker SDK's hyperparameters are JSON
    except (ValueError, RecursionError):
        value = raw
    if not isinstance(value, str) or not value.startswith("/"):
        return None  # an S3 URI or a relative name: nothing of the host's to copy
    # The contract's own paths name the job's ml root from inside it, not a host directory.
    return None if value == CONTAINER_BASE or value.startswith(CONTAINER_BASE + "/") else value


def _moved(value: str, source: str, code: str) -> str:
    if value == source:
        return code
    if value.startswith(source.rstrip("/") + "/"):
        return code + value[len(source.rstrip("/")) :]
    return value


def run_spec(spec: JobSpec, code_dir: Path) -> JobSpec:
    """The spec as the job runs it: whatever named the source names the copy."""
    source = source_of(spec)
    if source is None:
        return spec
    code = str(code_dir)
    changes: dict[str, object] = {}
    if spec.working_dir is not None:
        changes["working_dir"] = _moved(spec.working_dir, source, code)
    if spec.command is not None:
        changes["command"] = [_moved(arg, source, code) for arg in spec.command]
    if SUBMIT_DIRECTORY in spec.hyperparameters:
        changes["hyperparameters"] = {**spec.hyperparameters, SUBMIT_DIRECTORY: json.dumps(code)}
    return spec.model_copy(update=changes)


def as_run(job: JobRow, dirs: JobDirs) -> JobRow:
    """The job with the spec it runs, where its snapshot exists."""
    code_dir = dirs.job_dir(job.id) / CODE
    if source_of(job.spec) is None or not code_dir.is_dir():
        return job
    return replace(job, spec=run_spec(job.spec, code_dir))


class Snapshots:
    def __init__(self, dirs: JobDirs, config: Config) -> None:
        self._dirs = dirs
        self._staging = dirs.root / ".staging"
        self._max_bytes = config.snapshot_max_bytes
        self._max_files = config.snapshot_max_files

    async def take(self, spec: JobSpec, acct: Account) -> Path | None:
        """Copy the spec's source as `acct`; the staging directory holding the copy (in
        `code`), or None when the spec has no snapshot. InvalidSpec in one line if refused."""
        source = source_of(spec)
        if source is None:
            if spec.snapshot:
                raise InvalidSpec(
                    "snapshot: there is no source to copy (set source_dir, or the "
                    f"{SUBMIT_DIRECTORY} hyperparameter, of a subprocess job)"
                )
            return None
        self._staging.mkdir(mode=0o711, exist_ok=True)
        staging = self._staging / uuid.uuid4().hex
        staging.mkdir(mode=0o700)
        if os.geteuid() == 0:
            os.chown(staging, acct.uid, acct.gid)
        request = {
            "uid": acct.uid,
            "gid": acct.gid,
            "groups": list(acct.groups),
            "source": source,
            "dest": str(staging / CODE),
            "max_bytes": self._max_bytes,
            "max_files": self._max_files,
        }
        try:
            answer = await self._copy(request, staging)
        except BaseException:
            self.discard(staging)
            raise
        if "error" in answer:
            self.discard(staging)
            raise InvalidSpec(f"snapshot: {answer['error']}")
        return staging

    async def _copy(self, request: dict[str, object], staging: Path) -> dict[str, object]:
        done = await anyio.run_process(
            _CHILD,
            input=json.dumps(request).encode(),
            env={"LANG": "C.UTF-8"},
            cwd="/",
            check=False,
        )
        if done.returncode != 0:
            raise child_failure(done, "copy the job's source as its submitter")
        answer: dict[str, object] = json.loads(done.stdout)
        return answer

    def place(self, staging: Path, job_id: int) -> None:
        """The committed job's snapshot, in its directory (`<job>/code`)."""
        job_dir = self._dirs.job_dir(job_id)
        job_dir.mkdir(mode=0o755, exist_ok=True)
        os.rename(staging / CODE, job_dir / CODE)
        os.rmdir(staging)

    def discard(self, staging: Path) -> None:
        with contextlib.suppress(OSError):
            shutil.rmtree(staging)
