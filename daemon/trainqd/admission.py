"""What a spec must satisfy on this host before it is queued (the checks the spec model
cannot make alone): GPUs the host has, an installed engine, images the configuration
allows, paths the submitter can read, and who may run an image as root. Each refusal is one
line naming what to change.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainq.core.errors import InvalidSpec
from trainq.core.spec import JobSpec
from trainqd.access import check_job_paths
from trainqd.authorization import Authorizer
from trainqd.engine import EngineName, find_engine
from trainqd.identity import account
from trainqd.image_policy import check_image
from trainqd.store import JobOwner


@dataclass(frozen=True)
class HostFacts:
    gpu_backend: str  # nvml | fake | none
    gpu_count: int
    default_engine: EngineName | None
    allowed_images: tuple[str, ...] = ("*",)


def check_gpus(spec: JobSpec, host: HostFacts) -> None:
    if spec.gpus <= host.gpu_count:
        return
    if host.gpu_count == 0:
        raise InvalidSpec(
            f"the job asks for {spec.gpus} GPUs but this host has none that trainq manages "
            f"(GPU backend: {host.gpu_backend})"
        )
    raise InvalidSpec(f"the job asks for {spec.gpus} GPUs but this host has {host.gpu_count}")


async def admit(spec: JobSpec, uid: int, host: HostFacts, authorizer: Authorizer) -> JobOwner:
    """The job's owner if the spec may be queued; raises InvalidSpec or Forbidden."""
    owner = authorizer.owner_for_submit(uid)
    check_gpus(spec, host)
    if spec.image is not None:
        find_engine(spec.engine, host.default_engine)
        check_image(spec.image, host.allowed_images)
        if spec.run_as_root:
            authorizer.require_run_as_root(uid)
    await check_job_paths(spec, account(uid))
    return owner
