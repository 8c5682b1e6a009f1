"""Turn a job and its GPU assignment into the Launch its monitor runs (DESIGN §2, §5)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from trainqd import contract, engine
from trainqd.contract import CONTAINER_BASE, Assignment
from trainqd.identity import Account
from trainqd.image_policy import check_image
from trainqd.jobdir import AttemptPaths
from trainqd.monitor import mounts
from trainqd.monitor.records import (
    ContainerLaunch,
    Credentials,
    FileChannel,
    Launch,
    PipeChannel,
)
from trainqd.store import JobRow

FILE_MODES = ("File", "FastFile")


@dataclass(frozen=True)
class LaunchSettings:
    default_stop_grace_seconds: float
    default_engine: engine.EngineName | None
    real_gpus: bool  # GPUs come from NVML (devices to pass to containers), not simulated
    instance: str  # this trainqd's state, in its containers' names
    # The administrator's: capabilities a container keeps, images a user may run.
    container_capabilities: tuple[str, ...] = ()
    allowed_images: tuple[str, ...] = ("*",)


def remaining_runtime(job: JobRow) -> float | None:
    """Seconds the time limit still allows: it counts every attempt's running time."""
    limit = job.spec.max_runtime_seconds
    return None if limit is None else limit - job.runtime_used


def _pipe_channels(job: JobRow) -> list[PipeChannel]:
    return [
        PipeChannel(
            name=name,
            source=ch.source,
            record_wrapper=ch.record_wrapper,
            compression=ch.compression,
            shuffle_seed=ch.shuffle_seed,
            epochs=ch.epochs,
        )
        for name, ch in job.spec.channels.items()
        if ch.mode == "Pipe"
    ]


def _file_channels(job: JobRow, view: str) -> list[FileChannel]:
    return [
        FileChannel(
            name=name,
            source=ch.source,
            source_is_dir=os.path.isdir(ch.source),
            view=view,  # type: ignore[arg-type]
        )
        for name, ch in job.spec.channels.items()
        if ch.mode in FILE_MODES
    ]


def _write_env_file(path: str, env: dict[str, str]) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(engine.env_file_text(env))


@dataclass(frozen=True)
class Attempt:
    """One attempt about to start: the job, its number, where it runs and as whom."""

    job: JobRow
    number: int
    gpus: Assignment
    account: Account
    paths: AttemptPaths
    settings: LaunchSettings


def build_launch(at: Attempt, now: float | None = None) -> Launch:
    job, attempt, gpus, account, paths, settings = (
        at.job, at.number, at.gpus, at.account, at.paths, at.settings
    )  # fmt: skip
    spec = job.spec
    now = time.time() if now is None else now
    remaining = remaining_runtime(job)
    grace = (
        spec.stop_grace_seconds
        if spec.stop_grace_seconds is not None
        else settings.default_stop_grace_seconds
    )
    ml_root = str(paths.ml_root)
    common = {
        "job_id": job.id,
        "attempt": attempt,
        "owner": Credentials(
            uid=account.uid,
            gid=account.gid,
            groups=list(account.groups),
            user=account.user,
            home=account.home,
        ),
        "ml_root": ml_root,
        "attempt_dir": str(paths.attempt_dir),
        "stop_file": str(paths.stop_file),
        "stop_grace_seconds": grace,
        "deadline": None if remaining is None else now + max(0.0, remaining),
        "pipe_channels": _pipe_channels(job),
        "ml_files": contract.config_files(spec),
    }
    if spec.image is None:
        env = contract.login_environment(account.user, account.home, account.shell, None)
        env.update(
            contract.trainer_environment(
                spec=spec,
                job_id=job.id,
                name=job.display_name,
                owner_uid=job.owner.uid,
                attempt=attempt,
                base=ml_root,
                gpus=gpus,
                host_ml_root=ml_root,
            )
        )
        assert spec.command is not None
        sources = [ch.source for ch in spec.channels.values() if ch.mode in FILE_MODES]
        return Launch(
            runtime="subprocess",
            argv=list(spec.command),
            env=env,
            cwd=spec.working_dir or ml_root,
            readonly_paths=sources if os.geteuid() == 0 else [],
            file_channels=_file_channels(job, "link"),
            **common,  # type: ignore[arg-type]
        )
    return _container_launch(at, common)


def _container_launch(at: Attempt, common: dict[str, object]) -> Launch:
    job, attempt, gpus, account, paths, settings = (
        at.job, at.number, at.gpus, at.account, at.paths, at.settings
    )  # fmt: skip
    spec = job.spec
    assert spec.image is not None
    eng = engine.find_engine(spec.engine, settings.default_engine)
    passed = Assignment(gpus.indices, gpus.uuids, renumbered=settings.real_gpus)
    env = contract.trainer_environment(
        spec=spec,
        job_id=job.id,
        name=job.display_name,
        owner_uid=job.owner.uid,
        attempt=attempt,
        base=CONTAINER_BASE,
        gpus=passed,
        host_ml_root=str(paths.ml_root),
    )
    # Settled again at the start: the configuration may have changed since the submit.
    check_image(spec.image, settings.allowed_images)
    # No value on the engine's command line (engine.py says why and how).
    in_file, from_client = engine.split_environment(env)
    env_file = str(paths.attempt_dir / "env")
    _write_env_file(env_file, in_file)
    # A root trainqd's engine mounts the binds that the monitor makes (monitor/mounts.py).
    staged = os.geteuid() == 0
    attempt_dir = str(paths.attempt_dir)
    ml_source = mounts.ml_root_source(attempt_dir) if staged else str(paths.ml_root)
    binds = [engine.Mount(ml_source, CONTAINER_BASE, read_only=False)]
    for name, ch in spec.channels.items():
        if ch.mode not in FILE_MODES:
            continue
        target = f"{CONTAINER_BASE}/input/data/{name}"
        if not os.path.isdir(ch.source):
            target += "/" + os.path.basename(ch.source.rstrip("/"))
        source = mounts.channel_source(attempt_dir, name) if staged else ch.source
        binds.append(engine.Mount(source, target, read_only=True))
    name = engine.container_name(settings.instance, job.id, attempt)
    argv = engine.run_argv(
        eng,
        image=spec.image,
        name=name,
        instance=settings.instance,
        job_id=job.id,
        attempt=attempt,
        owner_uid=job.owner.uid,
        user=None if spec.run_as_root else (account.uid, account.gid),
        groups=account.groups,
        env_file=env_file,
        mounts=binds,
        network=spec.network,
        gpu_uuids=gpus.uuids,
        real_gpus=settings.real_gpus,
        capabilities=settings.container_capabilities,
        passed_env=list(from_client),
    )
    return Launch(
        runtime="container",
        argv=argv,
        env=engine.client_environment(dict(os.environ), from_client),
        cwd="/",
        container=ContainerLaunch(engine=eng.name, engine_path=eng.path, name=name),
        file_channels=_file_channels(job, "mountpoint"),
        **common,  # type: ignore[arg-type]
    )
