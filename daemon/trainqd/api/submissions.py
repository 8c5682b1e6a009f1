"""The list form of `POST /v1/jobs` (a sweep): every spec parsed and admitted before any is
queued, and each refusal one line that names the spec's place in the list (`jobs[3]: ...`).
Nothing of a list is queued unless all of it can be.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import ValidationError

from trainq.core.errors import InvalidRequest, InvalidSpec, TrainqError
from trainq.core.spec import JobSpec, describe_validation_error
from trainqd.access.admission import HostFacts, admit, admit_paths
from trainqd.access.authorization import Authorizer
from trainqd.api.routing import Request
from trainqd.store import JobOwner

# Bodies up to this size are parsed on the event loop; larger ones on a worker thread.
PARSE_ON_LOOP_BYTES = 64 * 1024


def is_list(body: bytes) -> bool:
    """Whether the body is a JSON list (of specs) rather than one spec."""
    return body.lstrip()[:1] == b"["


def parse_specs(request: Request, cap: int) -> list[JobSpec]:
    """The specs of a list submission, validated; InvalidRequest for an empty list or one
    longer than `cap`, InvalidSpec naming the first bad spec's index."""
    items = request.json()
    if not isinstance(items, list):
        raise InvalidRequest("request body must be a JSON object (a spec) or a list of specs")
    if not items:
        raise InvalidRequest("the list of jobs is empty; send one spec or a list of at least one")
    if len(items) > cap:
        raise InvalidRequest(
            f"{len(items)} jobs in one request; at most {cap} may be submitted at once "
            "(trainqd's max_jobs_per_submit)"
        )
    specs = []
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise InvalidSpec(f"jobs[{index}]: a spec is a JSON object, not {_kind(item)}")
        try:
            specs.append(JobSpec.model_validate(item))
        except ValidationError as exc:
            raise InvalidSpec(describe_validation_error(exc, f"jobs[{index}]")) from None
    return specs


def _kind(value: object) -> str:
    return {list: "a list", str: "a string", type(None): "null", bool: "a boolean"}.get(
        type(value), "a number"
    )


def judged_alike(specs: Sequence[JobSpec]) -> list[int]:
    """The index of the first spec of each set that admission judges alike: specs that
    differ only in hyperparameters and name (a sweep's points) ask the same of the host
    (GPUs, an image, paths to read as the submitter), so one check stands for all of them,
    and a sweep of 10,000 points checks its paths once, not 10,000 times."""
    seen: set[str] = set()
    firsts = []
    for index, spec in enumerate(specs):
        key = spec.model_dump_json(exclude={"hyperparameters", "name"})
        if key not in seen:
            seen.add(key)
            firsts.append(index)
    return firsts


async def admit_all(
    specs: Sequence[JobSpec],
    firsts: Sequence[int],
    uid: int,
    host: HostFacts,
    authorizer: Authorizer,
) -> JobOwner:
    """The jobs' owner if every spec may be queued; the first refusal otherwise, as its
    own class (InvalidSpec, Forbidden) with the spec's index in front."""
    owner: JobOwner | None = None
    for index in firsts:
        try:
            owner = await admit(specs[index], uid, host, authorizer, paths=False)
        except TrainqError as exc:
            error = type(exc)(f"jobs[{index}]: {exc.message}")
            raise error from None
    assert owner is not None  # a list is never empty here
    # All their paths in one check: one child, one deadline, however many specs.
    await admit_paths({index: specs[index] for index in firsts}, uid, host)
    return owner
