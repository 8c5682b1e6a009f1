"""What a spec must satisfy on this host before it is queued (the checks the spec model
cannot make alone): GPUs the host has, an installed engine, images the configuration
allows, paths the submitter can read, who may run an image as root, and a class the
submitter may use. Each refusal is one
line naming what to change.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from trainq.core.errors import Conflict, InvalidSpec
from trainq.core.export.slurm import gang_refusal
from trainq.core.nodes import cpu_nodes, is_gang
from trainq.core.spec import JobSpec
from trainqd.access.authorization import Authorizer
from trainqd.access.budgets import check_channels
from trainqd.access.identity import account
from trainqd.access.image_policy import check_image
from trainqd.access.paths import PATH_CHECK_TIMEOUT, check_job_paths, check_paths_together
from trainqd.attempts.engine import EngineName, find_engine
from trainqd.planning.classes import JobClass, class_of
from trainqd.planning.records import DEFAULT_CLASS
from trainqd.store import JobOwner


@dataclass(frozen=True)
class HostFacts:
    gpu_backend: str  # nvml | fake | none, or slurm (the back end's sbatch judges GPUs)
    gpu_count: int
    default_engine: EngineName | None
    allowed_images: tuple[str, ...] = ("*",)
    # The administrator's classes (config.job_classes) and the one a job naming none gets.
    classes: Mapping[str, JobClass] = field(default_factory=lambda: {DEFAULT_CLASS: JobClass()})
    default_class: str = DEFAULT_CLASS
    max_channels: int = 64  # trainqd's max_channels_per_job
    path_check_seconds: float = PATH_CHECK_TIMEOUT  # config.path_check_timeout_seconds
    mail: bool = False  # an administrator set a mail_command (`--mail`)
    cpu_slots: int | None = None  # config.cpu_slots; None: not judged at submit


def check_gpus(spec: JobSpec, host: HostFacts) -> None:
    wanted = spec.total_gpus
    if wanted <= host.gpu_count or host.gpu_backend == "slurm":
        return
    asks = f"{wanted} GPU" + ("" if wanted == 1 else "s")
    asks += "" if spec.node_count == 1 else " on its nodes together"
    if host.gpu_count == 0:
        raise InvalidSpec(
            f"the job asks for {asks} but this host has none that trainq manages "
            f"(GPU backend: {host.gpu_backend})"
        )
    raise InvalidSpec(f"the job asks for {asks} but this host has {host.gpu_count}")


def check_nodes(spec: JobSpec, host: HostFacts) -> None:
    """A job of several nodes runs on this host's back end (trainqd.attempts.nodes), or on
    Slurm's nodes as far as a Slurm step can run it (trainqd.backends.slurm_nodes)."""
    if not is_gang(spec):
        return
    refused = gang_refusal(spec) if host.gpu_backend == "slurm" else None
    if refused is not None:
        field, why = refused
        raise InvalidSpec(f"the Slurm back end cannot run it: {field}: {why}")
    # On this host's back end each node without GPUs takes a CPU slot (Slurm judges its own).
    slots = cpu_nodes(spec)
    if host.gpu_backend != "slurm" and host.cpu_slots is not None and slots > host.cpu_slots:
        raise InvalidSpec(
            f"the job has {slots} nodes without GPUs, each taking a CPU slot, "
            f"but this host has {host.cpu_slots} (cpu_slots)"
        )


def check_class(spec: JobSpec, uid: int, host: HostFacts, authorizer: Authorizer) -> None:
    """The class a job runs in must exist, be one `uid` may use, and allow its time limit."""
    name = class_of(spec.job_class, host.default_class)
    job_class = host.classes.get(name)
    if job_class is None:
        raise InvalidSpec(f"no class {name!r}; the classes are {', '.join(sorted(host.classes))}")
    authorizer.require_class(uid, name, job_class)
    most = job_class.max_runtime_seconds
    if most is not None and (spec.max_runtime_seconds is None or spec.max_runtime_seconds > most):
        raise InvalidSpec(
            f"class {name!r} runs jobs for at most {most} s: "
            f"set max_runtime_seconds (--max-runtime) to {most} or less"
        )


async def admit(
    spec: JobSpec, uid: int, host: HostFacts, authorizer: Authorizer, *, paths: bool = True
) -> JobOwner:
    """The job's owner if the spec may be queued; raises InvalidSpec or Forbidden. Its paths
    are checked too, unless `paths` is False (a list's, checked together by the caller)."""
    owner = authorizer.owner_for_submit(uid)
    check_channels(spec, host.max_channels)
    check_gpus(spec, host)
    check_nodes(spec, host)
    check_class(spec, uid, host, authorizer)
    if spec.mail and not host.mail:
        raise InvalidSpec(
            "mail: this trainqd sends no mail (its administrator set no mail_command)"
        )
    if spec.image is not None:
        find_engine(spec.engine, host.default_engine)
        check_image(spec.image, host.allowed_images)
        for group in spec.instance_groups:  # a group's own image runs as the job's would
            if group.image is not None:
                check_image(group.image, host.allowed_images)
        if spec.run_as_root:
            authorizer.require_run_as_root(uid)
    if paths:
        await check_job_paths(spec, account(uid), host.path_check_seconds)
    return owner


async def admit_paths(specs: Mapping[int, JobSpec], uid: int, host: HostFacts) -> None:
    """The paths of a list's distinct specs (by index), in one check within one deadline."""
    await check_paths_together(specs, account(uid), host.path_check_seconds)


def check_queue_room(user: str, unfinished: int, adding: int, most: int) -> None:
    """A user's unfinished jobs, with those being submitted, stay within
    `max_unfinished_jobs_per_user` (`most`, 0: no limit)."""
    if most and unfinished + adding > most:
        raise Conflict(
            f"{user} has {unfinished} unfinished jobs and may have at most {most} "
            f"(trainqd's max_unfinished_jobs_per_user); {adding} more would pass it: "
            "wait for some to end, or stop some"
        )


def check_change(spec: JobSpec, uid: int, host: HostFacts, authorizer: Authorizer) -> None:
    """A pending job's changed spec (`trainq update` by `uid`: its owner or an admin): the
    checks of `admit` that the keys a change may touch (GPUs, time limit, priority, class)
    depend on. Its command, image and paths are as they were admitted."""
    check_gpus(spec, host)
    check_class(spec, uid, host, authorizer)


def check_running_limit(spec: JobSpec, uid: int, host: HostFacts, authorizer: Authorizer) -> None:
    """A running job's new time limit (`trainq update --max-runtime` by `uid`): within its
    class's maximum for its owner; an admin may go beyond it (and lift it)."""
    if authorizer.is_admin(uid):
        return
    check_class(spec, uid, host, authorizer)
