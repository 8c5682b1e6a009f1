"""Turn a job and its GPU assignment into the Launch its monitor runs (docs/architecture.md)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from trainqd.access.identity import Account
from trainqd.access.image_policy import check_image
from trainqd.attempts import contract, engine
from trainqd.attempts.contract import CONTAINER_BASE, Assignment
from trainqd.attempts.jobdir import AttemptPaths
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
    max_processes: int = 0  # per user (config.max_processes_per_user); 0: no cap of ours


def stop_grace(job: JobRow, default: float) -> float:
    """Seconds a stopped trainer gets between SIGTERM and SIGKILL: the job's own, else the
    daemon's default. The one place this is decided; the planner also counts it as time the
    job may still hold its GPUs."""
    own = job.spec.stop_grace_seconds
    return default if own is None else own


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


def _file_channels(
    job: JobRow, view: Literal["link", "mountpoint"], host: HostFacts
) -> list[FileChannel]:
    return [
        FileChannel(
            name=name,
            source=ch.source,
            source_is_dir=None if host.as_root else ch.source in host.dir_sources,
            view=view,
        )
        for name, ch in job.spec.channels.items()
        if ch.mode in FILE_MODES
    ]


def write_env_file(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)


@dataclass(frozen=True)
class HostFacts:
    """What a launch depends on outside the job: looked up (I/O) by `look_up` before
    `build_launch`, which is then a pure function."""

    as_root: bool  # trainqd runs as root: the monitor binds and mounts for the job
    engine: engine.Engine | None  # the container engine found on the PATH (container jobs)
    # File mode channel sources that are directories; asked only when trainqd is not root,
    # and so is the owner (a root trainqd leaves it to the monitor and the owner's rights).
    dir_sources: frozenset[str]
    daemon_environment: Mapping[str, str]  # trainqd's own, for the engine client's


def look_up(job: JobRow, settings: LaunchSettings) -> HostFacts:
    """InvalidSpec if a container job's engine is not installed."""
    spec = job.spec
    as_root = os.geteuid() == 0
    return HostFacts(
        as_root=as_root,
        engine=(
            None if spec.image is None else engine.find_engine(spec.engine, settings.default_engine)
        ),
        dir_sources=frozenset(
            ch.source
            for ch in spec.channels.values()
            if not as_root and ch.mode in FILE_MODES and os.path.isdir(ch.source)
        ),
        daemon_environment=dict(os.environ),
    )


@dataclass(frozen=True)
class NodePlace:
    """One node of a job of several nodes (attempts/nodes.py): its host name, its
    resourceconfig.json, the variables that place it in the gang, and a container node's
    engine network (its container named and aliased by the host name there)."""

    name: str
    resources: dict[str, Any]
    env: dict[str, str]
    engine_network: str | None = None


@dataclass(frozen=True)
class Attempt:
    """One attempt about to start: the job, its number, where it runs and as whom."""

    job: JobRow
    number: int
    gpus: Assignment
    account: Account
    paths: AttemptPaths
    settings: LaunchSettings
    host: HostFacts
    node: NodePlace | None = None


@dataclass(frozen=True)
class BuiltLaunch:
    """The launch, and the engine's env file (path, text) to write before it starts."""

    launch: Launch
    env_file: tuple[str, str] | None = None
    more_env_files: tuple[tuple[str, str], ...] = ()  # a container gang's, one per node


def build_launch(at: Attempt, now: float) -> BuiltLaunch:
    """Pure: everything it needs is in `at` (host facts included)."""
    job, account, paths = at.job, at.account, at.paths
    spec = job.spec
    remaining = remaining_runtime(job)
    resources = None if at.node is None else at.node.resources

    def launch(
        runtime: Literal["subprocess", "container"],
        argv: list[str],
        env: dict[str, str],
        cwd: str,
        *,
        file_channels: list[FileChannel],
        container: ContainerLaunch | None = None,
    ) -> Launch:
        return Launch(
            job_id=job.id,
            attempt=at.number,
            runtime=runtime,
            argv=argv,
            env=env,
            cwd=cwd,
            owner=Credentials(
                uid=account.uid,
                gid=account.gid,
                groups=list(account.groups),
                user=account.user,
                home=account.home,
            ),
            ml_root=str(paths.ml_root),
            attempt_dir=str(paths.attempt_dir),
            stop_file=str(paths.stop_file),
            stop_grace_seconds=stop_grace(job, at.settings.default_stop_grace_seconds),
            deadline=None if remaining is None else now + max(0.0, remaining),
            pipe_channels=_pipe_channels(job),
            container=container,
            ml_files=contract.config_files(spec, resources),
            file_channels=file_channels,
            max_processes=at.settings.max_processes,
        )

    if spec.image is None:
        ml_root = str(paths.ml_root)
        env = contract.login_environment(account.user, account.home, account.shell, None)
        env.update(
            contract.trainer_environment(
                spec=spec,
                job_id=job.id,
                name=job.display_name,
                owner_uid=job.owner.uid,
                attempt=at.number,
                base=ml_root,
                gpus=at.gpus,
                host_ml_root=ml_root,
                resources=resources,
            )
        )
        if at.node is not None:
            env.update(at.node.env)
        assert spec.command is not None
        return BuiltLaunch(
            launch(
                "subprocess",
                list(spec.command),
                env,
                spec.working_dir or ml_root,
                file_channels=_file_channels(job, "link", at.host),
            )
        )
    return _container_launch(at, launch)


def _container_launch(at: Attempt, launch: Callable[..., Launch]) -> BuiltLaunch:
    job, attempt, gpus, account, paths, settings = (
        at.job, at.number, at.gpus, at.account, at.paths, at.settings
    )  # fmt: skip
    spec = job.spec
    assert spec.image is not None
    eng = at.host.engine
    assert eng is not None  # look_up found it, or refused the launch
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
        resources=None if at.node is None else at.node.resources,
    )
    if at.node is not None:
        env.update(at.node.env)
    # Settled again at the start: the configuration may have changed since the submit.
    check_image(spec.image, settings.allowed_images)
    # No value on the engine's command line (engine.py says why and how).
    in_file, from_client = engine.split_environment(env)
    env_file = str(paths.attempt_dir / "env")
    # A root trainqd's engine mounts the binds that the monitor makes (monitor/mounts.py).
    staged = at.host.as_root
    attempt_dir = str(paths.attempt_dir)
    ml_source = mounts.ml_root_source(attempt_dir) if staged else str(paths.ml_root)
    binds = [engine.Mount(ml_source, CONTAINER_BASE, read_only=False)]
    for name, ch in spec.channels.items():
        if ch.mode not in FILE_MODES:
            continue
        target = f"{CONTAINER_BASE}/input/data/{name}"
        # Staged, the channel is a directory whatever its source (mounts.py); unstaged, the
        # engine binds a single file onto a file inside it.
        if not staged and ch.source not in at.host.dir_sources:
            target += "/" + os.path.basename(ch.source.rstrip("/"))
        source = mounts.channel_source(attempt_dir, name) if staged else ch.source
        binds.append(engine.Mount(source, target, read_only=True))
    name = engine.container_name(settings.instance, job.id, attempt)
    node = at.node
    if node is not None:
        name += f"-{node.name}"
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
        network=spec.network if node is None else node.engine_network,
        host=None if node is None else node.name,
        gpu_uuids=gpus.uuids,
        real_gpus=settings.real_gpus,
        capabilities=settings.container_capabilities,
        pids_limit=settings.max_processes,
        passed_env=list(from_client),
    )
    return BuiltLaunch(
        launch(
            "container",
            argv,
            engine.client_environment(dict(at.host.daemon_environment), from_client),
            "/",
            file_channels=_file_channels(job, "mountpoint", at.host),
            container=ContainerLaunch(engine=eng.name, engine_path=eng.path, name=name),
        ),
        env_file=(env_file, engine.env_file_text(in_file)),
    )
